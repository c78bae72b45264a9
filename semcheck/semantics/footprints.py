"""What an action may touch, and when two actions may not commute.

A footprint names semaphore instances and memory cells by their ids in a `System`, as small
frozensets: an instruction touches a handful of them, so nothing here grows with the number
of devices. `ThreadTable` answers, for one thread, "what may it still do to resource r from
pc on?" in time independent of the size of the protocol; the partial-order reduction
(`engines/explicit/reduction.py`), the stuck-wait classification (`properties.py`) and the split into
independent parts (`engines/components.py`) ask it.

Resources are one integer space: semaphore instance `sid` is resource `sid`, memory cell `c`
is resource `cell_base + c`. Each footprint becomes, per resource, two 4-bit masks (x, y)
with `conflict(a, b) == any(xa & yb or xb & ya over shared resources)` (`clash`).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import Iterable, Iterator, NamedTuple

from semcheck import ir

_NONE: frozenset[int] = frozenset()


class Footprint(NamedTuple):
    """Semaphore instances (inc/dec/wait/read) and memory cells (mread/mwrite/mnear) an
    action may touch. Memory cells are buffer regions plus one "lifecycle" cell per
    (device, core): entry and exit write it, and whatever checks whether a core is inside
    the kernel reads it."""

    inc: frozenset[int] = _NONE  # may add to
    dec: frozenset[int] = _NONE  # decrementing wait on (or reset)
    wait: frozenset[int] = _NONE  # non-decrementing wait on
    read: frozenset[int] = _NONE  # reads
    mread: frozenset[int] = _NONE  # memory cells read
    mwrite: frozenset[int] = _NONE  # memory cells written
    mnear: frozenset[int] = _NONE  # every cell that overlaps a cell read or written

    def __or__(self, other: "Footprint") -> "Footprint":  # type: ignore[override]
        return Footprint(*(a | b for a, b in zip(self, other)))

    def without_cells(self, cells: frozenset[int]) -> "Footprint":
        return self._replace(mread=self.mread - cells, mwrite=self.mwrite - cells, mnear=self.mnear - cells)


EMPTY = Footprint()


def conflict(a: Footprint, b: Footprint) -> bool:
    """True when two actions of different actors may not commute.

    Additions commute with each other and with waits (an addition never disables a wait);
    a read does not commute with anything that changes the count; a decrementing wait does
    not commute with another wait or a read of the same semaphore (competing waiters). On
    memory, a write does not commute with a read or write of the same cell (the race and
    entry checks see the difference).
    """
    return not (
        a.inc.isdisjoint(b.read)
        and a.read.isdisjoint(b.inc | b.dec)
        and a.dec.isdisjoint(b.dec | b.wait | b.read)
        and b.dec.isdisjoint(a.wait | a.read)
        and a.mwrite.isdisjoint(b.mnear)
        and b.mwrite.isdisjoint(a.mnear)
    )


# --- the channel encoding: conflict as two 4-bit ANDs per shared resource ----------------------

# x channels: inc, read, dec, mwrite; y channels aligned so that x_a & y_b is inc-read,
# read-inc/dec, dec-dec/wait/read and a written cell against a cell overlapping b's.
X_INC, X_READ, X_DEC, X_WRITE = 1, 2, 4, 8
Y_READ, Y_CHANGE, Y_WAITER, Y_NEAR = 1, 2, 4, 8

Channels = dict[int, tuple[int, int]]  # resource -> (x, y)


def channels(fp: Footprint, cell_base: int) -> Channels:
    """The footprint per resource. Every resource it names has an entry (a read cell with
    no bits too), so the keys are everything the action may touch."""
    out: dict[int, list[int]] = {}

    def put(resources: Iterable[int], offset: int, x: int, y: int) -> None:
        for r in resources:
            bits = out.setdefault(r + offset, [0, 0])
            bits[0] |= x
            bits[1] |= y

    put(fp.inc, 0, X_INC, Y_CHANGE)
    put(fp.dec, 0, X_DEC, Y_CHANGE | Y_WAITER)
    put(fp.wait, 0, 0, Y_WAITER)
    put(fp.read, 0, X_READ, Y_READ | Y_WAITER)
    put(fp.mread, cell_base, 0, 0)
    put(fp.mwrite, cell_base, X_WRITE, 0)
    put(fp.mnear, cell_base, 0, Y_NEAR)
    return {r: (x, y) for r, (x, y) in out.items()}


def clash(a: Channels, b: Channels) -> bool:
    """`conflict` of the two footprints these channels encode."""
    if len(b) < len(a):
        a, b = b, a
    for r, (xa, ya) in a.items():
        other = b.get(r)
        if other is not None and (xa & other[1] or other[0] & ya):
            return True
    return False


def union(into: dict[int, tuple[int, int]], more: Channels) -> None:
    for r, (x, y) in more.items():
        old = into.get(r)
        into[r] = (x, y) if old is None else (old[0] | x, old[1] | y)


# --- footprints packed: one resource id and one byte of membership per entry --------------------

# Which fields of a `Footprint` name a resource (semaphore instances below `cell_base`, memory
# cells at `cell_base + cell`): the two kinds never share an id, so one byte holds both.
M_INC, M_DEC, M_WAIT, M_READ = 1, 2, 4, 8
M_MREAD, M_MWRITE, M_MNEAR = 16, 32, 64
_FIELDS = (("inc", M_INC, False), ("dec", M_DEC, False), ("wait", M_WAIT, False), ("read", M_READ, False),
           ("mread", M_MREAD, True), ("mwrite", M_MWRITE, True), ("mnear", M_MNEAR, True))


def _channel_of(bits: int) -> tuple[int, int]:
    """(x, y) of a resource named with these membership bits, as `channels` gives it."""
    x = y = 0
    for mask, (bx, by) in ((M_INC, (X_INC, Y_CHANGE)), (M_DEC, (X_DEC, Y_CHANGE | Y_WAITER)), (M_WAIT, (0, Y_WAITER)),
                           (M_READ, (X_READ, Y_READ | Y_WAITER)), (M_MWRITE, (X_WRITE, 0)), (M_MNEAR, (0, Y_NEAR))):
        if bits & mask:
            x, y = x | bx, y | by
    return x, y


CHANNEL_OF: tuple[tuple[int, int], ...] = tuple(_channel_of(bits) for bits in range(128))


def packed(fp: Footprint, cell_base: int) -> list[tuple[int, int]]:
    """(resource, membership bits) of everything a footprint names, by resource."""
    out: dict[int, int] = {}
    for name, bit, cell in _FIELDS:
        offset = cell_base if cell else 0
        for r in getattr(fp, name):
            out[r + offset] = out.get(r + offset, 0) | bit
    return sorted(out.items())


class ThreadFootprints:
    """One thread's footprints, one per pc, packed in machine arrays: a ring of N devices has
    3N^2 instructions, and a `Footprint` of frozensets costs about a kilobyte each where
    these cost 9 bytes per resource named (a copy start names about seven)."""

    __slots__ = ("cell_base", "_starts", "_resources", "_bits")

    def __init__(self, per_pc: Iterable[Iterable[tuple[int, int]]], cell_base: int):
        self.cell_base = cell_base
        starts, resources, bits = array("q", [0]), array("q"), bytearray()
        for entries in per_pc:
            for r, b in entries:
                resources.append(r)
                bits.append(b)
            starts.append(len(resources))
        self._starts, self._resources, self._bits = starts, resources, bytes(bits)

    @classmethod
    def of(cls, fps: Iterable[Footprint], cell_base: int) -> "ThreadFootprints":
        return cls((packed(fp, cell_base) for fp in fps), cell_base)

    def __len__(self) -> int:
        return len(self._starts) - 1

    def __getitem__(self, pc: int) -> Footprint:
        if not 0 <= pc < len(self._starts) - 1:
            raise IndexError(pc)
        return self.footprint(pc)

    def __iter__(self) -> Iterator[Footprint]:
        return (self.footprint(pc) for pc in range(len(self)))

    def entries(self, pc: int) -> Iterable[tuple[int, int]]:
        """(resource, membership bits) of the instruction at pc."""
        a, b = self._starts[pc], self._starts[pc + 1]
        return zip(self._resources[a:b], self._bits[a:b])

    def all_entries(self) -> Iterator[tuple[int, int, int]]:
        """(pc, resource, bits) of every instruction, in pc order."""
        starts, resources, bits = self._starts, self._resources, self._bits
        for pc in range(len(starts) - 1):
            for k in range(starts[pc], starts[pc + 1]):
                yield pc, resources[k], bits[k]

    def footprint(self, pc: int) -> Footprint:
        sets: list[set[int]] = [set() for _ in _FIELDS]
        base = self.cell_base
        for r, b in self.entries(pc):
            for k, (_name, bit, cell) in enumerate(_FIELDS):
                if b & bit:
                    sets[k].add(r - base if cell else r)
        return Footprint(*(frozenset(s) if s else _NONE for s in sets))

    def channels(self, pc: int) -> Channels:
        return {r: CHANNEL_OF[b] for r, b in self.entries(pc)}


class _Own:
    """`ThreadTable.own`: the channels of the instruction at each pc, decoded when asked."""

    __slots__ = ("_fps",)

    def __init__(self, fps: ThreadFootprints):
        self._fps = fps

    def __len__(self) -> int:
        return len(self._fps)

    def __getitem__(self, pc: int) -> Channels:
        return self._fps.channels(pc)


# --- one thread's footprints, indexed by resource ------------------------------------------------


def looping_pcs(body: tuple[ir.Instr, ...]) -> set[int]:
    """Instructions that may run more than once: those inside a backward jump's range."""
    looping: set[int] = set()
    for pc, instr in enumerate(body):
        if isinstance(instr, (ir.Branch, ir.Jump)) and instr.target <= pc:
            looping.update(range(instr.target, pc + 1))
    return looping


