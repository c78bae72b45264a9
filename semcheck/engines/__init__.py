"""Engines: interchangeable ways to decide the same properties, behind one Result type.

`check(protocol, engine=...)` is the single entry point; each engine module provides
`run(system, budget=..., progress=...) -> Result`.
"""

from __future__ import annotations

from typing import Callable

from semcheck.engines.budget import Budget, ProgressFn
from semcheck.ir import Protocol
from semcheck.result import Result
from semcheck.semantics import System


def _explicit(system: System, budget: Budget | None, progress: ProgressFn | None, **options) -> Result:
    from semcheck.engines import explicit
    from semcheck.engines.common import to_result

    return to_result(explicit.explore(system, budget=budget, progress=progress, **options), "explicit")


def _simulate(system: System, budget: Budget | None, progress: ProgressFn | None, **options) -> Result:
    from semcheck.engines import simulate
    from semcheck.engines.common import to_result

    options.pop("reduce", None)  # random schedules: nothing to reduce
    return to_result(simulate.explore(system, budget=budget, progress=progress, **options), "simulate")


ENGINES: dict[str, Callable[..., Result]] = {
    "explicit": _explicit,
    "simulate": _simulate,
}


def check(
    protocol: Protocol,
    engine: str = "explicit",
    *,
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
    **options,
) -> Result:
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(sorted(ENGINES))}")
    return ENGINES[engine](System(protocol), budget, progress, **options)
