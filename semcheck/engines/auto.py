"""`--engine auto` (the CLI's default): a portfolio of engines that decides fast.

Three engines decide the same properties in different ways, and which one is fastest is
rarely known in advance:

* the explicit search (`explicit/search.py`) explores every schedule breadth-first: it
  proves `safe`, and the first path it finds to a violation is a shortest one. Its work
  grows with the interleavings the reduction cannot collapse: a ring all-gather at 32
  devices is one path of 5,057 states (0.2 CPU s), a fused MoE kernel at 8 devices has
  thousands of copies in flight and a frontier that grows by hundreds of states a level;
* z3 (`z3/engine.py`) covers every schedule and every input value in one encoding, and
  decides those MoE kernels in about a second, but its encoding of a long one-path
  protocol costs more than searching it (the ring at 32 devices: 29.5 CPU s);
* `simulate` (`simulate.py`) walks random schedules (seeded, so every walk can be
  replayed): it never proves anything, but it reaches violations deep in a wide protocol
  that a breadth-first search reaches late or never (the jax wheel's GPU collective matmul
  on 2 SMs at 8 devices: its race within a few CPU seconds, where the search stores
  millions of states without a verdict).

So auto runs them as a portfolio:

1. inputs spanning more than `MAX_EXPLICIT_INPUT_COMBINATIONS` value combinations: z3
   alone (the search would enumerate them one by one);
2. otherwise the explicit search starts alone, watched (`Width`): every `LOOK_EVERY`
   states from `WARMUP_STATES` on, the states it would still store are estimated from its
   frontier and the steps left to the protocol's longest schedule. A search the reduction
   keeps to one path (frontier 0: the ring) never looks wide and runs alone to its end, so
   a one-path protocol never goes to z3. Once the estimate passes `WIDE_STATES`, simulate
   and z3 (unless the protocol has something z3 does not model) join;
3. the engines then take turns on one core (`turns.py`): each runs a slice of its own work
   (`SLICES`) and hands over, round robin, so the check never assumes a free core and its
   CPU time is the sum of what each engine did. A z3 solver call cannot be cut at its
   slice, so while z3 shares the core its calls are bounded (1 s, doubled each time a call
   reaches the bound and is asked again at its next turn), and the explicit search's next
   turn lasts at least as long as z3's turn overran (`SHARES`): a search that needs two
   seconds is not kept waiting behind a query of minutes (tpu-inference's all-gather
   matmul run twice at 8 devices: 281 CPU s before, 4-6 after; the explicit search alone
   1.9);
4. the check ends, by default, at the first error any engine finds (the first
   counterexample; its path cut down to what the violation depends on when no
   breadth-first search found it), or when an exhaustive engine (explicit or z3) finishes;
   with `exhaustive` only when an exhaustive engine finishes (simulate's findings are
   merged in), since only that one has seen every schedule. A `safe` needs an exhaustive
   engine either way. The engines still running are stopped at their next budget check
   (a z3 solver call is interrupted).

The Result holds the findings of every engine that ran (`merge.py`: one per identity,
`Violation.found_by` naming the engines that found it), names the engine that decided
(`Result.engine`), has each engine's own verdict and stats in `Result.runs`, and a note
says what happened whenever several ran.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import field, replace
from typing import Callable

from semcheck import ir
from semcheck.engines.budget import Budget, BudgetExceeded, ProgressFn, StopSignal
from semcheck.engines.common import stopped_early
from semcheck.engines.merge import combine_stats, merge_violations
from semcheck.engines.options import CheckOptions, EngineFn
from semcheck.engines.turns import Slice, Turn, Turns
from semcheck.ir import Protocol
from semcheck.records import record
from semcheck.result import EngineRun, Result, Verdict, verdict_of
from semcheck.semantics import System

MAX_EXPLICIT_INPUT_COMBINATIONS = 256
# The search runs alone for WARMUP_STATES states, then looks at its width every LOOK_EVERY.
WARMUP_STATES = 256
LOOK_EVERY = 256
# Simulate and z3 join a search estimated to store more than this many states. Searches the
# gate's examples finish alone are far below it (allreduce_ring at 8 devices: 929 states,
# frontier 0); the fused MoE kernels at 8 devices pass it within their first 1,000 states
# (moe_expert_pipeline: frontier 27 at depth 17 of 4,104 steps).
WIDE_STATES = 50_000
# One turn of each engine, in its own work: the explicit search's states cost 0.04-1 ms
# (more with many copies in flight), a simulated step about 10 us, so each slice is some
# 20-60 ms. z3's budget checks are too coarse to count (a solver call cannot be cut), so its
# slice is CPU time of its thread.
SLICES = {
    "explicit": Slice(ticks=64),
    "simulate": Slice(ticks=4096),
    "z3": Slice(seconds=0.05),
}
# Of the CPU a z3 turn took, what the explicit search's next turn gets at least (turns.py):
# a search that needs seconds is not kept waiting behind a solver call of minutes.
SHARES = {"explicit": 1.0}
EXHAUSTIVE_ENGINES = ("explicit", "z3")  # the engines whose end without an error is `safe`
STOP_POLL = 0.25  # seconds between reminders to an engine that was told to stop

CONCLUSIVE = (Verdict.SAFE, Verdict.VIOLATION)


def input_combinations(protocol: Protocol) -> int:
    return math.prod(max(0, inp.hi - inp.lo + 1) for inp in protocol.inputs)


def instruction_count(system: System) -> int:
    return sum(len(body) for body in system.bodies)


def schedule_length(system: System) -> int | None:
    """The most steps one complete schedule of a straight-line protocol can take: every
    instruction once, and each copy's two completions (None with a jump: loops repeat)."""
    if any(isinstance(instr, (ir.Branch, ir.Jump)) for body in system.bodies for instr in body):
        return None
    copies = sum(isinstance(instr, ir.DmaStart) for body in system.bodies for instr in body)
    return instruction_count(system) + 2 * copies


