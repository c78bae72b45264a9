"""`--engine auto` (the CLI's default): pick an engine per protocol, or run both.

The explicit engine enumerates every combination of input values as its own start state,
and its work grows with the interleavings the reduction cannot collapse; the z3 engine covers
every input value in one query but pays for the encoding, and stops at its unrolling bound on
loops whose length depends on timing (a polling loop). Which one wins is rarely known in
advance (a ring all-reduce at 8 devices: explicit has no verdict after millions of states;
a ring all-gather at 64: explicit in seconds), so:

* inputs spanning more than `MAX_EXPLICIT_INPUT_COMBINATIONS` value combinations: z3 alone;
* a protocol with something the z3 engine does not model (`smt.unmodelled`): explicit alone;
* a protocol of `PROBE_INSTRUCTIONS` instructions (a fused MoE kernel at 8 devices has
  2,424): z3's counting relaxation first, with guided schedules but no ordered query
  (`counting_only`). Its cost grows with the encoding, not with the interleavings, and
  whether it decides depends on the protocol alone; when it answers every question the
  check is decided (the same findings z3 alone reports), otherwise the steps below follow
  with what is left of the budget. Kernels with many copies in flight at once are slow
  per state in the explicit search (20 ms at 8 devices for the fused MoE kernels) and
  are exactly those whose waits counting orders;
* otherwise the explicit engine starts alone, with the whole budget. Most checks end within
  its head start (`HEAD_START_STATES` states, or `HEAD_START` CPU seconds for a search whose
  states are slow), and then nothing else runs; counting states makes whether z3 runs at all
  depend on the protocol, not on the machine's load. If the search goes on, z3 starts beside it, in a thread sharing the (immutable) System, with what is
  left of the same deadline, and the first conclusive answer (safe or violation) is the
  check's: the other engine is stopped at its next budget check (a z3 solver call is
  interrupted). If neither concludes, the explicit engine's inconclusive Result stands,
  with z3's reason in a note.

Threads, not processes: the z3 solver releases the GIL while it solves, so the two engines
really run side by side on two cores for the part of z3's work that usually costs most,
nothing is pickled, and stopping either is a flag. The price: while z3 encodes (Python) the
two share the GIL, so the search slows down for that while; the head start is long enough
(50,000 states, or 25 CPU seconds for a search whose states are slow) that checks the search finishes in a few seconds never pay it (the wheel's
TPU all_gather at 8 devices stores 28,511). On a straight-line protocol longer than that, the
head start is as long as one schedule (`head_start_scale`): a search kept to one path
stores one state per step.

The Result names the engine that decided (`Result.engine`), its stats count the work of
every engine that ran (states from the explicit one, queries from z3), `Result.runs` has
each engine's own verdict and stats, and a note says what happened whenever both ran.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace
from typing import Callable

from semcheck.engines.budget import Budget, Milestone, ProgressFn, StopSignal
from semcheck import ir
from semcheck.ir import Protocol
from semcheck.result import EngineRun, Result, Stats, Verdict
from semcheck.semantics import System

MAX_EXPLICIT_INPUT_COMBINATIONS = 256
# Protocols with this many instructions (every thread's body) get z3's counting probe first;
# beyond the upper end the encoding alone may cost more than most searches.
PROBE_INSTRUCTIONS = range(1_000, 8_001)
# z3 joins an explicit search that has stored HEAD_START_STATES states, or run for
# HEAD_START CPU seconds (a search whose every state is slow): the first of the two.
HEAD_START_STATES = 50_000
# 25: a search whose states cost milliseconds (many copies in flight: the fused MoE
# kernels at 8 devices) seldom ends, and each second it runs alone is a second z3's answer
# comes later (moe_expert_pipeline_shared_send at 8: 72 CPU s with 60); but every search
# that ends alone should end well within it, or which engine decides (and so the report)
# would depend on which thread is faster: the longest explicit-decided check of the gate,
# moe_entry_left_only at 4 devices, takes about 13 CPU s.
HEAD_START = 25.0
STOP_POLL = 0.25  # seconds between reminders to an engine that was told to stop

EngineFn = Callable[..., Result]
CONCLUSIVE = (Verdict.SAFE, Verdict.VIOLATION)


def input_combinations(protocol: Protocol) -> int:
    return math.prod(max(0, inp.hi - inp.lo + 1) for inp in protocol.inputs)


def run(
    system: System,
    budget: Budget | None,
    progress: ProgressFn | None,
    *,
    explicit: EngineFn,
    z3: EngineFn,
    **options,
) -> Result:
    budget = (budget or Budget.from_env()).started()
    from semcheck.engines.z3.scope import unmodelled

    if unmodelled(system) is not None:  # only the explicit engine can decide it: give it the whole budget
        return explicit(system, budget, progress, **options)
    combinations = input_combinations(system.protocol)
    if combinations > MAX_EXPLICIT_INPUT_COMBINATIONS:
        result = z3(system, budget, progress, **options)
        inputs = system.protocol.inputs
        names = ", ".join(f"{i.name} in {i.lo}..{i.hi}" for i in inputs[:3])
        if len(inputs) > 3:
            names += f" and {len(inputs) - 3} more"
        result.notes.append(
            f"engine auto chose z3: the inputs ({names}) span {combinations:,} value "
            "combinations, which the explicit engine would enumerate one by one"
        )
        return result
    probed, found = _counting_probe(system, budget, progress, z3, options)
    if probed is not None:
        return probed
    if found is not None:
        # The probe's violation is already a verdict; the search may still report every
        # finding if it ends within its head start, after which the probe's Result stands
        # in for z3's (running z3 again would encode the same protocol a second time).
        return _side_by_side(system, budget, progress, explicit, lambda *_, **__: found, options, probed=True)
    return _side_by_side(system, budget, progress, explicit, z3, options)


def instruction_count(system: System) -> int:
    return sum(len(body) for body in system.bodies)


def _counting_probe(system: System, budget: Budget, progress: ProgressFn | None, z3: EngineFn,
                    options: dict) -> tuple[Result | None, Result | None]:
    """z3 with counting and guided schedules only, on a large protocol: (its Result, None)
    when it answered every question; (None, its Result) when it stopped at a question but
    had already found a violation (a replayed execution of the semantics, so a verdict,
    though perhaps not every finding); else (None, None), and the budget goes on for the
    other steps."""
    size = instruction_count(system)
    if size not in PROBE_INSTRUCTIONS:
        return None, None
    result = z3(system, budget, progress, **{**options, "counting_only": True})
    if result.verdict is Verdict.VIOLATION and result.exhausted:
        result.notes.append(
            f"engine auto: on a protocol of {size:,} instructions z3's counting relaxation (with "
            f"schedules it guided) found a violation before it stopped ({result.exhausted}); "
            "the explicit search ran for its head start and did not end, so this Result is the "
            "probe's and other findings may be missing"
        )
        return None, result
    if result.verdict not in CONCLUSIVE or result.exhausted:
        return None, None
    result.notes.append(
        f"engine auto chose z3: on a protocol of {size:,} instructions its counting relaxation "
        "(with schedules it guided) answered every question, before any explicit search"
    )
    return result, None


def schedule_length(system: System) -> int | None:
    """The most steps one complete schedule of a straight-line protocol can take: every
    instruction once, and each copy's two completions (None with a jump: loops repeat)."""
    if any(isinstance(instr, (ir.Branch, ir.Jump)) for body in system.bodies for instr in body):
        return None
    copies = sum(isinstance(instr, ir.DmaStart) for body in system.bodies for instr in body)
    return instruction_count(system) + 2 * copies


