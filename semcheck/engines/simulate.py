"""The simulate engine: seeded random schedules, for a first look at kernels too big to
explore exhaustively.

Each run starts from a random initial state (inputs drawn from their ranges) and takes a
random enabled action until nothing can move, judging every state exactly as the explicit
engine does. Runs are reproducible: run i of seed s always takes the same schedule, and a
counterexample is a path like any other engine's. Finding nothing is never a proof: a
simulation without a violation ends `inconclusive`.
"""

from __future__ import annotations

import random

from semcheck.engines.budget import Budget, BudgetExceeded, Monitor, ProgressFn
from semcheck.engines.common import Exploration
from semcheck.properties import end_kind, fault_findings, hazard_findings, terminal_findings
from semcheck.semantics import Action, System

NAME = "simulate"
DEFAULT_RUNS = 200
MAX_STEPS = 1_000_000  # a schedule longer than this is a loop that never ends


def explore(
    system: System,
    *,
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
    runs: int = DEFAULT_RUNS,
    seed: int = 0,
    **_options,
) -> Exploration:
    monitor = Monitor(budget or Budget.from_env(), progress)
    found = Exploration(system)
    visited = 0  # states visited, counting repeats: runs keep no table of states
    transitions = 0
    completed = 0
    try:
        for run in range(runs):
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
                    for finding in terminal_findings(system, state):
                        _keep_shortest(found, finding, initial, actions)
                    break
                if len(actions) >= MAX_STEPS:
                    raise BudgetExceeded(f"a schedule ran past {MAX_STEPS:,} steps without ending")
                action = rng.choice(enabled)
                successor = system.step(state, action)
                transitions += 1
                actions = actions + [action]
                for finding in fault_findings(system, successor, state.faults) + hazard_findings(
                    system, successor, state.hazards
                ):
                    _keep_shortest(found, finding, initial, actions)
                state = successor
                visited += 1
            completed += 1
    except BudgetExceeded as exceeded:
        found.exhausted = exceeded.reason
    if not found.exhausted and not found.has_errors:
        # Random runs prove nothing: without a violation the verdict must stay open.
        found.exhausted = (
            f"simulation: {completed} random schedules (seed {seed}) found nothing, "
            "which is not a proof; use --engine explicit or z3 for a verdict"
        )
    found.states = visited
    found.transitions = transitions
    found.seconds = monitor.elapsed()
    found.peak_memory_mb = monitor.peak_mb
    return found


def _keep_shortest(found: Exploration, finding, initial, actions) -> None:
    known = found.findings.get(finding.key)
    if known is None or len(actions) < len(known[2]):
        found.findings[finding.key] = (finding, initial, list(actions))
