"""Engines of one check taking turns on one core.

`--engine auto` runs several engines on one check (`auto.py`), each in its own thread, but
never two at once: the machine's cores are shared (with other checks, other jobs), and the
budget that counts is CPU time, so running side by side would buy wall-clock time with CPU
the check is judged by. Each engine holds the turn for a slice of its own work, then hands
it to the next engine that still runs, round robin, and waits for its next turn.

An engine hands over at its budget checks (`Monitor.check`, which calls `Turn.tick`): the
explicit search at every state, the simulation at every step, z3 while it encodes and
before each query (a solver call itself cannot be cut, so z3's turn ends at the first check
after it). A slice is counted in the engine's own work (states, steps) where that work comes
in small pieces, so which of two such engines finds a violation first depends on the
protocol alone, not on the machine's load; z3's slice is counted in its thread's CPU
seconds, its only measure that grows while it solves.

A turn can overrun its slice by far (one solver call of minutes). Rotating slices alone
would then give that engine nearly all of the core, and a search that needed two seconds
would wait behind it. So a member may join with a `share`: when the turn of a member whose
slice is counted in CPU seconds overran it by t of them (more than the slice itself: a turn
ends at the first budget check past its slice, which is no overrun), this member's next
turn lasts at least `share` x t of its own CPU (and at least its slice). Slices of work lend nothing, so
two engines counted in work still alternate as the protocol decides. z3 bounds its own
calls while it shares the core and doubles the bound each time a call reaches it
(`z3/engine.py`), so an engine with share 1 gets about as much CPU as the solver took,
round after round, whichever of the two needs less.
"""

from __future__ import annotations

import threading
import time

from semcheck.engines.budget import BudgetExceeded, StopSignal
from semcheck.records import record
from semcheck.kinds import StoppedBy

WAIT_POLL = 0.05  # seconds between looks at the stop signal while waiting for a turn


@record(frozen=True)
class Slice:
    """How long one turn lasts: `ticks` budget checks, or `seconds` of the thread's CPU."""

    ticks: int | None = None
    seconds: float | None = None


class Turns:
    """The engines of one check, in the order they joined, and whose turn it is."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._members: list[Turn] = []
        self._holder: Turn | None = None

    def join(self, name: str, slice_: Slice, share: float = 0.0) -> "Turn":
        """A new member; the first one holds the turn at once, later ones wait for theirs
        (`Turn.begin`). `share`: of the CPU by which a member counted in CPU seconds overran
        its slice, how much this member's next turn gets at least."""
        with self._cond:
            turn = Turn(self, name, slice_, share)
            self._members.append(turn)
            if self._holder is None:
                self._holder = turn
            return turn

    def _lend(self, lender: "Turn", used: float) -> None:
        if lender.slice.seconds is None:  # a slice of work ends on time: the rotation stays the protocol's
            return
        overrun = used - lender.slice.seconds
        if overrun <= lender.slice.seconds:  # a turn ends at a budget check just past its slice: not an overrun
            return
        for member in self._members:
            if member is not lender and member.active and member.share:
                member.owed = max(member.owed, member.share * overrun)

    @property
    def holder(self) -> "Turn | None":
        return self._holder

    def _next_after(self, turn: "Turn") -> "Turn | None":
        """The next member still running after `turn`, round robin (None: none but it)."""
        members = self._members
        start = members.index(turn)
        for k in range(1, len(members) + 1):
            candidate = members[(start + k) % len(members)]
            if candidate.active and candidate is not turn:
                return candidate
        return None


class Turn:
    """One engine's place in the rotation."""

    def __init__(self, turns: Turns, name: str, slice_: Slice, share: float = 0.0):
        self.turns, self.name, self.slice, self.share = turns, name, slice_, share
        self.active = True
        self._used = 0
        self._cpu_from: float | None = None  # its thread's CPU clock when the turn began
        self.owed = 0.0  # CPU seconds its current or next turn lasts at least (lent by an overrun)
        self.handovers = 0  # how often it gave the turn away (for tests and notes)

    def shared(self) -> bool:
        """Whether another member still takes turns (an engine alone need not bound its calls)."""
        with self.turns._cond:
            return self.turns._next_after(self) is not None

    def begin(self, stop: StopSignal | None = None) -> None:
        """Wait until it is this engine's turn (its thread calls this before any work)."""
        with self.turns._cond:
            self._wait(stop)
        self._start_slice()

    def tick(self, stop: StopSignal | None = None) -> None:
        """One unit of work done: at the end of the slice, hand over and wait for the next turn."""
        self._used += 1
        if self._cpu_from is None:  # the first holder never waited: its clock starts at its first tick
            self._cpu_from = time.thread_time()
        if self.slice.ticks is not None and self._used < self.slice.ticks:
            return
        used = time.thread_time() - self._cpu_from
        if used < max(self.slice.seconds or 0.0, self.owed):
            return
        with self.turns._cond:
            following = self.turns._next_after(self)
            if following is not None and self.turns._holder is self:
                self.owed = 0.0
                self.turns._lend(self, used)
                self.turns._holder = following
                self.handovers += 1
                self.turns._cond.notify_all()
            self._wait(stop)
        self._start_slice()

    def leave(self) -> None:
        """This engine is done: it no longer takes turns, and the next one goes on."""
        with self.turns._cond:
            self.active = False
            if self.turns._holder is self:
                self.turns._holder = self.turns._next_after(self)
            self.turns._cond.notify_all()

    def _wait(self, stop: StopSignal | None) -> None:
        cond = self.turns._cond
        while self.turns._holder is not self:
            if stop is not None and stop.is_set():
                raise BudgetExceeded(stop.reason, StoppedBy.STOP)
            if self.turns._holder is None:  # everyone else left
                self.turns._holder = self
                break
            cond.wait(WAIT_POLL)

    def _start_slice(self) -> None:
        self._used = 0
        self._cpu_from = time.thread_time()
