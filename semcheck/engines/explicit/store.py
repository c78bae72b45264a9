"""The explicit search's visited states, kept exactly in a tree of shared pairs.

A state is laid out as a vector of integers, in four parts: every thread's pc and its
registers; the non-zero semaphore counts (how many, then (id, count) pairs); the pending
completions (how many, then each one's number: each distinct `Event` is numbered once, the
first time the store sees it); and the faults, inputs and hazards with how many counts and
completions there are (one number for each distinct combination). Each part is folded
pairwise into a binary tree whose nodes are interned: a node is the pair of its children's
ids, kept once in a table of machine integers (`_Pairs`), and the four parts' roots make
the state's root (pcs, (completions, (counts, the rest))) (tree compression, as
LTSmin stores states: Laarman, van de Pol, Weber, "Parallel recursive state compression
for free", SPIN 2011). A successor differs from its parent in a pc or two, a count and a
completion or two, so most of its nodes already exist: it costs the few new nodes on the
paths from what changed to the root, 20 bytes each, where a packed copy of the whole
state cost 400 to 1,300 bytes.

It is exact, not hash compaction: interning is by the pair's value, so two states get the
same root exactly when their vectors are equal, and a root unpacks to an equal state.
Nothing is omitted, so no probability needs stating. Values that do not fit 31 bits (a big
count or register) are numbered in a side table first.

The search's own per-state bookkeeping (parent, action, depth, sleep set, queue) is kept
in machine arrays too (`SearchTree`, `Fifo`): one Python int, list slot and tuple per
state cost more than the state itself.
"""

from __future__ import annotations

from array import array
from itertools import chain
from operator import is_

from semcheck.semantics import Action, Counts, Event, State, System

_MULTIPLIER = 0x9E3779B97F4A7C15  # Fibonacci hashing of a pair's 64-bit key
_MASK64 = (1 << 64) - 1
_SMALL = 1 << 31  # values below this are their own leaves; others are numbered past it


class _Pairs:
    """Interned pairs of 32-bit ids: `intern(a, b)` gives the same id for the same pair,
    ids numbered from 0 in order of first interning. Open addressing with linear probing in
    machine arrays: 8 bytes a pair for the pair itself and 5 to 11 for the index, which is
    kept at most three quarters full."""

    def __init__(self) -> None:
        self.keys = array("Q")  # id -> a << 32 | b
        self._bits = 10
        self._slots = array("i", [-1]) * (1 << self._bits)

    def __len__(self) -> int:
        return len(self.keys)

    def intern(self, a: int, b: int) -> int:
        key = a << 32 | b
        shift = 64 - self._bits
        mask = (1 << self._bits) - 1
        slots, keys = self._slots, self.keys
        i = ((key * _MULTIPLIER) & _MASK64) >> shift
        while True:
            found = slots[i]
            if found < 0:
                found = len(keys)
                keys.append(key)
                slots[i] = found
                if 4 * len(keys) > 3 * mask:
                    self._grow()
                return found
            if keys[found] == key:
                return found
            i = (i + 1) & mask

    def pair(self, node: int) -> tuple[int, int]:
        key = self.keys[node]
        return key >> 32, key & 0xFFFFFFFF

    def _grow(self) -> None:
        self._bits += 1
        shift, mask = 64 - self._bits, (1 << self._bits) - 1
        slots = self._slots = array("i", [-1]) * (1 << self._bits)
        for node, key in enumerate(self.keys):
            i = ((key * _MULTIPLIER) & _MASK64) >> shift
            while slots[i] >= 0:
                i = (i + 1) & mask
            slots[i] = node

    def nbytes(self) -> int:
        return self.keys.itemsize * len(self.keys) + self._slots.itemsize * len(self._slots)


