"""The tables the counting cut reads (`Independence.cut`), per thread and per semaphore.

* per straight-line thread, its waits with a constant semaphore and amount (`counted`),
  indexed by the threads that may add to their semaphore and by the semaphore;
* per (thread, semaphore), what its decrementing waits take (`taken`) and what its
  instructions may still add (`added`), as prefix and suffix sums, and for a straight-line
  thread what it adds between two pcs (`added_between`: up to where it stops).

A ring of N devices has 2N^2 waits and N^2 semaphores, each with a thread or two that add
to it and one that waits: a dict entry and a tuple per wait, and per (thread, semaphore),
cost about 2 GB at 1024 devices. So the waits are machine arrays per thread, the indices
sorted arrays of keys, and the sums per (thread, semaphore) are made from the thread's own
table (`ThreadTable.pcs_on`) when the cut first asks, a bounded number kept.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import Iterator, NamedTuple

from semcheck import ir
from semcheck.semantics.footprints import M_INC, ThreadTable, looping_pcs
from semcheck.semantics import System, dma_increment

UNBOUNDED = object()  # an addition of an unknown amount, or one in a loop
_KEPT = 8_192  # sums and adder sets kept at once


class Run(NamedTuple):
    lo: int  # where the run starts in the codes
    size: int
    base: int  # key * width: a code less this is the value


class IntLists:
    """An int-keyed map to sorted lists of ints, as one sorted array of `key * width +
    value` (values below `width`): `get(key)` is a bisection."""

    def __init__(self, pairs: list[tuple[int, int]], width: int):
        self._width = width
        self._codes = array("q", sorted(key * width + value for key, value in pairs))
        self._keys = array("q", sorted({key for key, _value in pairs}))

    def get(self, key: int) -> list[int] | None:
        run = self.run(key)
        if run is None:
            return None
        return [code - run.base for code in self._codes[run.lo:run.lo + run.size]]

    def run(self, key: int) -> "Run | None":
        """Where key's values lie, without listing them (a ring thread's waits that one
        neighbour feeds are N of them: `from_` and `at` read only what they need)."""
        width, codes = self._width, self._codes
        lo = bisect_left(codes, key * width)
        hi = bisect_left(codes, (key + 1) * width, lo)
        return Run(lo, hi - lo, key * width) if hi > lo else None

    def position(self, run: "Run", value: int) -> int:
        """The index (within the run) of its first value at least `value`."""
        return bisect_left(self._codes, run.base + value, run.lo, run.lo + run.size) - run.lo

    def at(self, run: "Run", i: int) -> int:
        return self._codes[run.lo + i] - run.base

    def from_(self, key: int, value: int, limit: int) -> list[int]:
        """Key's first `limit` values at least `value`."""
        run = self.run(key)
        if run is None:
            return []
        start = run.lo + self.position(run, value)
        return [code - run.base for code in self._codes[start:min(start + limit, run.lo + run.size)]]

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[int]:
        return iter(self._keys)

    def __contains__(self, key: int) -> bool:
        k = bisect_left(self._keys, key)
        return k < len(self._keys) and self._keys[k] == key


class CountedWaits:
    """One straight-line thread's waits with a constant semaphore and an amount of at
    least 1, in pc order: `entry(j)` is (pc, semaphore, amount, adder threads)."""

    def __init__(self, tables: "CountingTables", t: int):
        system = tables.system
        self.pcs, self.sids, self.needs = array("q"), array("q"), array("q")
        for pc in range(len(system.bodies[t])):
            known = system.static_wait(t, pc)
            if known and known[1] >= 1:
                self.pcs.append(pc)
                self.sids.append(known[0])
                self.needs.append(known[1])
        width = len(self.pcs) + 1
        self.by_sem = IntLists([(sid, j) for j, sid in enumerate(self.sids)], width)
        self.by_adder = IntLists([(a, j) for j, sid in enumerate(self.sids) for a in tables.adders(sid)], width)
        self._tables = tables

    def __len__(self) -> int:
        return len(self.pcs)

    def first_from(self, pc: int) -> int:
        """The index of the first wait at pc or later."""
        return bisect_left(self.pcs, pc)

    def entry(self, j: int) -> tuple[int, int, int, frozenset[int]]:
        sid = self.sids[j]
        return self.pcs[j], sid, self.needs[j], self._tables.adders(sid)


