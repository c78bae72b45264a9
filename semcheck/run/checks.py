"""Checking one protocol, and loading one file for its checks: what the Python API and a
sweep's tasks (`semcheck.run.sweep`, on this machine or a Ray worker) share."""

from __future__ import annotations

from dataclasses import field, replace
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from semcheck import engines
from semcheck.passes import assumptions
from semcheck.passes.assumptions import Assumption
from semcheck.engines.budget import Budget, BudgetExceeded, ProgressFn, bounded_phase, memory_limit_mb
from semcheck.engines.options import CheckOptions
from semcheck.errors import LoadError, LoadOutOfMemory, LoadTimedOut, ProtocolError
from semcheck.frontends import Classification, load
from semcheck.ir import Loc, Protocol
from semcheck.kinds import SEVERITY, Kind
from semcheck.records import record
from semcheck.result import NO_PROTOCOL, Result, StoppedBy, Verdict, Violation

if TYPE_CHECKING:
    from semcheck.frontends.kernel_script import OnPhases


def check_one(
    protocol: Protocol,
    options: CheckOptions = CheckOptions(),
    *,
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
    assume: Iterable[Assumption] = (),
    cores_enter_together: bool = True,
) -> Result:
    """Check `protocol` as `options` say (`engines.check`), after the passes a check applies
    first: `cores_enter_together`, the reading of how the TensorCores of one chip enter a
    kernel (semcheck/passes/core_entry.py; False is --no-assume-cores-enter-together), and
    `assume`, bounds on its inputs. The API's `check_protocol` takes keywords and calls this."""
    from semcheck.passes import core_entry

    protocol = core_entry.apply(protocol, cores_enter_together)
    assume = list(assume)
    if assume:
        assumptions.check_names([protocol], assume, source=f"protocol {protocol.name}")
        protocol = assumptions.apply(protocol, assume)
    try:
        result = engines.check(protocol, options, budget=budget, progress=progress)
    except ProtocolError as e:
        return error_result(protocol.name, protocol.loc.file, protocol.loc.line, protocol.devices, str(e),
                            options.engine)
    from semcheck.passes.programs import outside_producers
    from semcheck.run.provenance import uncertain_races, with_data_race_note

    return with_data_race_note(protocol, uncertain_races(protocol, outside_producers(protocol, result)))


@record(frozen=True)
class LoadReport:
    """How loading one file at one device count went: what a capture line shows."""

    path: str
    devices: int
    seconds: float  # the whole load
    kernels: int  # kernels captured (a model file: 1)
    phases: dict[str, float] = field(default_factory=dict)  # a kernel script's: jax import, script, lowering
    failed: bool = False
    kept: bool = False  # the capture came from the capture cache: `phases` are the earlier capture's


CAPTURE_GRACE = 2.0


def load_within(path: str, devices: int, budget: Budget, progress: ProgressFn | None = None, *,
                classification: Classification | None = None, assumed: tuple[str, ...] = (),
                on_phases: OnPhases | None = None) -> list:
    """`load`, within what is left of `budget`: the capture subprocess is told the time left
    (it stops the script then and lowers what it captured), and the whole load runs under
    `bounded_phase`, which also stops a model file's own code and a capture that overruns."""
    left = budget.remaining()
    assert budget.deadline is not None, "a check's budget has started"
    grace = replace(budget, deadline=budget.deadline + CAPTURE_GRACE)
    what = f"loading {path} with {devices} devices"
    with bounded_phase(what, grace, progress=progress):
        try:
            return load(path, devices, classification=classification, capture_timeout=max(left, 0.0),
                        assumed=assumed, on_phases=on_phases, memory_mb=memory_limit_mb(budget))
        except LoadTimedOut:  # the check's own time ran out while its file loaded
            raise BudgetExceeded(f"time budget of {budget.timeout:g} s ran out while {what}", StoppedBy.TIME) from None
        except LoadOutOfMemory as e:  # a model file's child grew past the check's memory
            raise BudgetExceeded(f"memory budget of {e.limit_mb:,.0f} MB ran out while {what}",
                                 StoppedBy.MEMORY) from None