class _Positions:
    """Key -> position, as open addressing over positions: a slot holds a position, whose
    key is `keys[position]` (4 bytes a slot, kept at most three quarters full)."""

    def __init__(self, keys: array):
        self._keys = keys
        self._bits = 10
        self._slots = array("i", [-1]) * (1 << self._bits)
        self._count = 0

    def find(self, key: int) -> int | None:
        mask = (1 << self._bits) - 1
        slots, keys = self._slots, self._keys
        i = ((key * _MULTIPLIER) & _MASK64) >> (64 - self._bits)
        while True:
            found = slots[i]
            if found < 0:
                return None
            if keys[found] == key:
                return found
            i = (i + 1) & mask

    def add(self, key: int, position: int) -> None:
        """`position` (whose key is `key`, not yet present) under `key`."""
        self._count += 1
        if 4 * self._count > 3 * (1 << self._bits):
            self._bits += 1
            self._slots = array("i", [-1]) * (1 << self._bits)
            for known in range(len(self._keys)):
                if known != position:
                    self._place(self._keys[known], known)
        self._place(key, position)

    def _place(self, key: int, position: int) -> None:
        mask = (1 << self._bits) - 1
        slots = self._slots
        i = ((key * _MULTIPLIER) & _MASK64) >> (64 - self._bits)
        while slots[i] >= 0:
            i = (i + 1) & mask
        slots[i] = position

    def nbytes(self) -> int:
        return self._slots.itemsize * len(self._slots)


