"""A state of the transition system and its parts: program counters, registers, semaphore
counts (`Counts`, sparse), DMA completions in flight (`Event`s, each with the memory its copy
still touches as `Access`es), faults and hazards. Every part is immutable, so a state hashes
and compares by value; what an action is (`Action`: a `ThreadStep` or an `EventFires`)."""

from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple

from semcheck import ir
from semcheck.ir import Backend, DmaSide, SemKind, SemOrigin

# --- faults: what a thread hits when an instruction names something that does not exist -------

INVALID_DEVICE = "invalid_device_id"
INVALID_CORE = "invalid_core_index"
INVALID_SEM_INDEX = "invalid_semaphore_index"
INVALID_REGION = "invalid_region"


class Fault(Exception):
    def __init__(self, kind: str, detail: str):
        self.kind, self.detail = kind, detail


# --- state and actions -----------------------------------------------------------------------

FAULTED = -1  # the pc of a thread that executed an instruction naming a non-existent target

SEND, RECV = DmaSide.SEND, DmaSide.RECV


class Access(NamedTuple):
    """A rectangular region of one buffer instance, read or written (`atomic`: by an atomic
    read-modify-write, `ir.Store.atomic`)."""

    write: bool
    buffer: int  # buffer instance
    starts: tuple[int, ...]
    sizes: tuple[int, ...]
    atomic: bool = False


class Event(NamedTuple):
    """A pending DMA completion. Identical events are interchangeable (a multiset)."""

    side: DmaSide
    issuer: int  # thread index that started the copy
    start_pc: int  # where it started (for messages and the graph)
    sem: int  # semaphore instance that completion adds to
    inc: int
    accesses: tuple[Access, ...] = ()  # what the copy still reads/writes until this completes
    invocation: int = 0  # the issuer's kernel invocation when it started (0: no lifecycle)


DATA_RACE = "data_race"
# Two plain accesses of different threads (a load or store each) that are enabled at once:
# nothing orders them, so some schedule runs them in either order (the same `data_race`
# finding as an access against a copy in flight; only the message differs).
PLAIN_RACE = "plain_race"
REMOTE_BEFORE_ENTRY = "remote_before_entry"
BARRIER_PHASE_OVERRUN = "barrier_phase_overrun"
LEFTOVER_AT_EXIT = "semaphore_leftover"


class Hazard(NamedTuple):
    """Something wrong that a transition saw happen; recorded in the state for good.

    (thread, pc) is the instruction that saw it (for an arriving copy: the copy's start);
    (other_thread, other_pc) the other party, or -1; `sem` the semaphore instance it is
    about (a leftover count, an overrun barrier, where an early arrival lands), or -1.
    """

    kind: str
    thread: int
    pc: int
    other_thread: int
    other_pc: int
    detail: str
    sem: int = -1
    # A data race between the writes of two copies that one thread started to one device:
    # it needs the later copy to land before the earlier one (tpu_facts.ISSUE_ORDER_READING).
    same_path: bool = False
    # A race between two writes that both store one and the same value in every element
    # (`ir.Fill`): it cannot change the bytes on its own (still a race; the message says so).
    same_bytes: bool = False


class Counts:
    """Every semaphore instance's count, stored sparsely: the (id, count) pairs that are not
    0, in id order. Reads like a tuple of all counts (`counts[sid]`, `len`, iteration), and
    compares and hashes by value; a step copies only the counts that are not 0, so a state
    of a protocol with N^2 semaphore instances (one per step per device) stays small."""

    __slots__ = ("size", "items", "_hash")

    def __init__(self, size: int, items: tuple[tuple[int, int], ...] = ()):
        self.size, self.items = size, items
        self._hash: int | None = None

    @classmethod
    def dense(cls, counts) -> "Counts":
        counts = list(counts)
        return cls(len(counts), tuple((sid, c) for sid, c in enumerate(counts) if c))

    def __getitem__(self, sid: int) -> int:
        items = self.items
        k = bisect_left(items, (sid,))
        return items[k][1] if k < len(items) and items[k][0] == sid else 0

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        dense = [0] * self.size
        for sid, count in self.items:
            dense[sid] = count
        return iter(dense)

    def nonzero(self) -> tuple[tuple[int, int], ...]:
        return self.items

    def add(self, sid: int, delta: int) -> "Counts":
        items = self.items
        k = bisect_left(items, (sid,))
        if k < len(items) and items[k][0] == sid:
            count = items[k][1] + delta
            middle = ((sid, count),) if count else ()
            return Counts(self.size, items[:k] + middle + items[k + 1:])
        if not delta:
            return self
        return Counts(self.size, items[:k] + ((sid, delta),) + items[k:])

    def zeroed(self, sids: frozenset[int]) -> "Counts":
        kept = tuple(item for item in self.items if item[0] not in sids)
        return self if len(kept) == len(self.items) else Counts(self.size, kept)

    def __eq__(self, other) -> bool:
        if isinstance(other, Counts):
            return self.items == other.items and self.size == other.size
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.items)
        return self._hash

    def __repr__(self) -> str:
        return f"Counts({self.size}, {dict(self.items)})"


