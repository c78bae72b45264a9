"""Budgets (states, seconds, memory) and progress reporting shared by the engines.

A run that exhausts its budget ends with verdict `inconclusive` (exit 3): never an endless
run, never an out-of-memory kill. Defaults come from the environment so CI can tune them
without code changes: SEMCHECK_MAX_STATES, SEMCHECK_TIMEOUT, SEMCHECK_MAX_MEMORY_MB.

The budget covers every phase of a check, each in the way that phase allows:

* the engines' own loops call `Monitor.tick` (the explicit search, per state) or
  `Monitor.check` (the z3 encoding, per unrolled node; the solver gets the time left as
  its own timeout): the time and a `StopSignal` are looked at on every call, so a timeout
  of 0 ends the run at its first check; memory is read at most every `CHECK_INTERVAL` s;
* the judgement of a state where nothing can move (`properties.terminal_findings`: its
  deadlocks, unsatisfied waits and leftovers) calls `Monitor.check` per thread, blocked
  wait and semaphore it looks at, under `Monitor.during(JUDGING)`, in every engine;
* phases with no checks of their own (building the transition system, loading a model
  file) run under `bounded_phase`: in the main thread a periodic timer signal checks time
  and memory and raises `BudgetExceeded` naming the phase; elsewhere only a `MemoryError`
  is caught;
* the capture subprocess is given the time left, and stopped when it overruns it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import field
from typing import Any, Callable, Iterator, Protocol

from semcheck.records import record
from semcheck.kinds import StoppedBy

DEFAULT_MAX_STATES = 2_000_000
DEFAULT_TIMEOUT = 600.0
# The phase a budget that runs out while a state where nothing can move is judged names.
JUDGING = "judging a state where nothing can move (deadlocks, unsatisfied waits, leftovers)"


def _available_memory_mb() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 8192.0


def rss_mb() -> float:
    """Resident memory of this process now (Linux); 0 where unknown."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


class StopSignal:
    """Ends a run from outside, at its next budget check: `--engine auto` stops the engine
    still running once the other one has decided. `on_stop` callbacks let a run that is
    inside a long call it cannot check from (a z3 solver call) be interrupted too."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.reason = ""

    def stop(self, reason: str) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()

    def is_set(self) -> bool:
        return self._event.is_set()

    def poke(self) -> None:
        """Run the callbacks again: a long call that began just after `stop` ran them (and
        so was not interrupted) is interrupted now."""
        if self._event.is_set():
            with self._lock:
                callbacks = list(self._callbacks)
            for callback in callbacks:
                callback()

    @contextlib.contextmanager
    def on_stop(self, callback: Callable[[], None]) -> Iterator[None]:
        """Call `callback` if the signal is set while the block runs (at once if it is set
        already)."""
        with self._lock:
            self._callbacks.append(callback)
            already = self._event.is_set()
        try:
            if already:
                callback()
            yield
        finally:
            with self._lock:
                self._callbacks.remove(callback)


class TakesTurns(Protocol):
    """An engine's place among engines taking turns on one core (`engines/turns.py`)."""

    def tick(self, stop: "StopSignal | None") -> None: ...

    def shared(self) -> bool: ...


# Told (states stored, frontier, depth) at every state of a search: `--engine auto` reads
# how wide the search grows from it (a decision that depends on the work done, not on the load).
SearchWatch = Callable[[int, int, int], None]


