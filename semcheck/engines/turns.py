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
"""

from __future__ import annotations

import threading
import time

from semcheck.engines.budget import BudgetExceeded, StopSignal
from semcheck.records import record

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

    def join(self, name: str, slice_: Slice) -> "Turn":
        """A new member; the first one holds the turn at once, later ones wait for theirs
        (`Turn.begin`)."""
        with self._cond:
            turn = Turn(self, name, slice_)
            self._members.append(turn)
            if self._holder is None:
                self._holder = turn
            return turn

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

    def __init__(self, turns: Turns, name: str, slice_: Slice):
        self.turns, self.name, self.slice = turns, name, slice_
        self.active = True
        self._used = 0
        self._cpu_from = 0.0
        self.handovers = 0  # how often it gave the turn away (for tests and notes)

    def begin(self, stop: StopSignal | None = None) -> None:
        """Wait until it is this engine's turn (its thread calls this before any work)."""
        with self.turns._cond:
            self._wait(stop)
        self._start_slice()

    def tick(self, stop: StopSignal | None = None) -> None:
        """One unit of work done: at the end of the slice, hand over and wait for the next turn."""
        self._used += 1
        if self.slice.ticks is not None and self._used < self.slice.ticks:
            return
        if self.slice.seconds is not None and time.thread_time() - self._cpu_from < self.slice.seconds:
            return
        with self.turns._cond:
            following = self.turns._next_after(self)
            if following is not None and self.turns._holder is self:
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
                raise BudgetExceeded(stop.reason)
            if self.turns._holder is None:  # everyone else left
                self.turns._holder = self
                break
            cond.wait(WAIT_POLL)

    def _start_slice(self) -> None:
        self._used = 0
        if self.slice.seconds is not None:
            self._cpu_from = time.thread_time()
