"""`--engine auto` (the CLI's default): pick an engine per protocol.

The explicit engine enumerates every combination of input values as its own start state,
and its work grows with the interleavings the reduction cannot collapse; the z3 engine covers
every input value in one query but pays for the encoding, and stops at its unrolling bound on
loops whose length depends on timing (a polling loop). So:

* inputs spanning more than `MAX_EXPLICIT_INPUT_COMBINATIONS` value combinations: z3;
* otherwise explicit, with a share of the budget (`EXPLICIT_SHARE_STATES` states, half the
  time); if that share runs out before a verdict, z3 decides with the time that is left.
  If what ran out is the user's own budget (`--max-states` below the share, or memory),
  the verdict is inconclusive, as it would be with `--engine explicit`.

A protocol with something the z3 engine does not model (`smt.unmodelled`: a jump that skips
or repeats a kernel entry) goes to the explicit engine with the whole budget.

The Result names the engine that decided (`Result.engine`), and a note says why whenever
that is not the explicit engine's plain verdict.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable

from semcheck.engines.budget import Budget, ProgressFn
from semcheck.ir import Protocol
from semcheck.result import Result, Verdict
from semcheck.semantics import System

MAX_EXPLICIT_INPUT_COMBINATIONS = 256
EXPLICIT_SHARE_STATES = 500_000
EXPLICIT_SHARE_TIME = 0.5

EngineFn = Callable[..., Result]


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
    budget = budget or Budget.from_env()
    from semcheck.engines.smt import unmodelled

    missing = unmodelled(system)
    if missing is not None:  # only the explicit engine can decide it: give it the whole budget
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

    started = time.monotonic()
    share = replace(
        budget,
        max_states=min(budget.max_states, EXPLICIT_SHARE_STATES),
        timeout=budget.timeout * EXPLICIT_SHARE_TIME,
    )
    result = explicit(system, share, progress, **options)
    if result.verdict is not Verdict.INCONCLUSIVE:
        return result
    out_of_states = result.stats.states > share.max_states
    out_of_time = result.stats.seconds >= share.timeout
    if not ((out_of_states and share.max_states < budget.max_states) or out_of_time):
        return result  # the user's own budget ran out, not auto's share of it
    left = budget.timeout - (time.monotonic() - started)
    # the explicit run silenced the race lines it reported; z3 reports every racing pair
    fresh = System(system.protocol)
    fallback = z3(fresh, replace(budget, timeout=max(left, 1.0)), progress, **options)
    fallback.notes.insert(
        0,
        f"engine auto: the explicit engine ran out of its share of the budget "
        f"({result.stats.states:,} states), so z3 decided",
    )
    return fallback