class CountingTables:
    def __init__(self, system: System, tables: list[ThreadTable]):
        self.system = system
        self.tables = tables
        self._looping = [looping_pcs(body) if not table.straight else set() for body, table in
                         zip(system.bodies, tables)]
        self._adders: dict[int, frozenset[int]] = {}
        self._counted: list[CountedWaits | None] = [
            CountedWaits(self, t) if table.straight else None for t, table in enumerate(tables)
        ]
        self._taken: dict[tuple[int, int], tuple[list[int], list[float]]] = {}
        self._added: dict[tuple[int, int], object] = {}
        self._added_prefix: dict[tuple[int, int], tuple[list[int], list[float]]] = {}

    def counted(self, t: int) -> CountedWaits | None:
        found = self._counted[t]
        return found if found else None

    def adders(self, sid: int) -> frozenset[int]:
        """The threads with an instruction that may add to `sid` (a signal, a copy whose
        completion may, or a wait or entry with a negative amount)."""
        found = self._adders.get(sid)
        if found is None:
            if len(self._adders) >= _KEPT:
                self._adders.clear()
            system = self.system
            found = self._adders[sid] = frozenset(
                a for a in system.touchers.get(sid)
                if any(bits & M_INC for _pc, bits in self.tables[a].on(sid))
            )
        return found

    def taken(self, t: int, sid: int) -> tuple[list[int], list[float]]:
        """(pcs, prefix sums) of what t's decrementing waits on `sid` take (NaN: an amount
        known only at run time, or a wait that may name another semaphore)."""
        key = (t, sid)
        found = self._taken.get(key)
        if found is None:
            if len(self._taken) >= _KEPT:
                self._taken.clear()
            system = self.system
            body = system.bodies[t]
            pcs: list[int] = []
            sums = [0.0]
            for pc, _bits in self.tables[t].on(sid):
                instr = body[pc]
                if isinstance(instr, ir.DmaWait) or (isinstance(instr, ir.Wait) and instr.decrement):
                    known = system.static_wait(t, pc)
                    pcs.append(pc)
                    sums.append(sums[-1] + (known[1] if known and known[0] == sid else float("nan")))
            found = self._taken[key] = (pcs, sums)
        return found

    def taken_between(self, t: int, sid: int, start: int, stop: int) -> int | None:
        """What t's decrementing waits on `sid` at pcs in [start, stop) take (None when one
        of them takes an amount known only at run time)."""
        pcs, prefix = self.taken(t, sid)
        lo, hi = bisect_left(pcs, start), bisect_left(pcs, stop)
        if lo == hi:
            return 0
        total = prefix[hi] - prefix[lo]
        return None if total != total else int(total)  # NaN: an unknown amount among them

    def added(self, a: int, sid: int):
        """(pcs, suffix sums) of what thread a's instructions may add to `sid` (a signal or
        copy naming exactly it with a constant amount), `UNBOUNDED` when one of them may add
        an unknown amount or runs in a loop, None when none may add to it."""
        key = (a, sid)
        found = self._added.get(key, _ABSENT)
        if found is _ABSENT:
            if len(self._added) >= _KEPT:
                self._added.clear()
            system = self.system
            body = system.bodies[a]
            pcs: list[int] = []
            amounts: list[float] = []
            found = None
            for pc, bits in self.tables[a].on(sid):
                if not bits & M_INC:
                    continue
                amount = constant_addition(system, a, body[pc], sid)
                if amount is None or pc in self._looping[a]:
                    found = UNBOUNDED
                    break
                pcs.append(pc)
                amounts.append(amount)
            if found is None and pcs:
                suffix = [0.0] * (len(amounts) + 1)
                for k in range(len(amounts) - 1, -1, -1):
                    suffix[k] = suffix[k + 1] + amounts[k]
                found = (pcs, suffix)
            self._added[key] = found
        return found

    def still_added(self, a: int, sid: int, pc: int) -> int | None:
        """The most thread a's instructions from pc on can add to `sid` (None: unbounded or
        known only at run time)."""
        found = self.added(a, sid)
        if found is None:
            return 0
        if found is UNBOUNDED:
            return None
        pcs, suffix = found
        total = suffix[bisect_left(pcs, pc)] if pc >= 0 else 0.0
        return None if total != total else int(total)  # NaN: an unknown amount

    def added_between(self, a: int, sid: int, start: int, stop: int) -> int | None:
        """The most straight-line thread a's instructions at pcs in [start, stop) can add to
        `sid` (None: one of them may add an amount known only at run time). Each runs at
        most once: a straight-line thread has no loop."""
        assert self.tables[a].straight, "only a straight-line thread's pcs bound what it does"
        key = (a, sid)
        found = self._added_prefix.get(key)
        if found is None:
            if len(self._added_prefix) >= _KEPT:
                self._added_prefix.clear()
            body = self.system.bodies[a]
            pcs: list[int] = []
            prefix = [0.0]
            for pc, bits in self.tables[a].on(sid):
                if bits & M_INC:
                    amount = constant_addition(self.system, a, body[pc], sid)
                    pcs.append(pc)
                    prefix.append(prefix[-1] + (float("nan") if amount is None else amount))
            found = self._added_prefix[key] = (pcs, prefix)
        pcs, prefix = found
        lo, hi = bisect_left(pcs, max(start, 0)), bisect_left(pcs, stop)
        if lo >= hi:
            return 0
        total = prefix[hi] - prefix[lo]
        return None if total != total else int(total)  # NaN: an unknown amount among them

    def last_addition(self, a: int, sid: int) -> float:
        """The last pc at which thread a adds a positive amount to `sid` (-1: never;
        infinity: unbounded or unknown amounts)."""
        found = self.added(a, sid)
        if found is None:
            return -1.0
        if found is UNBOUNDED:
            return float("inf")
        pcs, suffix = found
        for m in range(len(pcs) - 1, -1, -1):  # the last positive addition: the suffix sums drop there
            if suffix[m] != suffix[m + 1]:
                return float(pcs[m])
        return -1.0


_ABSENT = object()


def constant_addition(system: System, t: int, instr: ir.Instr, sid: int) -> float | None:
    """What `instr` adds to `sid` at most, when that is a constant >= 0: a signal or a copy
    whose target is exactly `sid` (a copy may add to it on either side). None otherwise."""
    if isinstance(instr, ir.Signal):
        if not isinstance(instr.inc, int) or instr.inc < 0 or system.candidates(t, instr.sem) != {sid}:
            return None
        return float(instr.inc)
    if isinstance(instr, ir.DmaStart):
        if not isinstance(instr.nbytes, int) or instr.nbytes < 0:
            return None
        target = ir.SemRef(instr.recv_sem.alloc, instr.recv_sem.index, instr.device, instr.core)
        total = 0.0
        sides = [target] + ([instr.send_sem] if instr.send_sem is not None else [])
        for ref in sides:
            sids = system.candidates(t, ref)
            if sid in sids:
                if len(sids) != 1:
                    return None
                total += dma_increment(system.instances.decl(sid), instr.nbytes)
        return total
    return None  # a wait or an entry whose amount may be negative, or anything else
