"""Engines: interchangeable ways to decide the same properties, behind one Result type.

`check(protocol, options)` is the single entry point. Engines: `explicit` (exhaustive
search, `explicit/search.py`), `z3` (SMT, `z3/engine.py`), `auto` (picks one per protocol, `auto.py`) and
`simulate` (random schedules, `simulate.py`: finds bugs, never proves safe).
Options are typed (`options.py`): a `CheckOptions` holds one options value per engine, and
each engine reads its own, so one command line can carry options for whichever engine
`auto` picks.
"""

from __future__ import annotations

import time

from semcheck.engines import components
from semcheck.engines.budget import Budget, BudgetExceeded, ProgressFn, bounded_phase
from semcheck.engines.options import CheckOptions, EngineFn
from semcheck.ir import Protocol
from semcheck.kinds import StoppedBy
from semcheck.result import Result
from semcheck.semantics import System


def _explicit(system: System, budget: Budget | None, progress: ProgressFn | None, options: CheckOptions) -> Result:
    from semcheck.engines.explicit import search as explicit
    from semcheck.engines.common import to_result

    exploration = explicit.explore(system, options.explicit, budget=budget, progress=progress)
    # breadth-first: the first path to each finding is a shortest one already
    return to_result(exploration, "explicit", first_only=options.stop_at_first)


def _z3(system: System, budget: Budget | None, progress: ProgressFn | None, options: CheckOptions) -> Result:
    from semcheck.engines.z3 import engine as smt
    from semcheck.engines.common import to_result

    exploration = smt.explore(system, options.z3, budget=budget, progress=progress)
    return to_result(exploration, smt.NAME, first_only=options.stop_at_first, shorten_paths=True)


def _auto(system: System, budget: Budget | None, progress: ProgressFn | None, options: CheckOptions) -> Result:
    from semcheck.engines import auto

    return auto.run(system, budget, progress, options, explicit=_explicit, z3=_z3, simulate=_simulate)


def _simulate(system: System, budget: Budget | None, progress: ProgressFn | None, options: CheckOptions) -> Result:
    from semcheck.engines import simulate
    from semcheck.engines.common import to_result

    exploration = simulate.explore(system, options.simulate, budget=budget, progress=progress)
    return to_result(exploration, "simulate", first_only=options.stop_at_first, shorten_paths=True)


ENGINES: dict[str, EngineFn] = {
    "auto": _auto,
    "explicit": _explicit,
    "z3": _z3,
    "simulate": _simulate,
}


def check(
    protocol: Protocol,
    options: CheckOptions,
    *,
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
) -> Result:
    """Check `protocol` as `options` say, with the engine they name. With `options.split`,
    threads that can never affect each other are checked one independent part at a time
    (`components.py`): the same findings, for the sum of the parts' work instead of its product.

    By default the check stops at its first counterexample, as SPIN and TLC do: the first
    error any engine finds, with its shortest explanation (a breadth-first path, or another
    engine's path cut down to what the violation depends on) and its root cause, ends it.
    `options.exhaustive` goes on to every finding of every kind. A `safe` verdict means the
    same either way: an exhaustive engine explored every schedule and found no error."""
    engine = options.engine
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(sorted(ENGINES))}")
    run = ENGINES[engine]
    started = time.monotonic()
    budget = (budget or Budget.from_env()).started(started)
    try:
        with bounded_phase("building the transition system", budget, started, progress=progress):
            system = System(protocol)
            # Which accesses may race with which copies: every engine asks, and at scale it
            # is the costliest table (12 CPU s for the ring at 256 devices); built here, it
            # counts against the budget in the main thread, whichever engine runs.
            system.racing_pairs()
            groups = components.parts(system) if options.split else []
    except BudgetExceeded as exceeded:
        return out_of_budget(protocol, engine, exceeded.reason, exceeded.by, time.monotonic() - started)
    if len(groups) <= 1:
        return run(system, budget, progress, options)
    per_part = options.with_ends_reported()
    return components.check_parts(
        system, groups,
        lambda part, part_budget, part_progress: run(part, part_budget, part_progress, per_part),
        budget, progress,
        stop_at_first=options.stop_at_first,
    )


def out_of_budget(protocol: Protocol, engine: str, reason: str, by: StoppedBy, seconds: float) -> Result:
    """The Result of a check whose budget ran out before any engine could start."""
    from semcheck.engines.common import describing
    from semcheck.result import Stats, Verdict

    return Result(
        **describing(protocol), engine=engine, verdict=Verdict.INCONCLUSIVE,
        stats=Stats(seconds=round(seconds, 4)),
        notes=list(protocol.notes) + [f"no verdict: {reason}"],
        exhausted=reason,
        stopped_by=by,
    )
