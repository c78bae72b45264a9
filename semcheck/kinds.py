"""The violation kinds: a fixed vocabulary shared by the semantics, the engines, every report
and the expectations. It sits at the bottom of the import order and imports nothing of
semcheck's, so any layer can name a kind without importing the semantics."""

from __future__ import annotations

import enum


class Kind(str, enum.Enum):
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


SEVERITY = {kind: "error" for kind in Kind} | {Kind.NOT_LOWERABLE: "warning"}

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
    Kind.INVALID_REGION: "A DMA's source or destination window reaches outside its buffer.",
    Kind.DATA_RACE: "Two accesses to overlapping memory, one a write, that some execution leaves unordered.",
    Kind.REMOTE_BEFORE_ENTRY: "A remote signal or copy can reach a core before it entered the sender's kernel invocation, or after it moved on to a later one.",
    Kind.BARRIER_PHASE_OVERRUN: "GPU: an mbarrier completes two phases before a thread that waits on it has waited for the first.",
    Kind.NOT_LOWERABLE: "Legal to trace, but rejected by the backend's compiler (analyzed anyway).",
}


# What a thread hits when an instruction names something that does not exist.
FAULT_KINDS = frozenset({
    Kind.INVALID_DEVICE_ID, Kind.INVALID_CORE_INDEX, Kind.INVALID_SEMAPHORE_INDEX, Kind.INVALID_REGION,
})
