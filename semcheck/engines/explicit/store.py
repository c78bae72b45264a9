"""The explicit search's visited states, kept exactly in a tree of shared pairs.

A state is laid out as four parts of integers: every thread's pc (two to a leaf), its
registers and the inputs; the pending completions (each distinct `Event` numbered once, the
first time the store sees it); the non-zero semaphore counts as (id, count) pairs; and a
tail: the faults, hazards and barrier ledger (one number for each distinct combination:
most states have none) with the lengths of the two parts that vary. Each part is folded pairwise into a
binary tree whose nodes are interned: a node is the pair of its children's ids, kept once
in a table of machine integers (`_Pairs`), and the state's key is four ids (the two top
nodes of the pcs' tree, the completions' root, the node (counts, tail)), 128 bits kept in
the visited set itself, not interned (tree compression, as LTSmin stores states: Laarman,
van de Pol, Weber, "Parallel recursive state compression for free", SPIN 2011). A
successor differs from its parent in a pc or two, a count and a completion or two, so most
of its nodes already exist: it costs the few new nodes on the paths from what changed to
the top, 13 to 16 bytes each with their index (1.7 to 2.7 a state on the all-reduce
examples). The two nodes that joined those four ids into one 64-bit key were new for
almost every state (14 bytes each); as 8 more bytes of key they cost less.

It is exact, not hash compaction: interning is by the pair's value, so two states get the
same key exactly when their vectors are equal, and a key unpacks to an equal state.
Nothing is omitted, so no probability needs stating. Values that do not fit 31 bits (a big
count, register or input) are numbered in a side table first.

What grows with the stored states (`nbytes`): the nodes and their index, each state's key
and its slot in the visited set's index, the symmetry element that maps a stored key's
state to the state reached (one byte, under symmetry), the big values and fault
combinations met, and the search's records and distinct sleep sets (`SearchTree`): 61 to
71 bytes a stored state on the all-reduce examples at 1,130 to 29,226 states. What grows
with the protocol instead (`fixed_nbytes`), kept once: the numbered completions, their
accesses shared between equal ones (docs/benchmarks.md gives both per example).

Packing a state folds only the parts it has not met lately: each kind of part (the pcs
with the registers and inputs, the completions, the counts, the tail) is remembered with its
tree's top ids, up to `_RECENT` of each kind, and unpacking remembers the other way. A
search packs the same few parts again and again: an unreduced search of four threads packs
900,000 states from a few hundred distinct pcs, completions and counts, and folding each one
anew was half of its CPU. New nodes are interned in the same order either way, so the keys
and the nodes are those of folding every state.

The search's own per-state bookkeeping (parent, action, sleep set, and the queue with each
queued state's depth) is kept in machine arrays too (`SearchTree`, `Fifo`): one Python int,
list slot and tuple per state cost more than the state itself.
"""

from __future__ import annotations

import sys
from array import array
from itertools import chain
from operator import is_
from typing import TYPE_CHECKING, TypeVar

from semcheck.semantics import Action, Counts, Event, EventFires, State, System, ThreadStep

if TYPE_CHECKING:
    from semcheck.engines.explicit.symmetry import Rotations

_MULTIPLIER = 0x9E3779B97F4A7C15  # Fibonacci hashing of a 64-bit key
_MASK64 = (1 << 64) - 1
_SMALL = 1 << 31  # values below this are their own leaves; others are numbered past it
_FIRST_SLOTS = 64
_MASK32 = 0xFFFFFFFF


def _slot(key: int, size: int) -> int:
    """Where `key` goes in a table of `size` slots: its Fibonacci hash scaled to the size
    (multiply-shift, so the size need not be a power of two)."""
    return (((key * _MULTIPLIER) & _MASK64) * size) >> 64


def _grown(size: int) -> int:
    """The next table size: half as big again, so a table is between half and three
    quarters full (doubling left it between three eighths and three quarters: 4 bytes a
    slot, that was 2 bytes more per entry on average)."""
    return size + size // 2