def run(
    system: System,
    budget: Budget | None,
    progress: ProgressFn | None,
    options: CheckOptions,
    *,
    explicit: EngineFn,
    z3: EngineFn,
    simulate: EngineFn,
) -> Result:
    budget = (budget or Budget.from_env()).started()
    from semcheck.engines.z3.scope import unmodelled

    modelled = unmodelled(system) is None
    combinations = input_combinations(system.protocol)
    if modelled and combinations > MAX_EXPLICIT_INPUT_COMBINATIONS:
        result = z3(system, budget, progress, options)
        inputs = system.protocol.inputs
        names = ", ".join(f"{i.name} in {i.lo}..{i.hi}" for i in inputs[:3])
        if len(inputs) > 3:
            names += f" and {len(inputs) - 3} more"
        result.notes.append(
            f"engine auto chose z3: the inputs ({names}) span {combinations:,} value "
            "combinations, which the explicit engine would enumerate one by one"
        )
        return result
    engines = {"explicit": explicit, "simulate": simulate} | ({"z3": z3} if modelled else {})
    return Portfolio(system, budget, progress, engines, options).run()


class Width:
    """Watches a breadth-first search (`Budget.watch`) and calls `on_wide` once it looks
    wide: states stored plus frontier times the steps left to the longest schedule (as
    many steps again as it went, for a protocol with loops) above `WIDE_STATES`. A search
    with nothing queued (following one path, `path.py`, which stores nothing) is never
    wide, however long: its states alone passed `WIDE_STATES` on the ring model at 128
    devices (81,665 states, one path, 8 CPU s), and z3 and simulate joined it, 49 CPU s
    and 1.4 GB in all."""

    def __init__(self, length: int | None, on_wide: Callable[[int, int], None]):
        self.length, self.on_wide = length, on_wide
        self.next_look = WARMUP_STATES
        self.wide = False

    def __call__(self, states: int, frontier: int, depth: int) -> None:
        if states < self.next_look or self.wide:
            return
        self.next_look = states + LOOK_EVERY
        if frontier == 0:
            return
        left = max(depth, 1) if self.length is None else max(self.length - depth, 0)
        projected = states + frontier * left
        if projected > WIDE_STATES:
            self.wide = True
            self.on_wide(states, projected)