# A protocol whose barrier semaphores no kernel invocation shares with a later one keeps no
# ledger (`State.ledger`): its states are what they were before there was one.
NO_LEDGER = Counts(0)


class State(NamedTuple):
    pcs: tuple[int, ...]
    regs: tuple[tuple[int, ...], ...]
    sems: Counts
    events: tuple[Event, ...]  # sorted
    faults: tuple[tuple[int, int, str, str], ...]  # (thread, pc, kind, detail), sorted
    inputs: tuple[int, ...]
    hazards: tuple[Hazard, ...] = ()  # sorted
    # The barrier ledger: of a barrier semaphore that several kernel invocations share
    # (`Tables.ledger_floor`), the units added from each later invocation, counted as
    # they arrive and never taken (slot `Tables.ledger_slot(sid, invocation)`), so a wait
    # can tell the units of its own and earlier invocations from those of later ones
    # (`rules._early_pass`). Part of `sems` too, which stays the semaphore's one count.
    ledger: Counts = NO_LEDGER


class ThreadStep(NamedTuple):
    """The action of a thread: its next instruction runs."""

    thread: int


class EventFires(NamedTuple):
    """The action of a pending completion: it happens (identical pending completions are
    one actor, so one action)."""

    event: Event


# What a state's successors are reached by. Tuples, so that an action hashes and compares
# at the speed of one (the explicit search makes millions): `isinstance` tells them apart.
Action = ThreadStep | EventFires


def overlap(a: Access, b: Access) -> bool:
    """Whether two accesses share an element. An empty access (a size of 0 in some dim)
    shares none, even when it starts inside the other (a 0-row copy at row 2 of rows 0:4)."""
    if a.buffer != b.buffer or 0 in a.sizes or 0 in b.sizes:
        return False
    if len(a.starts) != len(b.starts):
        return True  # shapes disagree: cannot tell, assume the worst
    return all(
        sa < sb + zb and sb < sa + za for sa, za, sb, zb in zip(a.starts, a.sizes, b.starts, b.sizes)
    )


def conflict(a: Access, b: Access) -> bool:
    """Whether two accesses race when nothing orders them: they share an element, one of
    them writes it, and they are not both atomic (the hardware serializes atomic
    read-modify-writes of an element, so any order of two gives the same result)."""
    return (a.write or b.write) and not (a.atomic and b.atomic) and overlap(a, b)


def distinct(events: tuple[Event, ...]) -> list[Event]:
    """The pending completions once each (they are sorted: one equal to the one before it
    is the same actor)."""
    return [e for e, before in zip(events, (None, *events)) if e != before]


def dma_increment(decl: ir.SemDecl, nbytes: int) -> int:
    """What one DMA completion adds: bytes on a DMA semaphore, 1 on a REGULAR one (v6+)."""
    return nbytes if decl.kind is SemKind.DMA else 1


def must_be_zero_at_exit(backend: Backend, decl: ir.SemDecl) -> bool:
    """TPU: scratch, scoped and barrier semaphores must be 0 when the kernel ends (the chip
    halts the core otherwise, or, unchecked, the count carries into the next kernel:
    semcheck/tpu_facts.py); a semaphore handed to a kernel outside the protocol is exempt,
    and one handed between the kernels of a program is judged when the program ends. GPU:
    GMEM semaphores are zero-filled before each launch, so nothing is required, except of the
    barrier semaphores (plgpu.get_barrier_semaphore), which the next kernel of the same
    collective_id starts from."""
    if backend is Backend.GPU:
        return decl.origin is SemOrigin.BARRIER
    return decl.origin in (SemOrigin.SCRATCH, SemOrigin.SCOPED, SemOrigin.BARRIER, SemOrigin.HANDED_ON)
