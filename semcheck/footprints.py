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

from bisect import bisect_left
from typing import Iterable, NamedTuple

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


class ThreadTable:
    """One thread's footprints: `own[pc]` per instruction, and what the thread may still do
    to a resource from a pc on (`future`), optionally only up to a set of stop pcs.

    Straight-line code (the common case: loops over the grid and the ring are unrolled at
    capture) keeps, per resource, the pcs that touch it with suffix unions: a query is one
    bisection, and the table is as big as the body's footprints. Code with jumps keeps one
    future per pc (a fixpoint over the control-flow graph), which is exact for loops."""

    def __init__(self, body: tuple[ir.Instr, ...], fps: list[Footprint], cell_base: int):
        self.body = body
        self.own: list[Channels] = [channels(fp, cell_base) for fp in fps]
        self.straight = not any(isinstance(i, (ir.Branch, ir.Jump)) for i in body)
        if self.straight:
            self._positions: dict[int, tuple[list[int], list[int], list[int]]] = {}
            for pc, ch in enumerate(self.own):
                for r, (x, y) in ch.items():
                    pcs, xs, ys = self._positions.setdefault(r, ([], [], []))
                    pcs.append(pc)
                    xs.append(x)
                    ys.append(y)
            for pcs, xs, ys in self._positions.values():
                for k in range(len(pcs) - 2, -1, -1):
                    xs[k] |= xs[k + 1]
                    ys[k] |= ys[k + 1]
            self.reachable: frozenset[int] = frozenset(self._positions)
            self._next: dict[int, list[tuple[int, bool, list[int]]]] = {}
        else:
            self._futures = self._fixpoint(frozenset())
            self._stopped: dict[frozenset[int], list[Channels]] = {}
            self.reachable = frozenset(self._futures[0]) if body else frozenset()

    def _fixpoint(self, stop: frozenset[int]) -> list[Channels]:
        """future[pc] = union of the footprints of every instruction reachable from pc
        without passing an instruction in `stop`."""
        n = len(self.body)
        future: list[dict] = [{} if pc in stop else dict(ch) for pc, ch in enumerate(self.own)]
        succs = [successors(pc, instr) for pc, instr in enumerate(self.body)]
        changed = True
        while changed:  # one backward pass suffices for straight-line code; loops need more
            changed = False
            for pc in range(n - 1, -1, -1):
                if pc in stop:
                    continue
                acc = dict(self.own[pc])
                for s in succs[pc]:
                    if s < n:
                        union(acc, future[s])
                if acc != future[pc]:
                    future[pc] = acc
                    changed = True
        return future

    def future(self, pc: int, r: int) -> tuple[int, int]:
        """(x, y) of everything the thread may still do to resource r from pc on (pc's own
        instruction included)."""
        if self.straight:
            found = self._positions.get(r)
            if found is None:
                return 0, 0
            pcs, xs, ys = found
            k = bisect_left(pcs, pc)
            return (xs[k], ys[k]) if k < len(pcs) else (0, 0)
        return self._futures[pc].get(r, (0, 0)) if 0 <= pc < len(self.body) else (0, 0)

    def future_before(self, pc: int, r: int, stops: tuple[int, ...]) -> tuple[int, int]:
        """As `future`, counting only what is reachable without passing a pc in `stops`
        (sorted)."""
        if self.straight:
            found = self._positions.get(r)
            if found is None:
                return 0, 0
            k = bisect_left(stops, pc)
            if k == len(stops):
                return self.future(pc, r)
            pcs = found[0]
            lo, hi = bisect_left(pcs, pc), bisect_left(pcs, stops[k])
            if lo == hi:
                return 0, 0
            if hi == len(pcs):
                return found[1][lo], found[2][lo]
            # the union over pcs[lo:hi]: each bit is in it when its next occurrence at or
            # after lo comes before hi
            x = y = 0
            for bit, is_y, next_at in self._next_bits(r):
                if next_at[lo] < hi:
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

    def _next_bits(self, r: int) -> list[tuple[int, bool, list[int]]]:
        """Straight-line code, resource r: for each bit of x and y that some pc touching r
        has, the index (into r's pcs) of its next occurrence at or after each index
        (len(pcs): none). Built on first use: only resources a cut is asked about pay."""
        found = self._next.get(r)
        if found is None:
            pcs = self._positions[r][0]
            n = len(pcs)
            found = []
            for is_y in (False, True):
                for bit in (1, 2, 4, 8):
                    next_at = [n] * (n + 1)
                    for j in range(n - 1, -1, -1):
                        channel = self.own[pcs[j]][r][1 if is_y else 0]
                        next_at[j] = j if channel & bit else next_at[j + 1]
                    if next_at[0] < n:
                        found.append((bit, is_y, next_at))
            self._next[r] = found
        return found
