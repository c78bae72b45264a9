"""What each violation kind means, at length: SARIF rules' `fullDescription` and `help`.

The help of a kind is its page in `docs/kinds/KIND.md` (what it means, a bad and a good
pattern from this repository's `examples/` and `models/`, and the fix). The pages travel
with the package (`semcheck/kind_pages` links to `docs/kinds`, and the wheel holds them as
package data), so a SARIF rule carries its whole page as its help wherever semcheck runs.
"""

from __future__ import annotations

import functools
import os

from semcheck.properties import Kind

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
        "or that arrives after the kernel exited). The TPU runtime fails at kernel exit."
    ),
    Kind.INVALID_DEVICE_ID: (
        "A remote signal or DMA computes a target device outside the mesh, usually a ring "
        "neighbour that does not wrap around. On hardware this is undefined behaviour."
    ),
    Kind.INVALID_CORE_INDEX: (
        "A signal or DMA targets a core index the chip does not have (e.g. core 1 on a "
        "single-TensorCore chip)."
    ),
    Kind.INVALID_SEMAPHORE_INDEX: (
        "A semaphore array is indexed outside its bounds, so the signal or wait touches a "
        "semaphore that was never allocated."
    ),
    Kind.INVALID_REGION: (
        "A DMA's source or destination window reaches outside its buffer (its start plus its "
        "size passes the buffer's extent). JAX's TPU interpreter fails such a copy; on "
        "hardware it touches memory that is not the buffer."
    ),
    Kind.DATA_RACE: (
        "Two accesses to overlapping memory, at least one a write, are left unordered by some "
        "schedule: typically the kernel reads or overwrites a buffer slot while a DMA into or "
        "out of it is still in flight, because no wait orders the two. The data is then "
        "whatever the schedule makes it."
    ),
    Kind.REMOTE_BEFORE_ENTRY: (
        "A remote signal or DMA can reach a core before that core entered the sender's kernel "
        "invocation, or after it moved on to a later one; entry resets its semaphores, so the "
        "signal is lost or lands in the wrong call. A kernel with its own collective_id needs "
        "its own entry handshake."
    ),
    Kind.BARRIER_PHASE_OVERRUN: (
        "GPU: an mbarrier completes two phases before a thread that waits on it has waited for "
        "the first. Waits are by phase parity, so that thread's wait can no longer see its "
        "phase, and it waits for one that may never come."
    ),
    Kind.NOT_LOWERABLE: (
        "The construct traces, but the backend's compiler rejects it (e.g. "
        "semaphore_wait(decrement=False) on TPU). semcheck analyzes the protocol anyway, as the "
        "construct would run elsewhere, so the rest of the findings still hold."
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
