"""The Python API, for scripts and pytest:

    from semcheck import verify_model
    result = verify_model(my_model, devices=4)
    assert result.verdict.value == "safe", result

`verify_path` runs what `semcheck verify PATH` runs and returns every Result. `assume=`
bounds protocol inputs by name (see `semcheck.assumptions`), as `--assume` does;
`verify(fn, *example_args)` checks the Pallas TPU kernels a function calls, in-process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from semcheck import assumptions, engines
from semcheck.assumptions import Assumption
from semcheck.engines.budget import Budget, BudgetExceeded, ProgressFn, bounded_phase
from semcheck.frontends import LoadError, discover, load
from semcheck.invocations import repeat
from semcheck.prefix import prefix_result
from semcheck.ir import Protocol
from semcheck.result import Result, Verdict
from semcheck.errors import ProtocolError


def check_protocol(
    protocol: Protocol,
    *,
    engine: str = "auto",
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
    assume: Iterable[Assumption] = (),
    **options,
) -> Result:
    assume = list(assume)
    if assume:
        assumptions.check_names([protocol], assume, source=f"protocol {protocol.name}")
        protocol = assumptions.apply(protocol, assume)
    try:
        result = engines.check(protocol, engine, budget=budget, progress=progress, **options)
    except ProtocolError as e:
        return error_result(protocol.name, protocol.loc.file, protocol.loc.line, protocol.devices, str(e), engine)
    from semcheck.provenance import with_data_race_note

    return with_data_race_note(protocol, result)


def verify_model(
    model: Callable[[int], Protocol] | Protocol, devices: int = 4, **options
) -> Result:
    protocol = model if isinstance(model, Protocol) else model(devices)
    return check_protocol(protocol, **options)


@dataclass(frozen=True)
class LoadReport:
    """How loading one file at one device count went: what a capture line shows."""

    path: str
    devices: int
    seconds: float  # the whole load
    kernels: int  # kernels captured (a model file: 1)
    phases: dict[str, float] = field(default_factory=dict)  # a kernel script's: jax import, script, lowering
    failed: bool = False


def verify_path(
    paths: str | Iterable[str],
    devices: Iterable[int] = (2, 4, 8),
    *,
    engine: str = "auto",
    budget: Budget | None = None,
    progress_for: Callable[[str, int], ProgressFn | None] | None = None,
    assume: Iterable[Assumption] = (),
    invocations: int = 1,
    on_load: Callable[[LoadReport], None] | None = None,
    **options,
) -> list[Result]:
    """`on_load`, when given, hears how each (file, device count) loaded (`LoadReport`)."""
    # Load everything first, so an --assume that names no input fails before any checking.
    # Loading (running a kernel script, or a model file's code) is part of each check's
    # time budget: what it took is not given to the engines.
    budget = budget or Budget.from_env()
    loaded: list[Result | tuple[str, int, list]] = []
    load_seconds: dict[tuple[str, int], float] = {}
    for path in discover([paths] if isinstance(paths, str) else list(paths)):
        for n in devices:
            phases: dict[str, float] = {}
            captured = [1]

            def heard(seconds: dict[str, float], kernels: int) -> None:
                phases.update(seconds)
                captured[0] = kernels

            started = time.monotonic()
            failed = False
            try:
                progress = progress_for(_stem(path), n) if progress_for else None
                extra = {"on_phases": heard} if on_load else {}
                loaded.append((path, n, _load_within(path, n, budget.started(started), progress, **extra)))
            except LoadError as e:
                failed = True
                loaded.append(_load_error_result(path, n, e, engine))
            except BudgetExceeded as e:
                failed = True
                loaded.append(_out_of_budget_loading(path, n, e.reason, engine, time.monotonic() - started))
            load_seconds[(path, n)] = time.monotonic() - started
            if on_load is not None:
                on_load(LoadReport(path, n, load_seconds[(path, n)], captured[0], phases, failed))
    assume = list(assume)
    protocols = [
        q for item in loaded if not isinstance(item, Result) for p in item[2]
        for q in (p.prefixes if isinstance(p, LoadError) else [p])
    ]
    if assume and protocols:
        assumptions.check_names(protocols, assume, source="the checked kernels and models")
    results = []
    for item in loaded:
        if isinstance(item, Result):
            results.append(item)
            continue
        path, n, protocols = item
        for protocol in protocols:
            stopped = protocol if isinstance(protocol, LoadError) else None
            if stopped is not None and not stopped.prefixes:  # one kernel of the file cannot be lowered
                results.append(_load_error_result(path, n, stopped, engine))
                continue
            # Its clock started when its file began loading: loading spent part of it.
            check_budget = budget.started(time.monotonic() - load_seconds[(path, n)])
            for protocol in stopped.prefixes if stopped is not None else [protocol]:
                try:
                    protocol = repeat(assumptions.apply(protocol, assume), invocations)
                except ValueError as e:
                    results.append(error_result(protocol.name, protocol.loc.file, protocol.loc.line, n, str(e), engine))
                    continue
                progress = progress_for(protocol.name, n) if progress_for else None
                result = check_protocol(protocol, engine=engine, budget=check_budget, progress=progress, **options)
                result.invocations = invocations
                if stopped is not None:  # lowering stopped part-way: what its prefix decides
                    result = prefix_result(result, protocol, _error_text(stopped), stopped.loc)
                results.append(result)
    return results


# A capture subprocess told to stop after the time left gets this long to report what it
# captured before it is stopped from outside.
CAPTURE_GRACE = 2.0


def _load_within(path: str, devices: int, budget: Budget, progress: ProgressFn | None = None, **options) -> list:
    """`load`, within what is left of `budget`: the capture subprocess is told the time left
    (it stops the script then and lowers what it captured), and the whole load runs under
    `bounded_phase`, which also stops a model file's own code and a capture that overruns."""
    left = budget.remaining()
    grace = replace(budget, deadline=budget.deadline + CAPTURE_GRACE)
    with bounded_phase(f"loading {path} with {devices} devices", grace, progress=progress):
        return load(path, devices, capture_timeout=max(left, 0.0), **options)


