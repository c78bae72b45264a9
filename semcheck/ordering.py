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
before W for each addition x counting finds, so everything before x is before W too
(kept per thread as vector clocks at its waits, iterated to a fixpoint; every step only
adds orders that hold in every schedule, so stopping early is sound too, just weaker).
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

from bisect import bisect_right
from typing import NamedTuple, Protocol

from semcheck import ir
from semcheck.footprints import Footprint, looping_pcs


class System(Protocol):
    """What the analysis reads of `semantics.System` (which imports this module)."""

    bodies: list[tuple[ir.Instr, ...]]
    footprints: list[list[Footprint]]

    def static_wait(self, t: int, pc: int) -> tuple[int, int] | None: ...
    def completion_amount(self, sid: int, nbytes: int) -> int: ...
    def _candidates(self, t: int, ref: ir.SemRef) -> frozenset[int]: ...
    def is_buffer_cell(self, cell: int) -> bool: ...
    def near_of(self, cells) -> frozenset[int]: ...

RECV_SIDE, SEND_SIDE = "recv", "send"
# Vector clocks are kept at every wait of every thread, one entry per thread that is known
# to come before: past this many (waits x threads) only program order and plain counting
# are used (ring_allgather at 256 devices has 130k waits).
MAX_CLOCK_CELLS = 2_000_000
MAX_ROUNDS = 64


class _Addition(NamedTuple):
    thread: int
    pc: int
    side: str | None  # a copy's completion side; None: a signal
    amount: int
    exact: bool  # it adds to this semaphore and no other


class _Take(NamedTuple):
    pc: int
    sid: int
    taken: int  # what the thread's waits on sid take up to and including this one


Clock = dict[int, int]  # thread -> the last pc of it known to come before