def head_start_scale(system: System) -> float:
    """How much longer than `HEAD_START_STATES` / `HEAD_START` the search runs alone: at
    least as long as one schedule of the protocol. A search the reduction keeps to one
    path (the ring all-gather: 5 N^2 states at N devices, one per step) stores about one
    state per step, and z3's encoding of such a protocol is as big as the protocol: joined
    earlier, it encodes (in Python, sharing the GIL with the search) a protocol the
    search is about to finish (ring_allgather at 128 devices stored 81,665 states, and
    z3 joined at 50,000 only to be stopped)."""
    length = schedule_length(system)
    # a path of that many steps stores one state more (the initial one); z3 joins only a
    # search that has stored more than that (`Milestone` is reached at its count)
    return 1.0 if length is None else max(1.0, (length + 2) / HEAD_START_STATES)


class _Entrant:
    """One engine's run in the race: its stop signal, its Result and when it came."""

    def __init__(self, name: str, budget: Budget):
        self.name = name
        self.stop = StopSignal()
        self.budget = replace(budget, stop=self.stop)
        self.result: Result | None = None
        self.finished_at = math.inf

    def finish(self, result: Result) -> None:
        self.result, self.finished_at = result, time.monotonic()

    @property
    def conclusive(self) -> bool:
        return self.result is not None and self.result.verdict in CONCLUSIVE