def out_of_budget_loading(path: str, devices: int, reason: str, by: StoppedBy, engine: str, seconds: float,
                          notes: tuple[str, ...] = ()) -> Result:
    """`notes`: what the budget's reason does not say (where a stopped script was, and how to
    give it longer), said in their own words; without them, the reason is the note (JSON and
    SARIF carry no other field for it)."""
    from semcheck.result import Stats

    return Result(
        kernel=stem(path), file=path, line=0, frontend=NO_PROTOCOL, backend=NO_PROTOCOL, devices=devices,
        cores=0, engine=engine, verdict=Verdict.INCONCLUSIVE, stats=Stats(seconds=round(seconds, 4)),
        notes=list(notes) or [f"no verdict: {reason}"],
        exhausted=reason,
        stopped_by=by,
    )


def load_error_result(path: str, devices: int, e: LoadError, engine: str, kernel: str | None = None) -> Result:
    """An error Result located where the LoadError points (or at the file)."""
    file = e.loc.file if e.loc else path
    kernel = kernel or getattr(e, "kernel", None) or stem(path)
    return error_result(kernel, file, e.loc.line if e.loc else 0, devices, error_text(e), engine)


def error_text(e: LoadError) -> str:
    return e.message + (f"\n  hint: {e.hint}" if e.hint else "")


def error_result(kernel: str, file: str, line: int, devices: int, message: str, engine: str) -> Result:
    return Result(
        kernel=kernel, file=file, line=line, frontend=NO_PROTOCOL, backend=NO_PROTOCOL,
        devices=devices, cores=0, engine=engine, verdict=Verdict.ERROR, error=message,
    )


def stem(path: str) -> str:
    import os

    return os.path.splitext(os.path.basename(path))[0]


def check_loaded(loaded: Sequence[Protocol | LoadError], check: Callable[[Protocol], Result],
                 unlowered: Callable[[LoadError], Result]) -> list[Result]:
    """One Result per kernel a file or function gave, in order: `check` of each protocol;
    for a kernel whose lowering stopped part-way, `check` of each prefix it has, turned into
    what that prefix decides (`prefix.prefix_result`); for one with no prefix, `unlowered`."""
    from semcheck.run.prefix import prefix_result

    results = []
    for item in loaded:
        if not isinstance(item, LoadError):
            results.append(replace(check(item), calls=item.calls))
        elif not item.prefixes:
            results.append(unlowered(item))
        else:
            results += [replace(prefix_result(check(protocol), protocol, error_text(item), item.loc),
                                calls=protocol.calls)
                        for protocol in item.prefixes]
    return [resting_on_producers(r, results[:i]) for i, r in enumerate(results)]


def resting_on_producers(result: Result, earlier: Sequence[Result]) -> Result:
    """`result`, inconclusive instead of safe where an operand started with an earlier
    kernel's outputs as semcheck's lowering computed them (lower/produced.py) and that
    kernel's check (in `earlier`, the same file and device count) is not safe: those values
    are its outputs on a chip only if it has no data race, so a safe verdict resting on
    them cannot be justified. That kernel's check is the one whose protocol holds its call
    (`Result.calls`, `FedOperand.producer_call`). A kernel whose check is one protocol with
    its producer's (a program) is judged with it and needs nothing more."""
    if result.verdict is not Verdict.SAFE:
        return result
    for fed in result.values.fed:
        if fed.producer_call is None or fed.producer_call in result.calls:
            continue
        unsafe = [r for r in earlier if fed.producer_call in r.calls and r.verdict is not Verdict.SAFE]
        if unsafe:
            return replace(result, verdict=Verdict.INCONCLUSIVE, unjustified=(
                f"the values of {fed.buffer} are the outputs of {fed.producer} as semcheck's lowering computed "
                f"them, which hold on a chip only if that kernel has no data race, and its check here is "
                f"{unsafe[0].verdict.value}"))
    return result


def mesh_smaller_warning(mesh_devices: int, requested: int, loc: Loc | None) -> Violation:
    """The script ran with `requested` devices but the kernel's mesh (at `loc`) used fewer:
    the larger count was never checked, so a gate must not count it as covered."""
    return Violation(
        kind=Kind.MESH_SMALLER_THAN_DEVICES,
        severity=SEVERITY[Kind.MESH_SMALLER_THAN_DEVICES],
        message=(
            f"the kernel's mesh has {mesh_devices} device(s) but the check ran with {requested}: "
            f"{requested} devices were not checked (build the mesh from all of jax.devices() to check "
            f"them, or leave {requested} out of --devices)"
        ),
        device=None, core=None, location=loc,
    )