@record
class _Entrant:
    """One engine's run in the portfolio: its budget (own stop signal and turn), its Result."""

    name: str
    budget: Budget
    stop: StopSignal
    turn: Turn
    result: Result | None = None
    finished: int = 0  # the order in which runs finished (1: first)
    thread: threading.Thread | None = field(default=None, repr=False)


class Portfolio:
    def __init__(self, system: System, budget: Budget, progress: ProgressFn | None,
                 engines: dict[str, EngineFn], options: CheckOptions):
        self.system, self.budget, self.progress = system, budget, progress
        self.engines, self.options = engines, options
        self.first_only = options.stop_at_first
        self.turns = Turns()
        self.entrants: dict[str, _Entrant] = {}
        self.lock = threading.Lock()
        self.finished = 0
        self.winner: _Entrant | None = None
        self.joined_at: tuple[int, int, float] | None = None  # states, projected, seconds
        self.crashed: list[BaseException] = []
        self.started = time.monotonic()

    def _entrant(self, name: str, **extra) -> _Entrant:
        stop = StopSignal()
        turn = self.turns.join(name, SLICES[name], SHARES.get(name, 0.0))
        entrant = _Entrant(name, replace(self.budget, stop=stop, turn=turn, **extra), stop, turn)
        self.entrants[name] = entrant
        return entrant

    def run(self) -> Result:
        width = Width(schedule_length(self.system), self._join)
        search = self._entrant("explicit", watch=width)
        try:
            result = self.engines["explicit"](self.system, search.budget, self.progress, self.options)
        except BaseException:  # Ctrl-C, a budget phase's exception, a bug: the others stop too
            for other in self.entrants.values():
                other.stop.stop("engine auto: the check was interrupted")
            raise
        finally:
            search.turn.leave()
        self._finish(search, result)
        self._wait_for_the_others()
        if self.crashed and self.winner is None:
            raise self.crashed[0]
        if len(self.entrants) == 1:
            return result  # the search ended alone: its Result stands
        return self._combined()

    # -- the others join a wide search --

    def _join(self, states: int, projected: int) -> None:
        """Called in the search's thread, at its budget check: start the other engines."""
        self.joined_at = (states, projected, time.monotonic() - self.started)
        with self.lock:
            joining = [self._entrant(name) for name in self.engines if name != "explicit"]
        for entrant in joining:
            entrant.thread = threading.Thread(target=self._race, args=(entrant,), name=f"semcheck-auto-{entrant.name}",
                                              daemon=True)
            entrant.thread.start()

    def _options_for(self, name: str) -> CheckOptions:
        if name == "simulate":  # random walks until stopped
            return replace(self.options, simulate=replace(self.options.simulate, runs=None))
        return self.options

    def _race(self, entrant: _Entrant) -> None:
        try:
            try:
                entrant.turn.begin(entrant.stop)
            except BudgetExceeded:  # decided before its first turn
                return
            progress = self.progress if entrant.name == "z3" else None  # z3 says which query it asks
            result = self.engines[entrant.name](self.system, entrant.budget, progress,
                                                self._options_for(entrant.name))
        except BaseException as e:  # a bug in an engine: raised in the caller's thread if nothing decided
            self.crashed.append(e)
            return
        finally:
            entrant.turn.leave()
        self._finish(entrant, result)

    # -- who decides --

    def _decides(self, entrant: _Entrant) -> bool:
        result = entrant.result
        assert result is not None
        if self.first_only and result.verdict is Verdict.VIOLATION:
            return True  # the first counterexample, whoever found it
        return (entrant.name in EXHAUSTIVE_ENGINES and result.verdict in CONCLUSIVE
                and not result.exhausted)

    def _finish(self, entrant: _Entrant, result: Result) -> None:
        with self.lock:
            self.finished += 1
            entrant.result, entrant.finished = result, self.finished
            if self.winner is None and self._decides(entrant):
                self.winner = entrant
                reason = f"engine auto: {entrant.name} decided first"
            elif all(e.result is not None for e in self.entrants.values() if e.name in EXHAUSTIVE_ENGINES):
                reason = "engine auto: every exhaustive engine had ended"  # simulate alone proves nothing
            else:
                return
        for other in self.entrants.values():
            if other is not entrant and other.result is None:
                other.stop.stop(reason)

    def _wait_for_the_others(self) -> None:
        for entrant in list(self.entrants.values()):
            thread = entrant.thread
            while thread is not None and thread.is_alive():
                thread.join(STOP_POLL)
                if entrant.stop.is_set():
                    entrant.stop.poke()  # a solver call that began just as it was stopped

    # -- one Result --

    def _combined(self) -> Result:
        ran = [e for e in self.entrants.values() if e.result is not None]
        results = [e.result for e in ran if e.result is not None]
        chosen = self.winner or self.entrants["explicit"]
        assert chosen.result is not None
        base = chosen.result
        violations = merge_violations(results)
        # decided: the winner covered every schedule (an exhaustive engine that ended safe)
        verdict = verdict_of(violations, complete=self.winner is not None and base.verdict is Verdict.SAFE)
        runs = [EngineRun(e.name, e.result.verdict, e.result.stats, decided=e is self.winner,
                          stopped=e.result.exhausted) for e in ran if e.result is not None]
        notes = [self._what_happened(ran)]
        for e in [chosen] + ran:
            r = e.result
            assert r is not None
            told = (stopped_early(r.exhausted, r.stats.states, r.stats.solver_queries)
                    if r.exhausted is not None and self._was_stopped(e) else None)
            notes += [n for n in r.notes if n not in notes and n != told]  # a run auto stopped: said above
        return replace(
            base,
            verdict=verdict,
            violations=violations,
            stats=combine_stats([r.stats for r in results], time.monotonic() - self.started),
            runs=runs,
            notes=notes,
            ends=frozenset().union(*(r.ends for r in results)),
            exhausted=None if self.winner is not None else base.exhausted,
            stopped_by=None if self.winner is not None else base.stopped_by,
            first_only=self.first_only and verdict is Verdict.VIOLATION,
        )

    def _what_happened(self, ran: list[_Entrant]) -> str:
        assert self.joined_at is not None
        states, projected, at = self.joined_at
        joined = " and ".join(e.name for e in ran if e.name != "explicit") or "no other engine"
        head = (f"engine auto: the explicit search looked wide after {states:,} states (about "
                f"{projected:,} to go), so {joined} joined it at {at:.1f} s, taking turns on one core")
        parts = []
        for e in sorted(ran, key=lambda e: e.finished):
            r = e.result
            assert r is not None
            if e is self.winner:
                what = "decided" if r.verdict is Verdict.SAFE or not self.first_only else "found the first counterexample"
                parts.append(f"{e.name} {what} ({_work(r)})")
            elif self._was_stopped(e):
                parts.append(f"{e.name} was stopped after {_work(r)}")
            else:
                parts.append(f"{e.name} ended {r.verdict.value}"
                             + (f" ({r.exhausted})" if r.exhausted else "") + f" after {_work(r)}")
        if self.winner is None:
            parts.append("no engine decided")
        return head + "; " + "; ".join(parts)


    @staticmethod
    def _was_stopped(e: _Entrant) -> bool:
        """Whether auto stopped the run (rather than its own budget)."""
        r = e.result
        return r is not None and r.exhausted is not None and e.stop.is_set() and r.exhausted == e.stop.reason


def _work(result: Result) -> str:
    if result.stats.solver_queries is not None:
        return f"{result.stats.solver_queries:,} solver queries"
    return f"{result.stats.states:,} states"