def _side_by_side(
    system: System, budget: Budget, progress: ProgressFn | None,
    explicit: EngineFn, z3: EngineFn, options: dict, probed: bool = False,
) -> Result:
    """`probed`: `z3` hands back the counting probe's Result (a violation), which stands
    once the search is past its head start."""
    started = time.monotonic()
    scale = head_start_scale(system)
    milestone = Milestone(math.ceil(HEAD_START_STATES * scale))
    by_search = _Entrant("explicit", replace(budget, milestone=milestone))
    by_solver = _Entrant("z3", budget)
    search_done = threading.Event()
    solver_started: list[float] = []
    crashed: list[BaseException] = []

    def solve() -> None:
        # CPU seconds of this process (only the search runs meanwhile), so that a loaded
        # machine does not start z3 sooner than an idle one would.
        head_start_ends = time.process_time() + HEAD_START * scale
        while not milestone.reached.wait(min(STOP_POLL, max(0.0, head_start_ends - time.process_time()))):
            if search_done.is_set():
                return  # the search ended within its head start: its Result stands
            if time.process_time() >= head_start_ends:
                break
        if search_done.is_set():
            return
        solver_started.append(time.monotonic() - started)
        # The same System: it is immutable (the search's reported racing pairs live in its
        # own `Independence`), so both engines read it at once.
        try:
            result = z3(system, by_solver.budget, progress, **options)
        except BaseException as e:  # a bug in z3's engine: raised in the caller's thread below
            crashed.append(e)
            return
        by_solver.finish(result)
        if by_solver.conclusive:
            by_search.stop.stop("engine auto: z3 decided first")

    solver = threading.Thread(target=solve, name="semcheck-auto-z3", daemon=True)
    solver.start()
    try:
        by_search.finish(explicit(system, by_search.budget, progress, **options))
    finally:
        search_done.set()
        if by_search.conclusive or by_search.result is None:
            by_solver.stop.stop("engine auto: the explicit engine decided first")
        while solver.is_alive():
            solver.join(STOP_POLL)
            if by_solver.stop.is_set():
                by_solver.stop.poke()  # a solver call that began just as it was stopped
    if crashed and not by_search.conclusive:
        raise crashed[0]
    if not solver_started or by_solver.result is None:
        assert by_search.result is not None, "the explicit search either finished or raised"
        return by_search.result
    return _combined(by_search, by_solver, solver_started[0], time.monotonic() - started, probed)


def _combined(by_search: _Entrant, by_solver: _Entrant, solver_from: float, seconds: float,
              probed: bool = False) -> Result:
    search, solver = by_search.result, by_solver.result
    assert search is not None and solver is not None
    if by_solver.conclusive and (not by_search.conclusive or by_solver.finished_at < by_search.finished_at):
            winner = by_solver
    else:
        winner = by_search
    chosen = search if winner is by_search else solver
    runs = [
        EngineRun(e.name, r.verdict, r.stats, decided=e is winner and e.conclusive, stopped=r.exhausted)
        for e, r in ((by_search, search), (by_solver, solver))
    ]
    note = _what_happened(by_search, by_solver, winner, solver_from, probed)
    return replace(
        chosen,
        stats=combine_stats([search.stats, solver.stats], seconds),
        runs=runs,
        notes=[note] + [n for n in chosen.notes],
    )


def _what_happened(by_search: _Entrant, by_solver: _Entrant, winner: _Entrant, solver_from: float,
                   probed: bool = False) -> str:
    search, solver = by_search.result, by_solver.result
    assert search is not None and solver is not None
    side = (f"z3's counting probe, run before the search, had found a violation, which stood from {solver_from:.1f} s on"
            if probed else f"z3 ran beside the explicit engine from {solver_from:.1f} s on")
    if winner is by_solver:
        how = ("was stopped" if by_search.stop.is_set() and search.exhausted == by_search.stop.reason
               else f"ended without a verdict ({search.exhausted})")
        return f"engine auto: z3 decided; {side}, and the explicit engine {how} after {search.stats.states:,} states"
    if by_search.conclusive:
        return f"engine auto: the explicit engine decided; {side} and was stopped after {solver.stats.solver_queries or 0:,} solver queries"
    return f"engine auto: no verdict from either engine; {side} and ended without one: {solver.exhausted or solver.verdict.value}"


def combine_stats(stats: list[Stats], seconds: float) -> Stats:
    """The work of several engine runs of one check: states and queries add up, memory is
    the peak of any, seconds are the check's own (the runs overlap)."""
    def known(values):
        values = [v for v in values if v is not None]
        return sum(values) if values else None

    peaks = [s.peak_memory_mb for s in stats if s.peak_memory_mb is not None]
    return Stats(
        states=sum(s.states for s in stats),
        transitions=sum(s.transitions for s in stats),
        seconds=round(seconds, 4),
        peak_memory_mb=max(peaks) if peaks else None,
        encoded_events=known(s.encoded_events for s in stats),
        solver_queries=known(s.solver_queries for s in stats),
    )


def merge_runs(results: list[Result]) -> list[EngineRun]:
    """The engine runs of a check made of independent parts: one per engine, adding up the
    parts' work (empty when no part ran two engines)."""
    from semcheck.result import worst

    if not any(r.runs for r in results):
        return []
    by_engine: dict[str, list[EngineRun]] = {}
    for r in results:
        for run in r.runs or [EngineRun(r.engine, r.verdict, r.stats, decided=True, stopped=r.exhausted)]:
            by_engine.setdefault(run.engine, []).append(run)
    return [
        EngineRun(
            engine, worst(run.verdict for run in runs),
            combine_stats([run.stats for run in runs], sum(run.stats.seconds for run in runs)),
            decided=any(run.decided for run in runs),
            stopped=next((run.stopped for run in runs if run.stopped), None),
        )
        for engine, runs in by_engine.items()
    ]
