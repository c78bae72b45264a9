"""Budgets (states, seconds, memory) and progress reporting shared by the engines.

A run that exhausts its budget ends with verdict `inconclusive` (exit 3): never an endless
run, never an out-of-memory kill. Defaults come from the environment so CI can tune them
without code changes: SEMCHECK_MAX_STATES, SEMCHECK_TIMEOUT, SEMCHECK_MAX_MEMORY_MB.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable

DEFAULT_MAX_STATES = 2_000_000
DEFAULT_TIMEOUT = 600.0


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


@dataclass(frozen=True)
class Budget:
    max_states: int = DEFAULT_MAX_STATES
    timeout: float = DEFAULT_TIMEOUT  # seconds
    max_memory_mb: float = 0.0  # 0: half of the memory available at start

    @classmethod
    def from_env(cls, **overrides) -> "Budget":
        env = os.environ
        values = {
            "max_states": int(env.get("SEMCHECK_MAX_STATES", DEFAULT_MAX_STATES)),
            "timeout": float(env.get("SEMCHECK_TIMEOUT", DEFAULT_TIMEOUT)),
            "max_memory_mb": float(env.get("SEMCHECK_MAX_MEMORY_MB", 0)),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


class BudgetExceeded(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
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


class Monitor:
    """Checks the budget and emits progress; engines call `tick` often, it is cheap."""

    CHECK_EVERY = 512
    FIRST_PROGRESS = 2.0  # seconds before the first progress line
    PROGRESS_EVERY = 1.0

    def __init__(self, budget: Budget, progress: ProgressFn | None = None):
        self.budget = budget
        self.progress = progress
        self.start = time.monotonic()
        self.memory_limit = budget.max_memory_mb or _available_memory_mb() / 2
        self.memory_at_start = rss_mb()
        self.peak_mb = self.memory_at_start
        self._ticks = 0
        self._next_progress = self.start + self.FIRST_PROGRESS

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def tick(self, states: int, transitions: int, frontier: int = 0, depth: int = 0) -> None:
        self._ticks += 1
        if self._ticks % self.CHECK_EVERY:
            return
        now = time.monotonic()
        if states > self.budget.max_states:
            raise BudgetExceeded(f"state budget of {self.budget.max_states:,} states ran out")
        if now - self.start > self.budget.timeout:
            raise BudgetExceeded(f"time budget of {self.budget.timeout:g} s ran out")
        mem = rss_mb()
        self.peak_mb = max(self.peak_mb, mem)
        if mem > self.memory_limit:
            raise BudgetExceeded(f"memory budget of {self.memory_limit:,.0f} MB ran out")
        if self.progress and now >= self._next_progress:
            self._next_progress = now + self.PROGRESS_EVERY
            self.progress(ProgressInfo(states, transitions, now - self.start, frontier, depth))