def successors(pc: int, instr: ir.Instr) -> tuple[int, ...]:
    if isinstance(instr, ir.Cut):  # where lowering stopped: the thread goes no further
        return ()
    if isinstance(instr, ir.Jump):
        return (instr.target,)
    if isinstance(instr, ir.Branch):
        return (pc + 1, instr.target)
    return (pc + 1,)


def is_straight(body: tuple[ir.Instr, ...]) -> bool:
    return not any(isinstance(i, (ir.Branch, ir.Jump)) for i in body)


_MOST_NEXT_TABLES = 256  # per thread


class ThreadTable:
    """One thread's footprints: `own[pc]` per instruction, and what the thread may still do
    to a resource from a pc on (`future`), optionally only up to a set of stop pcs.

    Straight-line code (the common case: loops over the grid and the ring are unrolled at
    capture) keeps every (resource, pc) it names as one sorted machine array of keys
    `resource * stride + pc`, with the union of each entry's channels and those after it on
    the same resource: a query is one bisection, and the table costs 11 bytes per entry
    (a Python dict of lists per resource cost about 40 times that). Code with jumps keeps
    one future per pc (a fixpoint over the control-flow graph), which is exact for loops."""

    def __init__(self, body: tuple[ir.Instr, ...], fps: ThreadFootprints):
        self.body = body
        self.footprints = fps
        self.own = _Own(fps)
        self.straight = is_straight(body)
        self._stride = stride = len(body) + 1
        if self.straight:
            keys = sorted((r * stride + pc) << 7 | b for pc, r, b in fps.all_entries())
            self._keys = array("q", [k >> 7 for k in keys])
            codes = bytes([k & 127 for k in keys])
            xs, ys = bytearray(len(keys)), bytearray(len(keys))
            x = y = 0
            for k in range(len(keys) - 1, -1, -1):
                if k == len(keys) - 1 or self._keys[k] // stride != self._keys[k + 1] // stride:
                    x = y = 0  # the last entry of its resource
                cx, cy = CHANNEL_OF[codes[k]]
                x, y = x | cx, y | cy
                xs[k], ys[k] = x, y
            self._codes, self._xs, self._ys = codes, bytes(xs), bytes(ys)
            self._next: dict[int, list[tuple[int, bool, list[int]]]] = {}
        else:
            self._futures = self._fixpoint(frozenset())
            self._stopped: dict[frozenset[int], list[Channels]] = {}
            self._on: dict[int, list[tuple[int, int]]] | None = None

    @property
    def reachable(self) -> frozenset[int]:
        """Every resource the thread may ever touch (built when asked: it is as big as the
        table)."""
        if self.straight:
            stride = self._stride
            return frozenset(k // stride for k in self._keys)
        return frozenset(self._futures[0]) if self.body else frozenset()

    def resources(self) -> Iterator[int]:
        """The resources of `reachable`, in increasing order, without building the set."""
        if not self.straight:
            yield from sorted(self.reachable)
            return
        stride, last = self._stride, -1
        for k in self._keys:
            r = k // stride
            if r != last:
                yield r
                last = r

    def _fixpoint(self, stop: frozenset[int]) -> list[Channels]:
        """future[pc] = union of the footprints of every instruction reachable from pc
        without passing an instruction in `stop`."""
        n = len(self.body)
        own = [self.own[pc] for pc in range(n)]
        future: list[dict] = [{} if pc in stop else dict(ch) for pc, ch in enumerate(own)]
        succs = [successors(pc, instr) for pc, instr in enumerate(self.body)]
        changed = True
        while changed:  # one backward pass suffices for straight-line code; loops need more
            changed = False
            for pc in range(n - 1, -1, -1):
                if pc in stop:
                    continue
                acc = dict(own[pc])
                for s in succs[pc]:
                    if s < n:
                        union(acc, future[s])
                if acc != future[pc]:
                    future[pc] = acc
                    changed = True
        return future

    def _run(self, r: int) -> tuple[int, int]:
        """The indices [lo, hi) of resource r's entries (straight-line code)."""
        keys, stride = self._keys, self._stride
        return bisect_left(keys, r * stride), bisect_left(keys, (r + 1) * stride)

    def future(self, pc: int, r: int) -> tuple[int, int]:
        """(x, y) of everything the thread may still do to resource r from pc on (pc's own
        instruction included)."""
        if self.straight:
            keys, stride = self._keys, self._stride
            k = bisect_left(keys, r * stride + max(pc, 0))  # a faulted thread's pc (-1): everything
            if k < len(keys) and keys[k] < (r + 1) * stride:
                return self._xs[k], self._ys[k]
            return 0, 0
        return self._futures[pc].get(r, (0, 0)) if 0 <= pc < len(self.body) else (0, 0)

    def on(self, r: int) -> list[tuple[int, int]]:
        """(pc, membership bits) of each instruction that names resource r, in pc order."""
        if self.straight:
            lo, hi = self._run(r)
            base = r * self._stride
            return [(k - base, b) for k, b in zip(self._keys[lo:hi], self._codes[lo:hi])]
        if self._on is None:  # code with jumps is small: every resource's list at once
            self._on = {}
            for pc, resource, bits in self.footprints.all_entries():
                self._on.setdefault(resource, []).append((pc, bits))
        return self._on.get(r, [])

    def future_before(self, pc: int, r: int, stops: tuple[int, ...]) -> tuple[int, int]:
        """As `future`, counting only what is reachable without passing a pc in `stops`
        (sorted)."""
        if self.straight:
            k = bisect_left(stops, pc)
            if k == len(stops):
                return self.future(pc, r)
            keys, stride = self._keys, self._stride
            first, end = self._run(r)
            if first == end:
                return 0, 0
            lo = bisect_left(keys, r * stride + max(pc, 0), first, end)
            hi = bisect_left(keys, r * stride + stops[k], first, end)
            if lo == hi:
                return 0, 0
            if hi == end:
                return self._xs[lo], self._ys[lo]
            # the union over entries [lo, hi): each bit is in it when its next occurrence at
            # or after lo comes before hi
            x = y = 0
            for bit, is_y, next_at in self._next_bits(r, first, end):
                if next_at[lo - first] < hi - first:
                    if is_y:
                        y |= bit
                    else:
                        x |= bit
            return x, y
        key = frozenset(stops)
        table = self._stopped.get(key)
        if table is None:
            table = self._stopped[key] = self._fixpoint(key)
        return table[pc].get(r, (0, 0)) if 0 <= pc < len(self.body) else (0, 0)

    def _next_bits(self, r: int, first: int, end: int) -> list[tuple[int, bool, list[int]]]:
        """Straight-line code, resource r (entries [first, end)): for each bit of x and y
        that some entry has, the index (relative to `first`) of its next occurrence at or
        after each index (end - first: none). Built on first use: only resources a cut is
        asked about pay."""
        found = self._next.get(r)
        if found is None:
            if len(self._next) >= _MOST_NEXT_TABLES:
                self._next.clear()  # a long search asks about ever new resources: keep few
            n = end - first
            found = []
            for is_y in (False, True):
                for bit in (1, 2, 4, 8):
                    next_at = [n] * (n + 1)
                    for j in range(n - 1, -1, -1):
                        channel = CHANNEL_OF[self._codes[first + j]][1 if is_y else 0]
                        next_at[j] = j if channel & bit else next_at[j + 1]
                    if next_at[0] < n:
                        found.append((bit, is_y, next_at))
            self._next[r] = found
        return found


def bits(mask: int):
    """The indices of the bits set in `mask`, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low