@record(frozen=True)
class Budget:
    max_states: int = DEFAULT_MAX_STATES
    timeout: float = DEFAULT_TIMEOUT  # seconds
    max_memory_mb: float = 0.0  # 0: what the process holds plus half of what is free, at start
    stop: StopSignal | None = field(default=None, compare=False)  # set from outside to end the run
    # When the check must end (time.monotonic()): set once, when the check starts (by
    # `started`), so that every later phase shares what is left of `timeout`.
    deadline: float | None = field(default=None, compare=False)
    watch: SearchWatch | None = field(default=None, compare=False)  # told how far a search got
    # The engine's place among the engines of one check that take turns on one core
    # (engines/turns.py): every budget check counts towards its slice.
    turn: TakesTurns | None = field(default=None, compare=False)

    def started(self, at: float | None = None) -> "Budget":
        """This budget with its clock running from `at` (default: now), unless it already runs."""
        if self.deadline is not None:
            return self
        from dataclasses import replace

        return replace(self, deadline=(time.monotonic() if at is None else at) + self.timeout)

    def remaining(self) -> float:
        return self.timeout if self.deadline is None else self.deadline - time.monotonic()

    @classmethod
    def from_env(cls, **overrides) -> "Budget":
        env = os.environ
        values: dict[str, Any] = {
            "max_states": int(env.get("SEMCHECK_MAX_STATES", DEFAULT_MAX_STATES)),
            "timeout": float(env.get("SEMCHECK_TIMEOUT", DEFAULT_TIMEOUT)),
            "max_memory_mb": float(env.get("SEMCHECK_MAX_MEMORY_MB", 0)),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


class BudgetExceeded(BaseException):
    """A budget ran out. Not an Exception, so that a user's own `except Exception` (in a
    model file running under `bounded_phase`) cannot swallow it, as with KeyboardInterrupt."""

    def __init__(self, reason: str, by: StoppedBy, notes: tuple[str, ...] = ()):
        super().__init__(reason)
        self.reason = reason
        self.by = by
        self.notes = notes  # what the reason does not say (where a stopped script was)


@record
class ProgressInfo:
    states: int
    transitions: int
    seconds: float
    frontier: int
    depth: int
    what: str = ""  # set by engines that do not count states (z3): what it is doing now
    part: str = ""  # "part 2 of 8" while independent parts are checked one by one

    @property
    def rate(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else 0.0


ProgressFn = Callable[[ProgressInfo], None]


def memory_limit_mb(budget: Budget) -> float:
    """The resident size this process may reach during a check: `max_memory_mb`, or by
    default what it already holds plus half of what the machine has free as the check
    starts. (Not half of what is free alone: memory an earlier check of the same run
    still holds, which Python and z3 keep rather than give back, would then count
    against this one, and a later check could start already over its budget.)"""
    return budget.max_memory_mb or rss_mb() + _available_memory_mb() / 2


class Monitor:
    """Checks the budget and emits progress; engines call `tick` (or `check`) often, and
    both are cheap: a clock read and two comparisons, memory only every CHECK_INTERVAL s."""

    CHECK_INTERVAL = 0.05  # seconds between reads of the process's memory
    FIRST_PROGRESS = 2.0  # seconds before the first progress line
    PROGRESS_EVERY = 1.0

    def __init__(self, budget: Budget, progress: ProgressFn | None = None, phase: str = ""):
        self.budget = budget
        self.progress = progress
        self.phase = phase  # what the run is doing, for the reason a budget ran out
        self.start = time.monotonic()
        self.deadline = self.start + budget.timeout
        if budget.deadline is not None:
            self.deadline = min(self.deadline, budget.deadline)
        self.memory_limit = memory_limit_mb(budget)
        self.memory_at_start = rss_mb()
        self.peak_mb = self.memory_at_start
        self._next_memory_check = self.start
        self._next_progress = self.start + self.FIRST_PROGRESS

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def _while(self) -> str:
        return f" while {self.phase}" if self.phase else ""

    def check(self) -> float:
        """Raise BudgetExceeded if time or memory ran out or the run was stopped; returns now."""
        stop = self.budget.stop
        if self.budget.turn is not None:
            self.budget.turn.tick(stop)  # at the end of its slice: wait for the next turn
        now = time.monotonic()
        if stop is not None and stop.is_set():
            raise BudgetExceeded(stop.reason, StoppedBy.STOP)
        if now >= self.deadline:
            raise BudgetExceeded(f"time budget of {self.budget.timeout:g} s ran out{self._while()}", StoppedBy.TIME)
        if now >= self._next_memory_check:
            self._next_memory_check = now + self.CHECK_INTERVAL
            mem = rss_mb()
            self.peak_mb = max(self.peak_mb, mem)
            if mem > self.memory_limit:
                raise BudgetExceeded(f"memory budget of {self.memory_limit:,.0f} MB ran out{self._while()}",
                                     StoppedBy.MEMORY)
        return now

    @contextlib.contextmanager
    def during(self, phase: str) -> Iterator[None]:
        """Name `phase` in the reason a budget check inside the block gives (a part of the
        run with checks of its own, as the judgement of a state where nothing can move)."""
        before, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = before

    def tick(self, states: int, transitions: int, frontier: int = 0, depth: int = 0) -> None:
        watch = self.budget.watch
        if watch is not None:
            watch(states, frontier, depth)
        if states > self.budget.max_states:
            raise BudgetExceeded(f"state budget of {self.budget.max_states:,} states ran out", StoppedBy.STATES)
        now = self.check()
        if self.progress and now >= self._next_progress:
            self._next_progress = now + self.PROGRESS_EVERY
            self.progress(ProgressInfo(states, transitions, now - self.start, frontier, depth))

    def say(self, what: str) -> None:
        """A progress line for an engine or phase that counts no states."""
        now = time.monotonic()
        if self.progress and now >= self._next_progress:
            self._next_progress = now + self.PROGRESS_EVERY
            self.progress(ProgressInfo(0, 0, now - self.start, 0, 0, what=what))


@contextlib.contextmanager
def bounded_phase(
    what: str, budget: Budget, started: float | None = None, progress: ProgressFn | None = None
) -> Iterator[None]:
    """Run a phase that makes no budget checks of its own (building the transition
    system, loading a model file) within `budget`'s time and memory, counted from
    `started` (default: now). In the main thread a timer signal every CHECK_INTERVAL s
    raises BudgetExceeded inside the phase once either runs out; in other threads (signals
    reach only the main thread) the phase runs to its end. Either way a MemoryError becomes
    BudgetExceeded, naming the phase. With `progress`, the timer also says what is going on
    once the phase has taken FIRST_PROGRESS seconds, and every PROGRESS_EVERY after."""
    started = time.monotonic() if started is None else started
    deadline = budget.started(started).deadline
    assert deadline is not None, "started() sets the deadline"
    limit = memory_limit_mb(budget)
    if time.monotonic() >= deadline:
        raise BudgetExceeded(f"time budget of {budget.timeout:g} s ran out before {what}", StoppedBy.TIME)
    armed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    previous = None
    if armed:
        next_progress = [time.monotonic() + Monitor.FIRST_PROGRESS]

        def on_timer(signum, frame):
            now = time.monotonic()
            if progress is not None and now >= next_progress[0]:
                next_progress[0] = now + Monitor.PROGRESS_EVERY
                progress(ProgressInfo(0, 0, now - started, 0, 0, what=what))
            if now >= deadline:
                raise BudgetExceeded(f"time budget of {budget.timeout:g} s ran out while {what}", StoppedBy.TIME)
            if rss_mb() > limit:
                raise BudgetExceeded(f"memory budget of {limit:,.0f} MB ran out while {what}", StoppedBy.MEMORY)
            if budget.stop is not None and budget.stop.is_set():
                raise BudgetExceeded(budget.stop.reason, StoppedBy.STOP)

        previous = signal.signal(signal.SIGALRM, on_timer)
        signal.setitimer(signal.ITIMER_REAL, Monitor.CHECK_INTERVAL, Monitor.CHECK_INTERVAL)
    try:
        yield
    except MemoryError:
        raise BudgetExceeded(f"memory ran out while {what}", StoppedBy.MEMORY) from None
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
            signal.signal(signal.SIGALRM, previous)