class _Pairs:
    """Interned pairs of 32-bit ids: `intern(a, b)` gives the same id for the same pair,
    ids numbered from 0 in order of first interning. Open addressing with linear probing in
    machine arrays: 8 bytes a pair for the pair itself and 5.3 to 8 for the index (4 bytes
    a slot, kept at most three quarters full)."""

    def __init__(self) -> None:
        self.keys = array("Q")  # id -> a << 32 | b
        self._slots = array("i", [-1]) * _FIRST_SLOTS

    def __len__(self) -> int:
        return len(self.keys)

    def intern(self, a: int, b: int) -> int:
        key = a << 32 | b
        slots, keys = self._slots, self.keys
        size = len(slots)
        i = (((key * _MULTIPLIER) & _MASK64) * size) >> 64
        while True:
            found = slots[i]
            if found < 0:
                found = len(keys)
                keys.append(key)
                slots[i] = found
                if 4 * len(keys) > 3 * size:
                    self._grow()
                return found
            if keys[found] == key:
                return found
            i = i + 1 if i + 1 < size else 0

    def pair(self, node: int) -> tuple[int, int]:
        key = self.keys[node]
        return key >> 32, key & 0xFFFFFFFF

    def _grow(self) -> None:
        size = _grown(len(self._slots))
        slots = self._slots = array("i", [-1]) * size
        for node, key in enumerate(self.keys):
            i = _slot(key, size)
            while slots[i] >= 0:
                i = i + 1 if i + 1 < size else 0
            slots[i] = node

    def nbytes(self) -> int:
        return sys.getsizeof(self.keys) + sys.getsizeof(self._slots)


class _Positions:
    """The visited set: 128-bit keys numbered from 0 in order of adding (a key's number is
    its state's position), each kept as two 8-byte halves, and an index of them by open
    addressing over positions (4 bytes a slot, kept at most three quarters full)."""

    def __init__(self) -> None:
        self.high, self.low = array("Q"), array("Q")  # position -> its key's two halves
        self._slots = array("i", [-1]) * _FIRST_SLOTS
        self._vacant = (-1, 0)  # the last key `find` missed, and the empty slot it ended at

    def __len__(self) -> int:
        return len(self.low)

    def key(self, position: int) -> int:
        return self.high[position] << 64 | self.low[position]

    def find(self, key: int) -> int | None:
        high, low = key >> 64, key & _MASK64
        slots, highs, lows = self._slots, self.high, self.low
        size = len(slots)
        i = ((((high ^ low) * _MULTIPLIER) & _MASK64) * size) >> 64  # `_slot`, inline
        while True:
            found = slots[i]
            if found < 0:
                self._vacant = (key, i)  # where `add` puts it, if it comes next
                return None
            if lows[found] == low and highs[found] == high:
                return found
            i = i + 1 if i + 1 < size else 0

    def add(self, key: int) -> int:
        """The position of `key`, not yet present, added."""
        position = len(self.low)
        high, low = key >> 64, key & _MASK64
        self.high.append(high)
        self.low.append(low)
        (missed, vacant), self._vacant = self._vacant, (-1, 0)
        if 4 * len(self.low) > 3 * len(self._slots):
            self._slots = array("i", [-1]) * _grown(len(self._slots))
            for known in range(position):
                self._place(self.high[known] ^ self.low[known], known)
        elif missed == key:  # the search looked it up just before: no second probe
            self._slots[vacant] = position
            return position
        self._place(high ^ low, position)
        return position

    def _place(self, mixed: int, position: int) -> None:
        slots = self._slots
        size = len(slots)
        i = (((mixed * _MULTIPLIER) & _MASK64) * size) >> 64  # `_slot`, inline
        while slots[i] >= 0:
            i = i + 1 if i + 1 < size else 0
        slots[i] = position

    def nbytes(self) -> int:
        return sum(map(sys.getsizeof, (self.high, self.low, self._slots)))


