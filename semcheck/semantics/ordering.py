"""Pairs of an access and a copy that no schedule can make race, known without a search.

`System.racing_pairs` pairs every access (load, store, copy start) with every copy whose
memory it may overlap, one of the two writing: a superset of what any schedule shows. A
pair that can never race still costs every engine something: the explicit search keeps
the access and the copy's completions dependent, so it explores their interleavings to
find a race that never comes, and z3 asks about it. An order that holds in every schedule
excludes a pair, and two facts give one from the program text alone:

* **Program order** within a thread: a copy its own thread starts after the access
  (neither can run twice: no backward jump spans them) is not in flight when the access
  runs.
* **Counting.** A decrementing wait W of thread t on semaphore s passes only once at
  least D has been added to s, D being what t's waits on s take up to and including W
  (counts start at 0, never go below it, and a reset only lowers them). Let P be the
  additions to s that may come before W: every signal and copy completion that may add
  to s, except those that must come after W. When every addition is a constant run at
  most once and the additions of P other than x sum to less than D, addition x (a signal,
  or one side of one copy) has happened before W passes.

"Must come after W" is happens-before, built from the same facts: program order, and x
before W for each addition x counting finds, so everything before x is before W too.
Every step only adds orders that hold in every schedule, so stopping early is sound too,
just weaker.

The relation is kept as its generating facts, not closed: for each addition, the first
wait of each thread it is known to come before (a later wait of that thread follows by
program order), and, per wait, the additions first known there. "Does (t, pc) come before
(e, epc)?" is then a search backwards from e's waits before epc, through the additions
known before them to their threads' earlier waits, newest first, until it meets thread t
at pc or later (bounded: a search that gives up answers no). Vector clocks at every wait
(what this kept before) cost waits x threads: 130k waits x 256 threads for the ring at 256
devices, so past 2M entries they were dropped and only program order and plain counting
were used; the facts cost one entry per addition, and the ring's questions are answered
in a step or two (its copy's wait for the bytes it forwards is the one fact needed).

Counting at a wait W of thread t on s is done for all of t's waits on s at once: the
additions that may come before them grow along t's program (its own earlier additions
join) while the amount taken grows, and an addition is guaranteed when it is more than
the slack, what may come before minus what is taken; taken from a heap, each addition is
decided once per waiting thread, so a send semaphore that every step of a ring adds to
and waits on costs its steps, not their square. Waits where some exact addition is still
undecided are counted again with the additions that must come after them left out, and
again while that teaches something new.
A pair (access X, copy C) is then excluded when X comes before C starts, or every
completion of C that may touch X's memory (the receive side writes the destination, the
send side reads the source, a local copy's one completion does both) comes before some
wait that comes before X.

This is what orders a kernel's copy-out of its outputs at exit after every copy into them
it waits for, even when several copies share one semaphore, and a ring's first local
copy before its neighbours' sends, which start only after an entry barrier the ring
signals once that copy has landed.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left, bisect_right
from typing import Protocol

from semcheck import ir
from semcheck.semantics.footprints import M_INC, Footprint, is_straight, looping_pcs
from semcheck.semantics.resource_index import ResourceIndex


class System(Protocol):
    """What the analysis reads of `semantics.System` (which imports this module)."""

    bodies: list[tuple[ir.Instr, ...]]
    footprints: list

    @property
    def resource_count(self) -> int: ...
    def static_wait(self, t: int, pc: int) -> tuple[int, int] | None: ...
    def completion_amount(self, sid: int, nbytes: int) -> int: ...
    def candidates(self, t: int, ref: ir.SemRef) -> frozenset[int]: ...
    def is_buffer_cell(self, cell: int) -> bool: ...
    def near_of(self, cells) -> frozenset[int]: ...


RECV, SEND = ir.DmaSide.RECV, ir.DmaSide.SEND
_SIDES = {None: 0, RECV: 1, SEND: 2}  # an addition's code: a signal's (no side), or a copy side's
MAX_ROUNDS = 64
# A question "does one instruction come before another?" looks at most this many waits and
# facts; all of them together at most `_STEPS_PER_INSTRUCTION` per instruction (and
# `_MIN_STEPS`): past either, the answer is "not known", which only keeps a pair.
_QUERY_STEPS = 20_000
_STEPS_PER_INSTRUCTION = 32
_MIN_STEPS = 1_000_000


class CopyOrder:
    """`excludes(t, pc, ct, cpc)`: whether the access at (t, pc) can never run while the
    copy started at (ct, cpc) is in flight."""

    def __init__(self, system: System):
        self.system = system
        bodies = system.bodies
        self._looping = [looping_pcs(body) for body in bodies]
        self._straight = [is_straight(body) for body in bodies]
        self._stride = max((len(body) for body in bodies), default=0) + 1
        self._steps_left = max(_MIN_STEPS, _STEPS_PER_INSTRUCTION * sum(len(body) for body in bodies))
        self._collect_additions()
        self._collect_takes()
        # the facts: per addition, the first wait of each thread it comes before ...
        self._first_thread = array("i", [-1]) * self._addition_count
        self._first_pc = array("i", [-1]) * self._addition_count
        self._more_firsts: dict[int, dict[int, int]] = {}  # ... past the first thread
        # ... and per wait, the additions first known to come before it: those counting
        # along the programs finds as one index (`ResourceIndex`, by wait), those found
        # after in a dict
        self._learnt: tuple[array, array] | None = (array("q"), array("q"))  # (wait, addition) pairs
        self._known_at = ResourceIndex(0, lambda: ())
        self._more_known_at: dict[int, list[int]] = {}
        unresolved = self._count_along_programs()
        learnt, self._learnt = self._learnt, None
        self._known_at = ResourceIndex(len(self._take_pc), lambda: zip(*learnt))
        self._refine(unresolved)

    # -- the question --

    def excludes(self, t: int, pc: int, ct: int, cpc: int) -> bool:
        if self.precedes(t, pc, ct, cpc) and cpc not in self._looping[ct] and pc not in self._looping[t]:
            return True  # the copy starts after the access
        if cpc in self._looping[ct] or not self._straight[t]:
            return False
        sides = self._sides_touching(t, pc, ct, cpc)
        return bool(sides) and all(self._completed_before(ct, cpc, side, t, pc) for side in sides)

    def precedes(self, t: int, pc: int, e: int, epc: int) -> bool:
        """Whether (t, pc) comes before (e, epc) in every schedule: the same thread in
        program order, or a chain of known facts from e's waits up to epc back to thread t
        at pc or later."""
        if t == e:
            return pc < epc
        if not self._straight[e]:
            return False
        starts, take_pcs = self._take_start, self._take_pc
        scanned: dict[int, int] = {}  # thread -> the takes below this index are looked at
        known: dict[int, int] = {e: epc}  # thread -> its prefix up to this pc comes before
        stack = [(e, epc)]
        steps = 0
        while stack:
            u, p = stack.pop()
            lo = scanned.get(u, starts[u])
            hi = bisect_right(take_pcs, p, starts[u], starts[u + 1])
            if hi <= lo:
                continue
            scanned[u] = hi
            for k in range(hi - 1, lo - 1, -1):  # newest first: the nearest fact is likeliest
                for a in self._known_before(k):
                    steps += 1
                    v, x = self._add_thread[a], self._add_pc[a]
                    if v == t and x >= pc:
                        self._steps_left -= steps
                        return True
                    # only a straight-line thread's prefix comes before one of its
                    # instructions (a forward branch may skip part of another's)
                    if self._straight[v] and x > known.get(v, -1):
                        known[v] = x
                        stack.append((v, x))
                steps += 1
                if steps > _QUERY_STEPS or steps > self._steps_left:
                    self._steps_left -= steps
                    return False
        self._steps_left -= steps
        return False

    def _known_before(self, take: int):
        more = self._more_known_at.get(take)
        found = self._known_at.get(take)
        return found if more is None else [*found, *more]

    def _completed_before(self, ct: int, cpc: int, side: ir.DmaSide, t: int, pc: int) -> bool:
        for a in self._additions_of(ct, cpc, side):
            for e, wpc in self._firsts(a):
                if (e == t and wpc < pc) or (e != t and self.precedes(e, wpc, t, pc - 1)):
                    return True
        return False

    def _firsts(self, a: int) -> list[tuple[int, int]]:
        """(thread, pc) of the first wait of each thread that addition a comes before."""
        if self._first_thread[a] < 0:
            return []
        found = [(self._first_thread[a], self._first_pc[a])]
        found.extend(self._more_firsts.get(a, {}).items())
        return found

    def _first_before(self, a: int, t: int) -> int | None:
        if self._first_thread[a] == t:
            return self._first_pc[a]
        return self._more_firsts.get(a, {}).get(t)

    def _learn(self, a: int, t: int, take: int) -> bool:
        """Addition a comes before the wait `take` of thread t: kept unless an earlier wait
        of t already says so. Whether it was new."""
        wpc = self._take_pc[take]
        known = self._first_before(a, t)
        if known is not None and known <= wpc:
            return False
        if self._first_thread[a] < 0 or self._first_thread[a] == t:
            self._first_thread[a], self._first_pc[a] = t, wpc
        else:
            self._more_firsts.setdefault(a, {})[t] = wpc
        if self._learnt is not None:
            self._learnt[0].append(take)
            self._learnt[1].append(a)
        else:
            self._more_known_at.setdefault(take, []).append(a)
        return True

    def _sides_touching(self, t: int, pc: int, ct: int, cpc: int) -> list[ir.DmaSide]:
        """The completions of the copy whose memory the access may conflict with."""
        system = self.system
        copy = system.bodies[ct][cpc]
        assert isinstance(copy, ir.DmaStart)
        access: Footprint = system.footprints[t][pc]
        started: Footprint = system.footprints[ct][cpc]
        if copy.send_sem is None:  # local: one completion, reading and writing
            return [RECV]
        src = frozenset(c for c in started.mread if system.is_buffer_cell(c))
        sides = []
        if access.mnear & started.mwrite:  # the destination, which the receive side writes
            sides.append(RECV)
        if access.mwrite & system.near_of(src):  # the source, which the send side reads
            sides.append(SEND)
        return sides

    # -- the facts --

    def _count_along_programs(self) -> list[int]:
        """Counting at every wait with program order alone: per thread and semaphore, its
        waits in order, the additions that may come before each (every other thread's, and
        its own before it) in a heap by amount, an addition guaranteed once it is more than
        the slack. The waits where an exact addition stays undecided."""
        unresolved: list[int] = []
        for t in range(len(self.system.bodies)):
            by_sem: dict[int, list[int]] = {}
            for k in range(self._take_start[t], self._take_start[t + 1]):
                by_sem.setdefault(self._take_sid[k], []).append(k)
            for sid, takes in by_sem.items():
                if self._unbounded[sid]:
                    continue
                ids = self._by_sem.get(sid)
                own = [a for a in ids if self._add_thread[a] == t]
                heap = [(-self._add_amount[a], a) for a in ids if self._add_thread[a] != t and self._exact[a]]
                heapq.heapify(heap)
                total = sum(self._add_amount[a] for a in ids if self._add_thread[a] != t)
                j = 0
                for k in takes:
                    wpc = self._take_pc[k]
                    while j < len(own) and self._add_pc[own[j]] <= wpc:
                        a = own[j]
                        total += self._add_amount[a]
                        if self._exact[a]:
                            heapq.heappush(heap, (-self._add_amount[a], a))
                        j += 1
                    slack = total - self._take_taken[k]
                    while heap and -heap[0][0] > slack:
                        self._learn(heapq.heappop(heap)[1], t, k)
                    if heap:
                        unresolved.append(k)
        return unresolved

    def _refine(self, unresolved: list[int]) -> None:
        """Count again at the waits where an exact addition is undecided, leaving out the
        additions that must come after the wait (happens-before so far), while something
        new is learnt."""
        thread_of = array("q", bytes(8 * len(self._take_pc)))
        for t in range(len(self.system.bodies)):
            for k in range(self._take_start[t], self._take_start[t + 1]):
                thread_of[k] = t
        for _round in range(MAX_ROUNDS):
            changed = False
            still: list[int] = []
            for k in unresolved:
                if self._steps_left <= 0:
                    return
                t, wpc, sid = thread_of[k], self._take_pc[k], self._take_sid[k]
                possible = [a for a in self._by_sem.get(sid)
                            if not self.precedes(t, wpc, self._add_thread[a], self._add_pc[a])]
                total = sum(self._add_amount[a] for a in possible)
                undecided = False
                for a in possible:
                    if not self._exact[a]:
                        continue
                    known = self._first_before(a, t)
                    if known is not None and known <= wpc:
                        continue
                    if self._add_amount[a] > total - self._take_taken[k]:
                        changed |= self._learn(a, t, k)
                    else:
                        undecided = True
                if undecided:
                    still.append(k)
            unresolved = still
            if not changed or not unresolved:
                return

    # -- tables --

    def _collect_takes(self) -> None:
        """Every straight-line thread's decrementing waits with a constant semaphore and
        amount, with what its waits on that semaphore take up to and including each."""
        system = self.system
        self._take_start = array("q", [0])
        self._take_pc, self._take_sid, self._take_taken = array("q"), array("q"), array("q")
        for t, body in enumerate(system.bodies):
            if self._straight[t]:
                taken: dict[int, int] = {}
                for pc, instr in enumerate(body):
                    decrementing = isinstance(instr, ir.DmaWait) or (isinstance(instr, ir.Wait) and instr.decrement)
                    known = system.static_wait(t, pc) if decrementing else None
                    if known is None or known[1] <= 0:
                        continue
                    sid, amount = known
                    taken[sid] = taken.get(sid, 0) + amount
                    self._take_pc.append(pc)
                    self._take_sid.append(sid)
                    self._take_taken.append(taken[sid])
            self._take_start.append(len(self._take_pc))

    def _collect_additions(self) -> None:
        """Every instruction that may add to a semaphore, with what it adds; a semaphore
        something adds to an unknown amount, or more than once, is unbounded. Kept in
        (thread, pc, side) order, in machine arrays (a ring of N devices has 2N^2)."""
        system = self.system
        self._add_thread, self._add_pc, self._add_side = array("i"), array("i"), array("b")
        self._add_sem, self._add_amount, self._exact = array("q"), array("q"), bytearray()
        self._unbounded = bytearray(system.resource_count)
        keys = array("q")  # (thread, pc, side), encoded, for `_additions_of`

        def add(t: int, pc: int, side: ir.DmaSide | None, sid: int, amount: int, exact: bool) -> None:
            self._add_thread.append(t)
            self._add_pc.append(pc)
            self._add_side.append(_SIDES[side])
            self._add_sem.append(sid)
            self._add_amount.append(amount)
            self._exact.append(exact)
            keys.append((t * self._stride + pc) * 4 + _SIDES[side])

        for t, body in enumerate(system.bodies):
            fps = system.footprints[t]
            for pc, instr in enumerate(body):
                if not any(bits & M_INC for _r, bits in fps.entries(pc)):
                    continue
                inc = fps[pc].inc
                if pc in self._looping[t]:
                    self._mark_unbounded(inc)
                elif isinstance(instr, ir.Signal) and isinstance(instr.inc, int):
                    for sid in sorted(inc):
                        add(t, pc, None, sid, max(instr.inc, 0), len(inc) == 1)
                elif isinstance(instr, ir.DmaStart) and isinstance(instr.nbytes, int) and instr.nbytes >= 0:
                    target = ir.SemRef(instr.recv_sem.alloc, instr.recv_sem.index, instr.device, instr.core)
                    sides = [(RECV, target)] + ([(SEND, instr.send_sem)] if instr.send_sem is not None else [])
                    for side, ref in sides:
                        sids = system.candidates(t, ref)
                        for sid in sorted(sids):
                            add(t, pc, side, sid, system.completion_amount(sid, instr.nbytes), len(sids) == 1)
                else:  # an unknown amount, or a wait that may add (a negative amount)
                    self._mark_unbounded(inc)
        self._keys = keys
        self._addition_count = len(keys)
        sems = self._add_sem
        self._by_sem = ResourceIndex(system.resource_count, lambda: zip(sems, range(len(sems))))

    def _mark_unbounded(self, sids) -> None:
        for sid in sids:
            self._unbounded[sid] = 1

    def _additions_of(self, t: int, pc: int, side: ir.DmaSide) -> range:
        """The additions of one side of the copy started at (t, pc)."""
        key = (t * self._stride + pc) * 4 + _SIDES[side]
        return range(bisect_left(self._keys, key), bisect_right(self._keys, key))
