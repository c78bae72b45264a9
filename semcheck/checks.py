"""Checking one protocol, and loading one file for its checks: what the Python API and a
sweep's tasks (`semcheck.sweep`, on this machine or a Ray worker) share."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

from semcheck import assumptions, engines
from semcheck.assumptions import Assumption
from semcheck.engines.budget import Budget, BudgetExceeded, ProgressFn, bounded_phase
from semcheck.errors import LoadError, LoadTimedOut, ProtocolError
from semcheck.frontends import load
from semcheck.ir import Loc, Protocol
from semcheck.kinds import SEVERITY, Kind
from semcheck.result import Result, Verdict, Violation


def check_protocol(
    protocol: Protocol,
    *,
    engine: str = "auto",
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
    assume: Iterable[Assumption] = (),
    cores_enter_together: bool = True,
    exhaustive: bool = False,
    **options,
) -> Result:
    """`cores_enter_together`: the reading of how the TensorCores of one chip enter a kernel
    (semcheck/core_entry.py; False is --no-assume-cores-enter-together). `exhaustive`: every
    finding of every kind, instead of stopping at the first counterexample (`engines.check`)."""
    from semcheck import core_entry

    protocol = core_entry.apply(protocol, cores_enter_together)
    assume = list(assume)
    if assume:
        assumptions.check_names([protocol], assume, source=f"protocol {protocol.name}")
        protocol = assumptions.apply(protocol, assume)
    try:
        result = engines.check(protocol, engine, budget=budget, progress=progress, exhaustive=exhaustive, **options)
    except ProtocolError as e:
        return error_result(protocol.name, protocol.loc.file, protocol.loc.line, protocol.devices, str(e), engine)
    from semcheck.programs import outside_producers
    from semcheck.provenance import uncertain_races, with_data_race_note

    return with_data_race_note(protocol, uncertain_races(protocol, outside_producers(protocol, result)))


@dataclass(frozen=True)
class LoadReport:
    """How loading one file at one device count went: what a capture line shows."""

    path: str
    devices: int
    seconds: float  # the whole load
    kernels: int  # kernels captured (a model file: 1)
    phases: dict[str, float] = field(default_factory=dict)  # a kernel script's: jax import, script, lowering
    failed: bool = False


CAPTURE_GRACE = 2.0


def _load_within(path: str, devices: int, budget: Budget, progress: ProgressFn | None = None, **options) -> list:
    """`load`, within what is left of `budget`: the capture subprocess is told the time left
    (it stops the script then and lowers what it captured), and the whole load runs under
    `bounded_phase`, which also stops a model file's own code and a capture that overruns."""
    left = budget.remaining()
    assert budget.deadline is not None, "a check's budget has started"
    grace = replace(budget, deadline=budget.deadline + CAPTURE_GRACE)
    what = f"loading {path} with {devices} devices"
    with bounded_phase(what, grace, progress=progress):
        try:
            return load(path, devices, capture_timeout=max(left, 0.0), **options)
        except LoadTimedOut:  # the check's own time ran out while its file loaded
            raise BudgetExceeded(f"time budget of {budget.timeout:g} s ran out while {what}") from None


def _out_of_budget_loading(path: str, devices: int, reason: str, engine: str, seconds: float) -> Result:
    from semcheck.result import Stats

    return Result(
        kernel=_stem(path), file=path, line=0, frontend="unknown", backend="unknown", devices=devices,
        cores=0, engine=engine, verdict=Verdict.INCONCLUSIVE, stats=Stats(seconds=round(seconds, 4)),
        notes=[f"no verdict: {reason}"],
        exhausted=reason,
    )


def _load_error_result(path: str, devices: int, e: LoadError, engine: str, kernel: str | None = None) -> Result:
    """An error Result located where the LoadError points (or at the file)."""
    file = e.loc.file if e.loc else path
    kernel = kernel or getattr(e, "kernel", None) or _stem(path)
    return error_result(kernel, file, e.loc.line if e.loc else 0, devices, _error_text(e), engine)


def _error_text(e: LoadError) -> str:
    return e.message + (f"\n  hint: {e.hint}" if e.hint else "")


def error_result(kernel: str, file: str, line: int, devices: int, message: str, engine: str) -> Result:
    return Result(
        kernel=kernel, file=file, line=line, frontend="unknown", backend="unknown",
        devices=devices, cores=0, engine=engine, verdict=Verdict.ERROR, error=message,
    )


def _stem(path: str) -> str:
    import os

    return os.path.splitext(os.path.basename(path))[0]


def mesh_smaller_warning(mesh_devices: int, requested: int, loc: Loc | None) -> Violation:
    """The script ran with `requested` devices but the kernel's mesh (at `loc`) used fewer:
    the larger count was never checked, so a gate must not count it as covered."""
    return Violation(
        kind=Kind.MESH_SMALLER_THAN_DEVICES.value,
        severity=SEVERITY[Kind.MESH_SMALLER_THAN_DEVICES],
        message=(
            f"the kernel's mesh has {mesh_devices} device(s) but the check ran with {requested}: "
            f"{requested} devices were not checked (build the mesh from all of jax.devices() to check "
            f"them, or leave {requested} out of --devices)"
        ),
        device=None, core=None, location=loc,
    )