def _out_of_budget_loading(path: str, devices: int, reason: str, engine: str, seconds: float) -> Result:
    from semcheck.result import Stats

    return Result(
        kernel=_stem(path), file=path, line=0, backend="unknown", semantics="unknown", devices=devices,
        cores=0, engine=engine, verdict=Verdict.INCONCLUSIVE, stats=Stats(seconds=round(seconds, 4)),
        notes=[f"no verdict: {reason}"],
        exhausted=reason,
    )


def verify(fn: Callable, *example_args, devices: int | None = None, tpu_cores: int | None = None,
           engine: str = "auto", budget: Budget | None = None, **options) -> list[Result]:
    """Check every Pallas kernel (TPU or Mosaic GPU) that `fn(*example_args)` calls, in this process.

    `fn` is traced with `jax.make_jaxpr`; its kernels must run inside `jax.shard_map`, whose
    mesh decides the devices. `devices`, when given, is the device count the caller expects:
    semcheck checks the process has that many JAX devices (set
    `XLA_FLAGS=--xla_force_host_platform_device_count=N` before importing jax, e.g. at the top
    of conftest.py) and that every kernel's mesh has that many. Returns one Result per kernel
    (two for a kernel with parallel grid dimensions: one and two TensorCores per device); a
    kernel that cannot be lowered gives a Result with verdict "error".
    """
    import jax

    from semcheck.capture import capture_function, lower_captures

    if devices is not None and jax.device_count() < devices:
        raise LoadError(
            f"semcheck.verify(devices={devices}): this process has only {jax.device_count()} "
            "JAX device(s)",
            hint=f"set XLA_FLAGS=--xla_force_host_platform_device_count={devices} before jax is "
            "imported (e.g. at the top of conftest.py), or check a script with `semcheck verify "
            "FILE --devices N`, which runs it in a subprocess with N devices",
        )
    captures = capture_function(fn, *example_args)
    if not captures:
        raise LoadError(
            f"{getattr(fn, '__name__', fn)!s} calls no Pallas kernel (pl.pallas_call, pl.kernel or plgpu.kernel)",
            hint="pass the function that calls the kernel inside jax.shard_map",
        )
    protocols, errors = lower_captures(captures, tpu_cores=tpu_cores)
    results = []
    for protocol in protocols:
        if devices is not None and protocol.devices != devices:
            raise LoadError(
                f"semcheck.verify(devices={devices}): kernel {protocol.name} runs on a mesh of "
                f"{protocol.devices} device(s)",
                protocol.loc,
                hint="build the mesh from jax.devices()[:devices]",
            )
        results.append(check_protocol(protocol, engine=engine, budget=budget, **options))
    for e in errors:
        error = e.to_load_error()
        if not error.prefixes:
            results.append(_load_error_result(e.file, 0, error, engine, kernel=e.kernel))
        for protocol in error.prefixes:  # lowering stopped part-way: what its prefix decides
            checked = check_protocol(protocol, engine=engine, budget=budget, **options)
            results.append(prefix_result(checked, protocol, _error_text(error), error.loc))
    return results


def _load_error_result(path: str, devices: int, e: LoadError, engine: str, kernel: str | None = None) -> Result:
    """An error Result located where the LoadError points (or at the file)."""
    file = e.loc.file if e.loc else path
    kernel = kernel or getattr(e, "kernel", None) or _stem(path)
    return error_result(kernel, file, e.loc.line if e.loc else 0, devices, _error_text(e), engine)


def _error_text(e: LoadError) -> str:
    return e.message + (f"\n  hint: {e.hint}" if e.hint else "")


def error_result(kernel: str, file: str, line: int, devices: int, message: str, engine: str) -> Result:
    return Result(
        kernel=kernel, file=file, line=line, backend="unknown", semantics="unknown",
        devices=devices, cores=0, engine=engine, verdict=Verdict.ERROR, error=message,
    )


def _stem(path: str) -> str:
    import os

    return os.path.splitext(os.path.basename(path))[0]
