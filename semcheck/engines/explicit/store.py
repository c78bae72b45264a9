"""The explicit search's visited states, kept packed.

A state's program counters and registers are one Python int per thread (a pointer each, 8
bytes, in a tuple built anew by every step); here they are kept as machine arrays: 2 bytes
per program counter, 8 per register value. The non-zero semaphore counts are one array
of (id, count) pairs, and the pending completions one array of small ids: each distinct
`Event` is numbered once, the first time the store sees it, and unpacking gives back that
first object. A ring of N devices has about N completions in flight in every state, so
hashing them as a tuple of tuples cost what N deep hashes cost, twice per state (looking
up, then inserting), where hashing bytes costs next to nothing; and a key made only of
bytes is no object the garbage collector has to visit again and again as the store grows.
Packing is exact, not hash compaction: a packed state unpacks to an equal state, and two
states share a position only if they are equal, so nothing is omitted (no collision
argument is needed). A value that does not fit its array (a register or a count past 64
bits, a program longer than 32,000 instructions) keeps its tuple.
"""

from __future__ import annotations

from array import array
from itertools import chain
from operator import is_

from semcheck.semantics import Counts, Event, State, System


class StateStore:
    """Positions of visited states, looked up by a key state (the state itself, or its
    orbit's representative under a symmetry), each holding the state reached."""

    def __init__(self, system: System):
        longest = max((len(body) for body in system.bodies), default=0)
        self._pc_code = "h" if longest < 32_000 else "q"
        self._sizes = tuple(len(r) for r in system.registers)
        self._no_registers = tuple(() for _ in self._sizes)
        self._sem_count = len(system.instances)
        self._index: dict[tuple, int] = {}
        self._packed: list[tuple] = []
        # id -> the first Event object seen with that value; looked up by value, and by
        # identity for those very objects (alive in `_events` for good, so an id() names
        # one of them only): the events of an unpacked state are these objects, and a
        # step keeps all but the one or two it changes, so most are found by identity
        self._events: list[Event] = []
        self._event_by_value: dict[Event, int] = {}
        self._event_by_identity: dict[int, int] = {}
        # the last events tuple packed or unpacked, with its ids: a successor by a step
        # that moves no completion shares its state's tuple (kept alive here, so its id()
        # is not reused meanwhile)
        self._last_events: tuple[Event, ...] = ()
        self._last_ids = b""
        # states added and not yet taken, as the objects reached (up to _KEPT of them): the
        # search expands each state it adds once, soon after, and unpacking what it has just
        # packed would only rebuild an equal state
        self._kept: dict[int, State] = {}

    def pack(self, state: State) -> tuple:
        pcs = _ints(self._pc_code, state.pcs)
        regs = _ints("q", chain.from_iterable(state.regs)) if any(self._sizes) else b""
        sems = _ints("q", chain.from_iterable(state.sems.items)) if state.sems.items else b""
        return (pcs, regs, sems, self._event_ids(state.events), *state[4:])

    def _event_ids(self, events: tuple[Event, ...]) -> bytes:
        if not events:
            return b""
        last = self._last_events
        if events is last:  # a step that left the completions as they were
            return self._last_ids
        if last:
            ids = self._spliced(events, last, self._last_ids)
        else:
            ids = self._event_ids_of(events)
        self._last_events, self._last_ids = events, ids
        return ids

    def _spliced(self, events: tuple[Event, ...], last: tuple[Event, ...], last_ids: bytes) -> bytes:
        """The ids of `events` from those of `last`, the events of the state packed or
        unpacked before (its parent, or a sibling): a step completes or starts a copy or
        two, so the two tuples share all but a few objects at the ends, found by identity
        in C; only the middle is looked up."""
        shorter = min(len(events), len(last))
        head = _first_false(list(map(is_, events, last)), shorter)
        tail = min(_first_false(list(map(is_, reversed(events), reversed(last))), shorter), shorter - head)
        middle = events[head:len(events) - tail]
        width = array("I").itemsize
        return b"".join((
            last_ids[:head * width],
            self._event_ids_of(middle) if middle else b"",
            last_ids[(len(last) - tail) * width:] if tail else b"",
        ))

    def _event_ids_of(self, events: tuple[Event, ...]) -> bytes:
        # the objects seen before by identity (no hashing of events at all); only the
        # few a step created are looked up by value
        ids: list = list(map(self._event_by_identity.get, map(id, events)))
        k = _find_none(ids, 0)
        while k >= 0:
            ids[k] = self._event_id(events[k])
            k = _find_none(ids, k + 1)
        return array("I", ids).tobytes()

    def _event_id(self, event: Event) -> int:
        found = self._event_by_identity.get(id(event))
        if found is None:
            found = self._event_by_value.get(event)
            if found is None:
                found = self._event_by_value[event] = len(self._events)
                self._events.append(event)
                self._event_by_identity[id(event)] = found
        return found

    def unpack(self, packed: tuple) -> State:
        pcs, regs, sems, events = packed[0], packed[1], packed[2], packed[3]
        if isinstance(pcs, bytes):
            values = array(self._pc_code)
            values.frombytes(pcs)
            pcs = tuple(values)
        if not regs:
            regs = self._no_registers
        elif isinstance(regs, bytes):
            values = array("q")
            values.frombytes(regs)
            flat, regs, at = values.tolist(), [], 0
            for size in self._sizes:
                regs.append(tuple(flat[at:at + size]))
                at += size
            regs = tuple(regs)
        else:
            flat, rebuilt, at = list(regs), [], 0
            for size in self._sizes:
                rebuilt.append(tuple(flat[at:at + size]))
                at += size
            regs = tuple(rebuilt)
        if isinstance(sems, bytes):
            values = array("q")
            values.frombytes(sems)
            pairs = iter(values.tolist())
            sems = Counts(self._sem_count, tuple(zip(pairs, pairs)))
        elif not isinstance(sems, Counts):  # a count past 64 bits: kept as a tuple
            pairs = iter(sems)
            sems = Counts(self._sem_count, tuple(zip(pairs, pairs)))
        if events:
            ids = array("I")
            ids.frombytes(events)
            events = tuple(map(self._events.__getitem__, ids))
            self._last_events, self._last_ids = events, packed[3]
        else:
            events = ()
        return State(pcs, regs, sems, events, *packed[4:])

    def find(self, key: tuple) -> int | None:
        """The position of a packed key, if stored."""
        return self._index.get(key)

    def add(self, key: tuple, state: State, key_state: State) -> int:
        """Store `state` under the packed `key` (of `key_state`); its position. The object
        itself is kept for `take`, while few are."""
        position = len(self._packed)
        self._index[key] = position
        self._packed.append(key if state is key_state else self.pack(state))
        if len(self._kept) < _KEPT:
            self._kept[position] = state
        return position

    def take(self, position: int) -> State:
        """The state at `position`, to be expanded: the object `add` kept, if it still
        holds it (once only), else unpacked."""
        state = self._kept.pop(position, None)
        if state is None:
            return self.unpack(self._packed[position])
        # a successor that moves no completion shares this tuple: its ids are known
        self._last_events, self._last_ids = state.events, self._packed[position][3]
        return state

    def holds(self, position: int, state: State | tuple) -> bool:
        """Whether the state stored at `position` is `state` (or its packed form)."""
        packed = state if isinstance(state, tuple) and not isinstance(state, State) else self.pack(state)
        return self._packed[position] == packed

    def __getitem__(self, position: int) -> State:
        return self.unpack(self._packed[position])

    def __len__(self) -> int:
        return len(self._packed)


_KEPT = 4096  # states kept unpacked between `add` and `take`: a breadth-first frontier can be millions


def _ints(code: str, values) -> bytes | tuple:
    values = tuple(values)
    try:
        return array(code, values).tobytes()
    except OverflowError:
        return values


def _first_false(flags: list, default: int) -> int:
    """The index of the first False in `flags`, or `default` (a scan in C)."""
    try:
        return flags.index(False)
    except ValueError:
        return default


def _find_none(values: list, start: int) -> int:
    """The index of the first None from `start` on, or -1 (a scan in C)."""
    try:
        return values.index(None, start)
    except ValueError:
        return -1
