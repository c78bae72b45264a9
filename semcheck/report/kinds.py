"""What each violation kind means, at length: SARIF rules' `fullDescription` and `help`.

The help of a kind is its page in `docs/kinds/KIND.md` (what it means, a bad and a good
pattern from this repository's `examples/` and `models/`, and the fix). The pages travel
with the package (`semcheck/kind_pages` links to `docs/kinds`, and the wheel holds them as
package data), so a SARIF rule carries its whole page as its help wherever semcheck runs.
"""

from __future__ import annotations

import functools
import os

from semcheck.kinds import Kind

DOCS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kind_pages")

FULL_DESCRIPTIONS: dict[Kind, str] = {
    Kind.DEADLOCK: (
        "Some schedule reaches a state where no thread can move, and the blocked waits form a "
        "cycle: each thread waits for a signal or copy that only the next thread in the cycle "
        "would send, and that thread is itself blocked. On hardware the kernel hangs."
    ),
    Kind.UNSATISFIED_WAIT: (
        "Some schedule reaches a state where a thread waits for a semaphore value that nothing "
        "left in the system can supply (too few signals or bytes, a signal sent to the wrong "
        "device or semaphore), or polls in a loop that no schedule lets it leave. On hardware "
        "the kernel hangs."
    ),
    Kind.SEMAPHORE_LEFTOVER: (
        "On TPU every scratch, scoped and barrier semaphore must be back to zero when the kernel "
        "exits; some schedule leaves one non-zero (a signal or copy that is never waited for, "
        "or that arrives after the kernel exited). A scratch semaphore left non-zero halts the "
        "core at exit; with disable_semaphore_checks=True, and always for the barrier "
        "semaphore, nothing stops and the count carries into the next kernel, whose waits it "
        "can pass early."
    ),
    Kind.INVALID_DEVICE_ID: (
        "A remote signal or DMA computes a target device outside the mesh, usually a ring "
        "neighbour that does not wrap around. A constant id outside the mesh is rejected by "
        "Mosaic's compiler ('Invalid device_id'); what a run-time id outside it does on the "
        "chip was not observed."
    ),
    Kind.INVALID_CORE_INDEX: (
        "A signal or DMA targets a core index the chip does not have (e.g. core 1 on a "
        "single-TensorCore chip)."
    ),
    Kind.INVALID_SEMAPHORE_INDEX: (
        "A semaphore array is indexed outside its bounds. On the chip nothing stops it: the "
        "signal or wait silently acts on some other semaphore, and the array's own stay as "
        "they were."
    ),
    Kind.INVALID_REGION: (
        "A DMA's source or destination window reaches outside its buffer (its start plus its "
        "size passes the buffer's extent). A static window outside is refused when the kernel "
        "is traced ('Out of bound slice'); one from run-time values halts the core through "
        "Mosaic's bounds check, on by default (with disable_bounds_checks=True it would touch "
        "memory that is not the buffer). A TPU vector load or store (ref[...] = v, ref[...]) "
        "outside its ref is passed through unclamped by Mosaic, so it reads or writes whatever "
        "lies there; JAX's TPU interpreter raises."
    ),
    Kind.DATA_RACE: (
        "Two accesses to overlapping memory, at least one a write, are left unordered by some "
        "schedule: typically the kernel reads or overwrites a buffer slot while a DMA into or "
        "out of it is still in flight, because no wait orders the two. The data is then "
        "whatever the schedule makes it."
    ),
    Kind.REMOTE_BEFORE_ENTRY: (
        "A remote signal or DMA can reach a core before that core entered the sender's kernel "
        "invocation, or after it moved on to a later one, so it lands on a semaphore the core "
        "is using for another kernel call, where it is miscounted or left over. A kernel with "
        "its own collective_id needs its own entry handshake."
    ),
    Kind.BARRIER_PHASE_OVERRUN: (
        "GPU: an mbarrier completes two phases before a thread that waits on it has waited for "
        "the first. Waits are by phase parity, so that thread's wait can no longer see its "
        "phase, and it waits for one that may never come."
    ),
    Kind.NOT_LOWERABLE: (
        "JAX's own Pallas TPU lowering, run on the CPU for the TPU platform, rejects the kernel "
        "(e.g. an array value indexed with a traced index: 'Unimplemented primitive in Pallas "
        "TPU lowering for tc: dynamic_slice'), so it does not build for a TPU as written. "
        "semcheck still checks its protocol, so its other findings hold for the kernel once it "
        "is rewritten the same way. Mosaic's own compiler (libtpu) cannot run on a CPU, so what "
        "only Mosaic rejects is not found."
    ),
    Kind.LOWERED_AS_DECREMENTING: (
        "semaphore_wait(sem, v, decrement=False) in a TPU kernel lowers to an ordinary "
        "decrementing tpu.sem_wait: the guard in JAX's lowering rule that should reject it "
        "never fires, so on the chip the wait takes v. semcheck checks the kernel that way; a "
        "poll followed by a wait for the same count then hangs."
    ),
    Kind.MESH_SMALLER_THAN_DEVICES: (
        "The kernel's mesh has fewer devices than the script was run with (e.g. a mesh of "
        "jax.devices()[:4] under --devices 8), so the larger count was never checked; "
        "--expectations fails on it unless it is declared."
    ),
}

def page_path(kind: Kind) -> str:
    """The kind's help page, relative to the repository root."""
    return f"docs/kinds/{kind.value}.md"


@functools.lru_cache(maxsize=None)
def help_markdown(kind: Kind) -> str:
    try:
        with open(os.path.join(DOCS_DIR, f"{kind.value}.md"), encoding="utf-8") as f:
            return f.read()
    except OSError:  # a copy of the package without its pages: the description is the help
        return f"# {kind.value}\n\n{FULL_DESCRIPTIONS[kind]}\n"
