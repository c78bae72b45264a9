"""The violation kinds: a fixed vocabulary shared by the semantics, the engines, every report
and the expectations. It sits at the bottom of the import order and imports nothing of
semcheck's, so any layer can name a kind without importing the semantics."""

from __future__ import annotations

import enum


class Kind(str, enum.Enum):
    """A violation's kind; its value is the name JSON, SARIF and the docs use, and what
    `str()` and f-strings give (as a 3.11 `StrEnum` would; semcheck runs on 3.10 too)."""

    DEADLOCK = "deadlock"
    UNSATISFIED_WAIT = "unsatisfied_wait"
    SEMAPHORE_LEFTOVER = "semaphore_leftover"
    INVALID_DEVICE_ID = "invalid_device_id"
    INVALID_CORE_INDEX = "invalid_core_index"
    INVALID_SEMAPHORE_INDEX = "invalid_semaphore_index"
    INVALID_REGION = "invalid_region"
    DATA_RACE = "data_race"
    REMOTE_BEFORE_ENTRY = "remote_before_entry"
    BARRIER_PHASE_OVERRUN = "barrier_phase_overrun"
    NOT_LOWERABLE = "not_lowerable"
    LOWERED_AS_DECREMENTING = "lowered_as_decrementing"
    MESH_SMALLER_THAN_DEVICES = "mesh_smaller_than_devices"

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


SEVERITY = {kind: "error" for kind in Kind} | {
    Kind.LOWERED_AS_DECREMENTING: "warning", Kind.MESH_SMALLER_THAN_DEVICES: "warning",
}

# One line per kind: SARIF rule descriptions and `semcheck --help` use these.
DESCRIPTIONS = {
    Kind.DEADLOCK: "A reachable state where no thread can move and the blocked waits form a cycle.",
    Kind.UNSATISFIED_WAIT: (
        "A reachable state where a thread is blocked on a wait that nothing left can satisfy, "
        "or polls in a loop that no schedule lets it leave."
    ),
    Kind.SEMAPHORE_LEFTOVER: "TPU: a scratch, scoped or barrier semaphore is non-zero when the kernel exits.",
    Kind.INVALID_DEVICE_ID: "A remote signal or DMA targets a device outside the mesh.",
    Kind.INVALID_CORE_INDEX: "A signal or DMA targets a core that does not exist.",
    Kind.INVALID_SEMAPHORE_INDEX: "A semaphore array is indexed outside its bounds.",
    Kind.INVALID_REGION: "A DMA's window, or a load's or store's, reaches outside its buffer.",
    Kind.DATA_RACE: "Two accesses to overlapping memory, one a write, that some execution leaves unordered.",
    Kind.REMOTE_BEFORE_ENTRY: (
        "A remote signal or copy can reach a core before it entered the sender's kernel invocation, or after it "
        "moved on to a later one; or a barrier wait passes on a signal a peer sent from a later invocation."
    ),
    Kind.BARRIER_PHASE_OVERRUN: "GPU: an mbarrier completes two phases before a thread that waits on it has waited for the first.",
    Kind.NOT_LOWERABLE: (
        "JAX's own lowering rejects the kernel, so it does not build for the chip (TPU: Pallas TPU "
        "lowering; GPU: Mosaic GPU's check of the mesh's device order)."
    ),
    Kind.LOWERED_AS_DECREMENTING: (
        "TPU: semaphore_wait(decrement=False) is lowered by JAX as an ordinary decrementing wait "
        "(checked the way the chip runs it)."
    ),
    Kind.MESH_SMALLER_THAN_DEVICES: (
        "The kernel's mesh has fewer devices than the check ran the script with (e.g. "
        "jax.devices()[:4] under --devices 8): the larger count was not checked."
    ),
}


# How each kind is usually fixed: the last line of every report of it.
FIX_HINTS = {
    Kind.DEADLOCK: (
        "break the cycle: let one thread of it signal (or start its copy) before it waits, "
        "or make every device take its waits in the same order"
    ),
    Kind.UNSATISFIED_WAIT: (
        "add the signal or copy that never comes (the sites above say which could), or wait "
        "only for what does arrive"
    ),
    Kind.SEMAPHORE_LEFTOVER: (
        "consume every addition before the kernel exits: wait for it (e.g. after the last "
        "step), or do not signal it; a barrier semaphore needs as many waits as signals"
    ),
    Kind.INVALID_DEVICE_ID: "wrap the peer's id into the mesh (e.g. (d + 1) % n), or guard the signal or copy with pl.when",
    Kind.INVALID_CORE_INDEX: "use a core index below the number of cores (or blocks) the mesh has",
    Kind.INVALID_SEMAPHORE_INDEX: "index the semaphore array within its size (allocate one per slot or step)",
    Kind.INVALID_REGION: (
        "keep the copy's, load's or store's window inside its buffer, and inside the .at[...] view it "
        "indexes: clamp the start, shrink the size near the end, or split the access at the view's end"
    ),
    Kind.DATA_RACE: (
        "wait for the copy's semaphore before touching its memory, or give each copy in flight "
        "its own slot and semaphore"
    ),
    Kind.REMOTE_BEFORE_ENTRY: (
        "handshake first: signal the barrier semaphore of each peer and wait for theirs before "
        "any remote signal or copy"
    ),
    Kind.BARRIER_PHASE_OVERRUN: (
        "make the arriving side wait until every waiter is done with the phase (e.g. on a "
        "'consumed' barrier) before it arrives again"
    ),
    Kind.NOT_LOWERABLE: "rewrite the construct JAX's message names in a form Pallas TPU lowers (the message says which)",
    Kind.LOWERED_AS_DECREMENTING: (
        "poll with pl.semaphore_read in a loop and then take what you saw with one ordinary wait "
        "(examples/tpu/poll_arrivals.py), or wait, decrementing, for exactly what each wait should take"
    ),
    Kind.MESH_SMALLER_THAN_DEVICES: "build the mesh from all of jax.devices(), or leave the larger count out of --devices",
}


# Findings of the lowering itself (ir.LoweringFinding): about the kernel, not a schedule, so
# they have no trace and no counterexample to draw.
LOWERING_KINDS = frozenset({Kind.NOT_LOWERABLE, Kind.LOWERED_AS_DECREMENTING})

# What a thread hits when an instruction names something that does not exist.
FAULT_KINDS = frozenset({
    Kind.INVALID_DEVICE_ID, Kind.INVALID_CORE_INDEX, Kind.INVALID_SEMAPHORE_INDEX, Kind.INVALID_REGION,
})


class StoppedBy(str, enum.Enum):
    """What ended a search before it covered everything (the JSON's
    `inconclusive_reason.stopped_by`): which limit to raise, or that none would help."""

    TIME = "time"  # --timeout
    MEMORY = "memory"  # --max-memory
    STATES = "states"  # --max-states
    STOP = "stop"  # ended from outside: another engine decided first, or an interrupt
    BOUND = "bound"  # the engine's own bound: z3's unrolling (--unroll), a random walk's step cap
    ENGINE = "engine"  # what the engine cannot do: a construct it does not model, a solver that gave up, random walks that prove nothing