class CopyOrder:
    """`excludes(t, pc, ct, cpc)`: whether the access at (t, pc) can never run while the
    copy started at (ct, cpc) is in flight."""

    def __init__(self, system: System):
        self.system = system
        bodies = system.bodies
        self._looping = [looping_pcs(body) for body in bodies]
        self._straight = [not any(isinstance(i, (ir.Branch, ir.Jump)) for i in body) for body in bodies]
        self._additions: dict[int, list[_Addition]] = {}
        self._unbounded: set[int] = set()
        self._collect_additions()
        self._takes: list[list[_Take]] = [self._takes_of(t) for t in range(len(bodies))]
        self._take_pcs = [[take.pc for take in takes] for takes in self._takes]
        self._clocks: list[list[Clock]] = [[{t: take.pc} for take in takes] for t, takes in enumerate(self._takes)]
        # (thread, copy pc, side) or (thread, signal pc, None) -> waits it is known to precede
        self._before: dict[tuple[int, int, str | None], set[tuple[int, int]]] = {}
        cells = sum(len(takes) for takes in self._takes) * len(bodies)
        self._fixpoint(follow_order=cells <= MAX_CLOCK_CELLS)

    # -- the question --

    def excludes(self, t: int, pc: int, ct: int, cpc: int) -> bool:
        if self._precedes(t, pc, ct, cpc) and cpc not in self._looping[ct] and pc not in self._looping[t]:
            return True  # the copy starts after the access
        if cpc in self._looping[ct] or not self._straight[t]:
            return False
        sides = self._sides_touching(t, pc, ct, cpc)
        return bool(sides) and all(self._completed_before(ct, cpc, side, t, pc) for side in sides)

    def _precedes(self, t: int, pc: int, e: int, epc: int) -> bool:
        """Whether (t, pc) comes before (e, epc) in every schedule."""
        if t == e:
            return pc < epc
        return self._straight[e] and self._clock(e, epc).get(t, -1) >= pc

    def _clock(self, t: int, pc: int) -> Clock:
        """What is known to come before (t, pc) runs: the clock of its thread's last wait
        at or before pc (empty before the first)."""
        k = bisect_right(self._take_pcs[t], pc)
        return self._clocks[t][k - 1] if k else {}

    def _completed_before(self, ct: int, cpc: int, side: str, t: int, pc: int) -> bool:
        for e, wpc in self._before.get((ct, cpc, side), ()):
            if (e == t and wpc < pc) or (e != t and self._clock(t, pc - 1).get(e, -1) >= wpc):
                return True
        return False

    def _sides_touching(self, t: int, pc: int, ct: int, cpc: int) -> list[str]:
        """The completions of the copy whose memory the access may conflict with."""
        system = self.system
        copy = system.bodies[ct][cpc]
        assert isinstance(copy, ir.DmaStart)
        access, started = system.footprints[t][pc], system.footprints[ct][cpc]
        if copy.send_sem is None:  # local: one completion, reading and writing
            return [RECV_SIDE]
        src = frozenset(c for c in started.mread if system.is_buffer_cell(c))
        sides = []
        if access.mnear & started.mwrite:  # the destination, which the receive side writes
            sides.append(RECV_SIDE)
        if access.mwrite & system.near_of(src):  # the source, which the send side reads
            sides.append(SEND_SIDE)
        return sides

    # -- the orders --

    def _fixpoint(self, follow_order: bool) -> None:
        """Counting at every wait, with what must come after it (happens-before so far)
        left out of its additions, until nothing new is learnt."""
        for _round in range(MAX_ROUNDS if follow_order else 1):
            changed = False
            for t, takes in enumerate(self._takes):
                clock: Clock = {}
                for k, take in enumerate(takes):
                    _join(clock, self._clocks[t][k])  # what earlier rounds learnt, and its own pc
                    for addition in self._guaranteed(t, take, follow_order):
                        key = (addition.thread, addition.pc, addition.side)
                        waits = self._before.setdefault(key, set())
                        if (t, take.pc) not in waits:
                            waits.add((t, take.pc))
                            changed = True
                        # only a straight-line thread's prefix comes before one of its
                        # instructions (a forward branch may skip part of another's)
                        if follow_order and addition.thread != t and self._straight[addition.thread]:
                            _join(clock, self._clock(addition.thread, addition.pc))
                            _join(clock, {addition.thread: addition.pc})
                    if clock != self._clocks[t][k]:
                        self._clocks[t][k] = dict(clock)
                        changed = True
            if not changed:
                return

    def _guaranteed(self, t: int, take: _Take, follow_order: bool) -> list[_Addition]:
        """The additions to the wait's semaphore that must have happened before it passes."""
        if take.sid in self._unbounded:
            return []
        possible = [
            a for a in self._additions.get(take.sid, ())
            if not (self._precedes(t, take.pc, a.thread, a.pc) if follow_order else (a.thread == t and a.pc > take.pc))
        ]
        total = sum(a.amount for a in possible)
        return [a for a in possible if a.exact and total - a.amount < take.taken]

    # -- tables --

    def _takes_of(self, t: int) -> list[_Take]:
        """A straight-line thread's decrementing waits with a constant semaphore and amount."""
        if not self._straight[t]:
            return []
        system = self.system
        found: list[_Take] = []
        taken: dict[int, int] = {}
        for pc, instr in enumerate(system.bodies[t]):
            decrementing = isinstance(instr, ir.DmaWait) or (isinstance(instr, ir.Wait) and instr.decrement)
            known = system.static_wait(t, pc) if decrementing else None
            if known is None or known[1] <= 0:
                continue
            sid, amount = known
            taken[sid] = taken.get(sid, 0) + amount
            found.append(_Take(pc, sid, taken[sid]))
        return found

    def _collect_additions(self) -> None:
        """Every instruction that may add to a semaphore, with what it adds; a semaphore
        something adds to an unknown amount, or more than once, is unbounded."""
        system = self.system
        for t, body in enumerate(system.bodies):
            for pc, instr in enumerate(body):
                inc = system.footprints[t][pc].inc
                if not inc:
                    continue
                if pc in self._looping[t]:
                    self._unbounded |= inc
                elif isinstance(instr, ir.Signal) and isinstance(instr.inc, int):
                    for sid in inc:
                        self._additions.setdefault(sid, []).append(
                            _Addition(t, pc, None, max(instr.inc, 0), len(inc) == 1))
                elif isinstance(instr, ir.DmaStart) and isinstance(instr.nbytes, int) and instr.nbytes >= 0:
                    target = ir.SemRef(instr.recv_sem.alloc, instr.recv_sem.index, instr.device, instr.core)
                    sides = [(RECV_SIDE, target)] + ([(SEND_SIDE, instr.send_sem)] if instr.send_sem is not None else [])
                    for side, ref in sides:
                        sids = system._candidates(t, ref)
                        for sid in sids:
                            amount = system.completion_amount(sid, instr.nbytes)
                            self._additions.setdefault(sid, []).append(_Addition(t, pc, side, amount, len(sids) == 1))
                else:  # an unknown amount, or a wait that may add (a negative amount)
                    self._unbounded |= inc


def _join(into: Clock, other: Clock) -> None:
    for t, pc in other.items():
        if into.get(t, -1) < pc:
            into[t] = pc