class StateStore:
    """Positions of visited states, looked up by a key (a state's tree: the state itself,
    or its orbit's representative under `group`), each holding the group element that
    maps the key's state to the state reached there."""

    def __init__(self, system: System, group: Rotations | None = None):
        self._threads = len(system.bodies)
        self._sizes = tuple(len(r) for r in system.registers)
        self._inputs = len(system.protocol.inputs)
        self._sem_count = len(system.instances)
        self._registers = sum(self._sizes)
        self._pcs_alone = not self._registers and not self._inputs  # the pcs are the first part's leaves
        self._pairs = _Pairs()
        # two program counters to a leaf when every one fits 15 bits (the pc + 1 of each)
        self._paired_pcs = max((len(body) for body in system.bodies), default=0) + 1 < 1 << 15
        self._index = _Positions()  # key -> position, position -> key
        # position -> the element of `group` that maps its key's state to the state reached
        # there (under symmetry, a state reached where the search branches is looked up by
        # its orbit's least image): one or two bytes
        self._group = group if group is not None and group.order > 1 else None
        self._images: array | None = None
        if self._group is not None:
            self._images = array("B" if self._group.order <= 256 else "H" if self._group.order <= 65_536 else "i")
        self._big: dict[int, int] = {}  # a value that does not fit 31 bits -> its number
        self._big_values: list[int] = []
        # faults, hazards and barrier ledger: each distinct combination numbered once (most states have none)
        self._rest: dict[tuple, int] = {}
        self._rest_values: list[tuple] = []
        # id -> the Event with that value, kept as the store's own copy whose accesses are
        # shared with every other event's of equal value (a protocol has many completions
        # and few distinct regions: 416 and 56 for the ring all-reduce at 8 devices, x2);
        # looked up by value (a map by identity as well saved no measurable time, since
        # `_spliced` finds most by identity already, and cost 100 bytes an event)
        self._events: list[Event] = []
        self._event_by_value: dict[Event, int] = {}
        self._accesses: dict[tuple, tuple] = {}
        # the last events tuple packed or unpacked, with its numbers: a successor by a step
        # that moves no completion shares its state's tuple (kept alive here, so its id()
        # is not reused meanwhile)
        self._last_events: tuple[Event, ...] = ()
        self._last_ids: list[int] = []
        self._last_root = 0  # their tree's root
        # the parts met lately, each with its tree's top ids (at most _RECENT of each kind;
        # they do not grow with the states)
        self._own_tops: dict[tuple, int] = {}  # pcs (with registers and inputs) -> two tops
        self._events_trees: dict[tuple[Event, ...], tuple[list[int], int]] = {}  # -> numbers, root
        self._sems_roots: dict[tuple, int] = {}  # non-zero counts -> root
        self._tails: dict[tuple, int] = {}  # (faults and hazards, two lengths) -> node
        self._lasts: dict[int, int] = {}  # the counts' root and the tail -> their node
        # and the other way, the parts unpacked lately by their tops' ids
        self._own_parts: dict[int, tuple] = {}  # two tops -> pcs, registers, inputs
        self._rest_parts: dict[int, tuple] = {}  # the last id -> counts, faults, hazards, completions
        self._events_parts: dict[int, tuple] = {}  # (length, root) -> completions, their numbers
        # states added and not yet taken, as the objects reached (up to _KEPT of them): the
        # search expands each state it adds once, soon after, and unpacking what it has just
        # packed would only rebuild an equal state
        self._kept: dict[int, State] = {}

    # -- packing --

    def pack(self, state: State) -> int:
        """The key of `state`: its trees' top ids (their nodes interned as needed). Each part
        is looked up first among the parts met lately (`_recent`): a search packs the same
        few pcs, counts, completions and faults again and again (an unreduced search of four
        threads packs 900,000 states with a few hundred of each), and a part met before
        has the same tree, so its folding is skipped."""
        events = state.events
        if events is self._last_events:  # a step that left the completions as they were
            ids, events_root = self._last_ids, self._last_root
        else:
            ids, events_root = self._events_trees.get(events) or (self._event_ids(events), -1)
        items = state.sems.items
        # new nodes are interned in the order they always were (the tail, the pcs', the
        # completions', the counts'), so the keys do not depend on what was remembered
        # the barrier ledger goes with them: few states have one, and few distinct ones
        rest = (state.faults, state.hazards, state.ledger)
        tail_key = (rest, len(items), len(ids))
        tail = self._tails.get(tail_key)
        if tail is None:
            tail = _recent(self._tails, tail_key, self._tail(rest, len(items), len(ids)))
        pcs = state.pcs
        own_key = pcs if self._pcs_alone else (pcs, state.regs, state.inputs)
        own = self._own_tops.get(own_key)
        if own is None:
            own = _recent(self._own_tops, own_key, self._own(state))
        if events_root < 0:
            events_root = _recent(self._events_trees, events, (ids, self._fold(ids)[0]))[1]
        self._last_events, self._last_ids, self._last_root = events, ids, events_root
        sems_root = self._sems_roots.get(items)
        if sems_root is None:
            sems_root = _recent(self._sems_roots, items, self._fold(list(map(self._leaf, chain.from_iterable(items))))[0])
        # what changes least goes deepest: most steps move a pc and a completion, few a
        # count; the top is not interned: the ids are the state's key
        below = sems_root << 32 | tail
        last = self._lasts.get(below)
        if last is None:
            last = _recent(self._lasts, below, self._pairs.intern(sems_root, tail))
        return (own << 32 | events_root) << 32 | last

    def _own(self, state: State) -> int:
        """The two top nodes of the pcs', registers' and inputs' tree, as one integer."""
        leaf = self._leaf
        own = [pc + 1 for pc in state.pcs]  # a faulted thread's pc is -1
        if self._paired_pcs:
            own = [own[k] << 15 | own[k + 1] for k in range(0, len(own) - 1, 2)] + own[len(own) - len(own) % 2:]
        if self._registers:
            own.extend(map(leaf, chain.from_iterable(state.regs)))
        own.extend(map(leaf, state.inputs))
        left, right = self._fold(own, 2)
        return left << 32 | right

    def _tail(self, rest: tuple, count_items: int, count_events: int) -> int:
        """The node of the faults and hazards (numbered) with the lengths of the two parts
        that vary (which the shapes of their trees follow)."""
        number = self._rest.get(rest)
        if number is None:
            number = self._rest[rest] = len(self._rest_values)
            self._rest_values.append(rest)
        intern, leaf = self._pairs.intern, self._leaf
        return intern(number, intern(leaf(count_items), leaf(count_events)))

    def _fold(self, values: list[int], top: int = 1) -> list[int]:
        """The `top` nodes at the top of `values`' tree: pairs folded level by level, an odd
        last one carried up as it is (so the shape depends on the length alone), until at
        most `top` are left; 0 for each one missing."""
        intern = self._pairs.intern
        while len(values) > top:
            folded = [intern(values[k], values[k + 1]) for k in range(0, len(values) - 1, 2)]
            if len(values) % 2:
                folded.append(values[-1])
            values = folded
        return values + [0] * (top - len(values))

    def _unfold(self, tops: list[int], length: int) -> list[int]:
        """The `length` values whose tree's top nodes are `tops`."""
        if length <= len(tops):
            return tops[:length]
        sizes = [length]
        while sizes[-1] > len(tops):
            sizes.append((sizes[-1] + 1) // 2)
        level = tops
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
        last = self._last_events
        return self._spliced(events, last, self._last_ids) if last else self._event_ids_of(events)

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
        ids: list = list(map(self._event_by_value.get, events))
        k = _find_none(ids, 0)
        while k >= 0:  # only the few a step created are new
            ids[k] = self.event_id(events[k])
            k = _find_none(ids, k + 1)
        return ids

    def event_id(self, event: Event) -> int:
        """The number of a pending completion (numbered when first seen)."""
        found = self._event_by_value.get(event)
        if found is None:
            accesses = self._accesses.setdefault(event.accesses, event.accesses)
            own = event if accesses is event.accesses else event._replace(accesses=accesses)
            found = self._event_by_value[own] = len(self._events)
            self._events.append(own)
        return found

    def event(self, number: int) -> Event:
        return self._events[number]

    # -- unpacking --

    def unpack(self, key: int) -> State:
        """The state whose key is `key`. Its parts are looked up first among those unpacked
        lately (an unpacked state shares them with the states unpacked before it)."""
        own_tops = key >> 64
        own = self._own_parts.get(own_tops)
        if own is None:
            own = _recent(self._own_parts, own_tops, self._own_values(own_tops >> 32, own_tops & _MASK32))
        last = key & _MASK32
        rest = self._rest_parts.get(last)
        if rest is None:
            rest = _recent(self._rest_parts, last, self._rest_of(last))
        sems, faults, hazards, ledger, count_events = rest
        events_root = (key >> 32) & _MASK32
        events_key = count_events << 32 | events_root
        found = self._events_parts.get(events_key)
        if found is None:
            ids = self._unfold([events_root], count_events)
            found = _recent(self._events_parts, events_key, (tuple(map(self._events.__getitem__, ids)), ids))
        events, ids = found
        self._last_events, self._last_ids, self._last_root = events, ids, events_root
        pcs, regs, inputs = own
        return State(pcs, regs, sems, events, faults, inputs, hazards, ledger)

    def _own_values(self, left: int, right: int) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...], tuple[int, ...]]:
        """The pcs, registers and inputs whose tree's top nodes are `left` and `right`."""
        threads, registers = self._threads, self._registers
        leaves = (threads + 1) // 2 if self._paired_pcs else threads
        own = self._unfold([left, right], leaves + registers + self._inputs)
        if self._paired_pcs:
            unpaired: list[int] = []
            for leaf in own[:threads // 2]:
                unpaired += (leaf >> 15, leaf & 0x7FFF)
            own = unpaired + own[threads // 2:]  # an odd last pc is a leaf of its own
        pcs = tuple(pc - 1 for pc in own[:threads])
        values = [self._value(v) for v in own[len(own) - registers - self._inputs:]]
        inputs = tuple(values[registers:])
        if registers:
            flat, at, regs = values, 0, []
            for size in self._sizes:
                regs.append(tuple(flat[at:at + size]))
                at += size
        else:
            regs = [() for _ in self._sizes]
        return pcs, tuple(regs), inputs

    def _rest_of(self, last: int) -> tuple[Counts, tuple, tuple, Counts, int]:
        """The counts, faults, hazards and barrier ledger, and the number of pending
        completions, of the node `last` (the counts' root with the tail)."""
        pair = self._pairs.pair
        sems_root, tail = pair(last)
        rest, lengths = pair(tail)
        count_items, count_events = map(self._value, pair(lengths))
        faults, hazards, ledger = self._rest_values[rest]
        flat_sems = [self._value(v) for v in self._unfold([sems_root], 2 * count_items)]
        pairs = iter(flat_sems)
        return Counts(self._sem_count, tuple(zip(pairs, pairs))), faults, hazards, ledger, count_events

    # -- the visited set --

    def find(self, key: int) -> int | None:
        """The position of a key, if stored."""
        return self._index.find(key)

    def add(self, key: int, state: State, image: int = 0) -> int:
        """Store `state` under `key`, whose state the group element `image` maps to
        `state` (0: `state` is the key's); its position. The object itself is kept for
        `take`, while few are."""
        position = self._index.add(key)
        if self._images is not None:
            self._images.append(image)
        else:
            assert image == 0, "a state stored under another's key needs the store's group"
        if len(self._kept) < _KEPT:
            self._kept[position] = state
        return position

    def take(self, position: int) -> State:
        """The state at `position`, to be expanded: the object `add` kept, if it still
        holds it (once only), else unpacked."""
        state = self._kept.pop(position, None)
        if state is None:
            return self[position]
        return state

    def holds(self, position: int, state: State, key_state: State, image: int) -> bool:
        """Whether the state stored at `position`, found by the key of `key_state`, is
        `state` (which `image` maps `key_state` to)."""
        stored = self._images[position] if self._images is not None else 0
        if stored == image:
            return True
        assert self._group is not None
        return self._group.image(key_state, stored) == state

    def __getitem__(self, position: int) -> State:
        state = self.unpack(self._index.key(position))
        if self._images is not None and self._images[position]:
            assert self._group is not None
            state = self._group.image(state, self._images[position])
        return state

    def __len__(self) -> int:
        return len(self._index)

    def nbytes(self) -> int:
        """The memory that grows with the states stored: the trees' nodes and their index,
        the keys and theirs, the group elements, and the big values and fault combinations
        met (as Python objects, measured). Not counted: the states kept unpacked between
        `add` and `take` (at most `_KEPT`, whatever the number of states), and the
        completions (`fixed_nbytes`), and the parts remembered with their trees' ids (at most
        `_RECENT` of each kind, whatever the number of states)."""
        images = sys.getsizeof(self._images) if self._images is not None else 0
        sides = deep_size((self._big, self._big_values, self._rest, self._rest_values))
        return self._pairs.nbytes() + self._index.nbytes() + images + sides

    def fixed_nbytes(self) -> int:
        """The memory of the numbered completions and their accesses (as Python objects,
        measured): one entry for each distinct completion of the protocol's copies met,
        whatever the number of states."""
        return deep_size((self._events, self._event_by_value, self._accesses))


class SearchTree:
    """Per stored state: its parent's position (-1: a root), the action that reached it,
    and its sleep set. An action is one machine integer (a thread's action as the thread,
    a completion as -2 minus its number in the store: two bytes while they fit); each
    distinct sleep set is kept once, as the bytes of its actions' sorted integers, and
    named by its number (two bytes while there are fewer than 65,536 of them). A state's
    depth travels with it in the queue (`Fifo`), not stored: 8 bytes a state, and the
    distinct sleep sets."""

    def __init__(self, store: StateStore):
        self._store = store
        self.parent, self._via, self._sleep = array("i"), array("h"), array("H")
        # each distinct sleep set as its sorted codes, numbered (a dict of tuples cost 150
        # to 200 bytes a set: most of a small search's bytes)
        self._sleep_sets = _Sequences()
        self._decoded: dict[int, frozenset] = {0: frozenset()}  # the sets asked for lately

    def add(self, parent: int, action: Action | None, sleep: frozenset) -> None:
        self.parent.append(parent)
        code = -1 if action is None else self._code(action)
        if not -32_768 <= code < 32_768 and self._via.typecode == "h":
            self._via = array("i", self._via)  # more threads or completions than two bytes name
        self._via.append(code)
        number = self._sleep_id(sleep)  # first: it may widen the array
        self._sleep.append(number)

    def _code(self, action: Action) -> int:
        if isinstance(action, EventFires):
            return -2 - self._store.event_id(action.event)
        return action.thread

    def _action(self, code: int) -> Action:
        return ThreadStep(code) if code >= 0 else EventFires(self._store.event(-2 - code))

    def via(self, i: int) -> Action | None:
        code = self._via[i]
        return None if code == -1 else self._action(code)

    def sleep(self, i: int) -> frozenset:
        number = self._sleep[i]
        found = self._decoded.get(number)
        if found is None:
            if len(self._decoded) >= _DECODED_KEPT:
                self._decoded = {0: frozenset()}
            found = self._decoded[number] = frozenset(map(self._action, self._sleep_sets[number]))
        return found

    def set_sleep(self, i: int, sleep: frozenset) -> None:
        self._sleep[i] = self._sleep_id(sleep)

    def _sleep_id(self, sleep: frozenset) -> int:
        if not sleep:
            return 0
        found = self._sleep_sets.intern(array("i", sorted(map(self._code, sleep))))
        if found == 1 << 16 and self._sleep.typecode == "H":
            self._sleep = array("i", self._sleep)  # more sleep sets than two bytes name
        return found

    def nbytes(self) -> int:
        """The arrays and the distinct sleep sets (they grow with the states too, if much
        more slowly)."""
        return sum(map(sys.getsizeof, (self.parent, self._via, self._sleep))) + self._sleep_sets.nbytes()


class _Sequences:
    """Interned sequences of 32-bit integers: `intern` numbers each distinct sequence once,
    in order of first interning (0: the empty one). Kept end to end in a machine array, with
    where each ends and an index by open addressing: 4 bytes an integer and 9 to 12 a
    sequence."""

    def __init__(self) -> None:
        self._items = array("i")
        self._bounds = array("I", [0, 0])  # sequence k is _items[_bounds[k]:_bounds[k + 1]]
        self._slots = array("i", [-1]) * 16
        self._place(hash(b""), 0)

    def __len__(self) -> int:
        return len(self._bounds) - 1

    def __getitem__(self, number: int) -> array:
        return self._items[self._bounds[number]:self._bounds[number + 1]]

    def intern(self, items: array) -> int:
        slots, bounds, stored = self._slots, self._bounds, self._items
        size = len(slots)
        i = _slot(hash(items.tobytes()) & _MASK64, size)
        while True:
            found = slots[i]
            if found < 0:
                break
            if stored[bounds[found]:bounds[found + 1]] == items:
                return found
            i = i + 1 if i + 1 < size else 0
        found = len(bounds) - 1
        stored.extend(items)
        bounds.append(len(stored))
        slots[i] = found
        if 4 * len(self) > 3 * size:
            self._slots = array("i", [-1]) * _grown(size)
            for known in range(len(self)):
                self._place(hash(self[known].tobytes()), known)
        return found

    def _place(self, hashed: int, number: int) -> None:
        slots = self._slots
        size = len(slots)
        i = _slot(hashed & _MASK64, size)
        while slots[i] >= 0:
            i = i + 1 if i + 1 < size else 0
        slots[i] = number

    def nbytes(self) -> int:
        return sum(map(sys.getsizeof, (self._items, self._bounds, self._slots)))


class Fifo:
    """The breadth-first queue of positions, each with its depth (the length of the path
    that queued it), as machine arrays read from a moving head."""

    def __init__(self) -> None:
        self._items, self._depths = array("i"), array("i")
        self._head = 0

    def append(self, position: int, depth: int) -> None:
        self._items.append(position)
        self._depths.append(depth)

    def popleft(self) -> tuple[int, int]:
        """The first position queued and its depth."""
        head = self._head
        position, depth = self._items[head], self._depths[head]
        self._head = head = head + 1
        if head >= 65_536 and 2 * head >= len(self._items):
            del self._items[:head]  # what was read, dropped now and then
            del self._depths[:head]
            self._head = 0
        return position, depth

    def clear(self) -> None:
        self._items, self._depths, self._head = array("i"), array("i"), 0

    def __len__(self) -> int:
        return len(self._items) - self._head


_Remembered = TypeVar("_Remembered")
_RECENT = 4096  # parts of each kind remembered with their trees' tops (`StateStore.pack`)
_KEPT = 4096  # states kept unpacked between `add` and `take`: a breadth-first frontier can be millions
_DECODED_KEPT = 1024  # sleep sets kept decoded, of those asked for lately


def deep_size(obj) -> int:
    """The bytes of `obj` and of every container and value it holds, each object counted
    once (`sys.getsizeof`: what a table of Python objects really costs)."""
    seen: set[int] = set()
    total = 0
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (tuple, list, set, frozenset)):
            stack.extend(item)
    return total


def _recent(memo: dict, key, value: _Remembered) -> _Remembered:
    """`value`, remembered under `key` in `memo` (emptied first when full)."""
    if len(memo) >= _RECENT:
        memo.clear()
    memo[key] = value
    return value


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
