"""The simulate engine: seeded random schedules, for a first look at kernels too big to
explore exhaustively.

Each run starts from a random initial state (inputs drawn from their ranges) and takes a
random enabled action until nothing can move, judging every state exactly as the explicit
engine does. Runs are reproducible: run i of seed s always takes the same schedule, and a
counterexample is a path like any other engine's. Finding nothing is never a proof: a
simulation without a violation ends `inconclusive`.
"""

from __future__ import annotations

import itertools
import random

from semcheck.engines.budget import JUDGING, Budget, BudgetExceeded, Monitor, ProgressFn
from semcheck.engines.common import Exploration
from semcheck.kinds import StoppedBy
from semcheck.engines.options import SimulateOptions
from semcheck.semantics.properties import end_kind, fault_findings, hazard_findings, terminal_findings
from semcheck.semantics import Action, System

NAME = "simulate"
MAX_STEPS = 1_000_000  # a schedule longer than this is a loop that never ends


def explore(
    system: System,
    options: SimulateOptions = SimulateOptions(),
    *,
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
) -> Exploration:
    """`options.runs`: how many schedules (None: until stopped, as `--engine auto` runs it).
    `options.stop_at_first`: end at the first error, in the middle of its run."""
    runs, seed, stop_at_first = options.runs, options.seed, options.stop_at_first
    monitor = Monitor(budget or Budget.from_env(), progress)
    found = Exploration(system)
    visited = 0  # states visited, counting repeats: runs keep no table of states
    transitions = 0
    completed = walked = 0
    first_in: dict[tuple, int] = {}  # finding key -> the run that found it
    try:
        for run in (itertools.count() if runs is None else range(runs)):
            walked = run + 1
            rng = random.Random(f"{seed}:{run}")
            initial = rng.choice(system.initial_states())
            state = initial
            actions: list[Action] = []
            visited += 1
            while True:
                monitor.tick(visited, transitions, 0, len(actions))
                enabled = system.enabled(state)
                if not enabled:
                    found.ends.add(end_kind(system, state))
                    with monitor.during(JUDGING):
                        for finding in terminal_findings(system, state, monitor.check):
                            _keep_shortest(found, finding, initial, actions, run, first_in)
                    break
                if len(actions) >= MAX_STEPS:
                    raise BudgetExceeded(f"a schedule ran past {MAX_STEPS:,} steps without ending", StoppedBy.BOUND)
                action = rng.choice(enabled)
                successor = system.step(state, action)
                transitions += 1
                actions.append(action)  # a finding keeps a copy of the path so far
                for finding in fault_findings(system, successor, state.faults) + hazard_findings(
                    system, successor, state.hazards
                ):
                    _keep_shortest(found, finding, initial, actions, run, first_in)
                state = successor
                visited += 1
                if stop_at_first and found.has_errors:
                    break
            completed += 1
            if stop_at_first and found.has_errors:
                break
    except BudgetExceeded as exceeded:
        found.exhausted, found.stopped_by = exceeded.reason, exceeded.by
    if first_in:
        found.notes.append(
            f"simulate: random schedules seeded {seed}; " + "; ".join(
                f"{f.kind.value} at {f.loc} first in schedule {run + 1}" if f.loc else
                f"{f.kind.value} first in schedule {run + 1}"
                for f, run in ((found.findings[key][0], run) for key, run in first_in.items()))
            + f" (of {walked} walked): a random walk "
            "found it, and its trace is that walk cut down to the steps the violation depends on"
        )
    if not found.exhausted and not found.has_errors:
        # Random runs prove nothing: without a violation the verdict must stay open.
        found.exhausted = (
            f"simulation: {completed} random schedules (seed {seed}) found nothing, "
            "which is not a proof; use --engine explicit or z3 for a verdict"
        )
        found.stopped_by = StoppedBy.ENGINE
    found.states = visited
    found.transitions = transitions
    found.seconds = monitor.elapsed()
    found.peak_memory_mb = monitor.peak_mb
    return found


def _keep_shortest(found: Exploration, finding, initial, actions, run: int, first_in: dict) -> None:
    known = found.findings.get(finding.key)
    if known is None or len(actions) < len(known[2]):
        found.findings[finding.key] = (finding, initial, list(actions))
    first_in.setdefault(finding.key, run)