class StateStore:
    """Positions of visited states, looked up by a key (the root of a state's tree: the
    state itself, or its orbit's representative under a symmetry), each holding the root
    of the state reached."""

    def __init__(self, system: System):
        self._threads = len(system.bodies)
        self._sizes = tuple(len(r) for r in system.registers)
        self._sem_count = len(system.instances)
        self._pairs = _Pairs()
        # two program counters to a leaf when every one fits 15 bits (the pc + 1 of each)
        self._paired_pcs = max((len(body) for body in system.bodies), default=0) + 1 < 1 << 15
        self._keys = array("I")  # position -> the root it is looked up by
        self._roots: array | None = None  # position -> the root of the state there, once one differs
        self._index = _Positions(self._keys)  # key -> position
        self._big: dict[int, int] = {}  # a value that does not fit 31 bits -> its number
        self._big_values: list[int] = []
        # faults, inputs and hazards: each distinct combination numbered once
        self._rest: dict[tuple, int] = {}
        self._rest_values: list[tuple] = []
        # id -> the first Event object seen with that value; looked up by value, and by
        # identity for those very objects (alive in `_events` for good, so an id() names
        # one of them only): the events of an unpacked state are these objects, and a
        # step keeps all but the one or two it changes, so most are found by identity
        self._events: list[Event] = []
        self._event_by_value: dict[Event, int] = {}
        self._event_by_identity: dict[int, int] = {}
        # the last events tuple packed or unpacked, with its numbers: a successor by a step
        # that moves no completion shares its state's tuple (kept alive here, so its id()
        # is not reused meanwhile)
        self._last_events: tuple[Event, ...] = ()
        self._last_ids: list[int] = []
        # states added and not yet taken, as the objects reached (up to _KEPT of them): the
        # search expands each state it adds once, soon after, and unpacking what it has just
        # packed would only rebuild an equal state
        self._kept: dict[int, State] = {}

    # -- packing --

    def pack(self, state: State) -> int:
        """The root of `state`'s tree (its nodes interned as needed)."""
        leaf = self._leaf
        intern = self._pairs.intern
        own = [pc + 1 for pc in state.pcs]  # a faulted thread's pc is -1
        if self._paired_pcs:
            own = [own[k] << 15 | own[k + 1] for k in range(0, len(own) - 1, 2)] + own[len(own) - len(own) % 2:]
        if any(self._sizes):
            own.extend(map(leaf, chain.from_iterable(state.regs)))
        items = state.sems.items
        sems = list(map(leaf, chain.from_iterable(items)))
        events = list(self._event_ids(state.events))
        rest = (state.faults, state.inputs, state.hazards, len(items), len(events))
        number = self._rest.get(rest)
        if number is None:
            number = self._rest[rest] = len(self._rest_values)
            self._rest_values.append(rest)
        # what changes least goes deepest: most steps move a pc and a completion, few a count
        return intern(self._fold(own), intern(self._fold(events), intern(self._fold(sems), number)))

    def _fold(self, values: list[int]) -> int:
        """The root of `values`' tree: pairs folded level by level, an odd last one carried
        up as it is (so the shape depends on the length alone)."""
        intern = self._pairs.intern
        while len(values) > 1:
            folded = [intern(values[k], values[k + 1]) for k in range(0, len(values) - 1, 2)]
            if len(values) % 2:
                folded.append(values[-1])
            values = folded
        return values[0] if values else 0

    def _unfold(self, root: int, length: int) -> list[int]:
        """The `length` values whose tree `root` is."""
        if length <= 1:
            return [root] if length else []
        sizes = [length]
        while sizes[-1] > 1:
            sizes.append((sizes[-1] + 1) // 2)
        level = [root]
        pair = self._pairs.pair
        for size in reversed(sizes[:-1]):
            below: list[int] = []
            for k, node in enumerate(level):
                if 2 * k + 1 < size:
                    below.extend(pair(node))
                else:
                    below.append(node)  # the odd one, carried up unchanged
            level = below
        return level

    def _leaf(self, value: int) -> int:
        if 0 <= value < _SMALL:
            return value
        number = self._big.get(value)
        if number is None:
            number = self._big[value] = len(self._big_values)
            self._big_values.append(value)
        return _SMALL + number

    def _value(self, leaf: int) -> int:
        return leaf if leaf < _SMALL else self._big_values[leaf - _SMALL]

    def _event_ids(self, events: tuple[Event, ...]) -> list[int]:
        if not events:
            return []
        last = self._last_events
        if events is last:  # a step that left the completions as they were
            return self._last_ids
        ids = self._spliced(events, last, self._last_ids) if last else self._event_ids_of(events)
        self._last_events, self._last_ids = events, ids
        return ids

    def _spliced(self, events: tuple[Event, ...], last: tuple[Event, ...], last_ids: list[int]) -> list[int]:
        """The numbers of `events` from those of `last`, the events of the state packed or
        unpacked before (its parent, or a sibling): a step completes or starts a copy or
        two, so the two tuples share all but a few objects at the ends, found by identity
        in C; only the middle is looked up."""
        shorter = min(len(events), len(last))
        head = _first_false(list(map(is_, events, last)), shorter)
        tail = min(_first_false(list(map(is_, reversed(events), reversed(last))), shorter), shorter - head)
        middle = events[head:len(events) - tail]
        return last_ids[:head] + (self._event_ids_of(middle) if middle else []) + \
            (last_ids[len(last) - tail:] if tail else [])

    def _event_ids_of(self, events: tuple[Event, ...]) -> list[int]:
        # the objects seen before by identity (no hashing of events at all); only the
        # few a step created are looked up by value
        ids: list = list(map(self._event_by_identity.get, map(id, events)))
        k = _find_none(ids, 0)
        while k >= 0:
            ids[k] = self.event_id(events[k])
            k = _find_none(ids, k + 1)
        return ids

    def event_id(self, event: Event) -> int:
        """The number of a pending completion (numbered when first seen)."""
        found = self._event_by_identity.get(id(event))
        if found is None:
            found = self._event_by_value.get(event)
            if found is None:
                found = self._event_by_value[event] = len(self._events)
                self._events.append(event)
                self._event_by_identity[id(event)] = found
        return found

    def event(self, number: int) -> Event:
        return self._events[number]

    # -- unpacking --

    def unpack(self, root: int) -> State:
        pair = self._pairs.pair
        own_root, right = pair(root)
        events_root, last = pair(right)
        sems_root, rest = pair(last)
        threads, registers = self._threads, sum(self._sizes)
        leaves = (threads + 1) // 2 if self._paired_pcs else threads
        own = self._unfold(own_root, leaves + registers)
        if self._paired_pcs:
            unpaired: list[int] = []
            for leaf in own[:threads // 2]:
                unpaired += (leaf >> 15, leaf & 0x7FFF)
            own = unpaired + own[threads // 2:]  # an odd last pc is a leaf of its own
        pcs = tuple(pc - 1 for pc in own[:threads])
        if registers:
            flat, at, regs = [self._value(v) for v in own[threads:]], 0, []
            for size in self._sizes:
                regs.append(tuple(flat[at:at + size]))
                at += size
        else:
            regs = [() for _ in self._sizes]
        faults, inputs, hazards, count_items, count_events = self._rest_values[rest]
        flat_sems = [self._value(v) for v in self._unfold(sems_root, 2 * count_items)]
        pairs = iter(flat_sems)
        sems = Counts(self._sem_count, tuple(zip(pairs, pairs)))
        ids = self._unfold(events_root, count_events)
        events = tuple(map(self._events.__getitem__, ids))
        if events:
            self._last_events, self._last_ids = events, ids
        return State(pcs, tuple(regs), sems, events, faults, inputs, hazards)

    # -- the visited set --

    def find(self, key: int) -> int | None:
        """The position of a key, if stored."""
        return self._index.find(key)

    def add(self, key: int, state: State, key_state: State) -> int:
        """Store `state` under `key` (of `key_state`); its position. The object itself is
        kept for `take`, while few are."""
        position = len(self._keys)
        self._keys.append(key)
        self._index.add(key, position)
        root = key if state is key_state else self.pack(state)
        if root != key and self._roots is None:  # the first state stored under another's key
            self._roots = array("I", self._keys[:position])
        if self._roots is not None:
            self._roots.append(root)
        if len(self._kept) < _KEPT:
            self._kept[position] = state
        return position

    def _root(self, position: int) -> int:
        return self._keys[position] if self._roots is None else self._roots[position]

    def take(self, position: int) -> State:
        """The state at `position`, to be expanded: the object `add` kept, if it still
        holds it (once only), else unpacked."""
        state = self._kept.pop(position, None)
        if state is None:
            return self.unpack(self._root(position))
        return state

    def holds(self, position: int, state: State | int) -> bool:
        """Whether the state stored at `position` is `state` (or has root `state`)."""
        root = state if isinstance(state, int) else self.pack(state)
        return self._root(position) == root

    def __getitem__(self, position: int) -> State:
        return self.unpack(self._root(position))

    def __len__(self) -> int:
        return len(self._keys)

    def nbytes(self) -> int:
        """The memory the store holds for its states' trees and positions (the numbered
        events, big values and fault combinations are few and kept apart)."""
        roots = self._roots.itemsize * len(self._roots) if self._roots is not None else 0
        return self._pairs.nbytes() + self._index.nbytes() + self._keys.itemsize * len(self._keys) + roots


class SearchTree:
    """Per stored state: its parent's position (-1: a root), the action that reached it,
    its depth and its sleep set. The action is one machine integer (a thread's action as
    the thread, a completion as -2 minus its number in the store); each distinct sleep set
    is kept once and named by its number."""

    def __init__(self, store: StateStore):
        self._store = store
        self.parent, self.depth = array("i"), array("i")
        self._via, self._sleep = array("i"), array("i")
        self._sleep_sets: list[frozenset] = [frozenset()]
        self._sleep_ids: dict[frozenset, int] = {frozenset(): 0}

    def add(self, parent: int, action: Action | None, depth: int, sleep: frozenset) -> None:
        self.parent.append(parent)
        self.depth.append(depth)
        if action is None:
            self._via.append(-1)
        else:
            kind, what = action
            self._via.append(what if kind == "t" else -2 - self._store.event_id(what))
        self._sleep.append(self._sleep_id(sleep))

    def via(self, i: int) -> Action | None:
        code = self._via[i]
        if code == -1:
            return None
        return ("t", code) if code >= 0 else ("e", self._store.event(-2 - code))

    def sleep(self, i: int) -> frozenset:
        return self._sleep_sets[self._sleep[i]]

    def set_sleep(self, i: int, sleep: frozenset) -> None:
        self._sleep[i] = self._sleep_id(sleep)

    def _sleep_id(self, sleep: frozenset) -> int:
        found = self._sleep_ids.get(sleep)
        if found is None:
            found = self._sleep_ids[sleep] = len(self._sleep_sets)
            self._sleep_sets.append(sleep)
        return found

    def nbytes(self) -> int:
        return sum(a.itemsize * len(a) for a in (self.parent, self.depth, self._via, self._sleep))


class Fifo:
    """The breadth-first queue of positions, as a machine array read from a moving head."""

    def __init__(self) -> None:
        self._items = array("i")
        self._head = 0

    def append(self, position: int) -> None:
        self._items.append(position)

    def popleft(self) -> int:
        position = self._items[self._head]
        self._head += 1
        if self._head >= 65_536 and 2 * self._head >= len(self._items):
            del self._items[:self._head]  # what was read, dropped now and then
            self._head = 0
        return position

    def clear(self) -> None:
        self._items, self._head = array("i"), 0

    def __len__(self) -> int:
        return len(self._items) - self._head


_KEPT = 4096  # states kept unpacked between `add` and `take`: a breadth-first frontier can be millions


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
