"""The Python API, for scripts and pytest:

    from semcheck import verify_model
    result = verify_model(my_model, devices=4)
    assert result.verdict.value == "safe", result

`verify_path` runs what `semcheck verify PATH` runs and returns every Result. `assume=`
bounds protocol inputs by name (see `semcheck.assumptions`), as `--assume` does;
`verify(fn, *example_args)` checks the Pallas TPU kernels a function calls, in-process.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from semcheck import assumptions, engines
from semcheck.assumptions import Assumption
from semcheck.engines.budget import Budget, ProgressFn
from semcheck.frontends import LoadError, NothingToCheck, Skipped, classify, load, walk
from semcheck.frontends.discovery import Why
from semcheck.invocations import repeat
from semcheck.ir import Protocol
from semcheck.properties import SEVERITY, Kind
from semcheck.result import Result, Verdict, Violation
from semcheck.semantics import ProtocolError


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
        return engines.check(protocol, engine, budget=budget, progress=progress, **options)
    except ProtocolError as e:
        return error_result(protocol.name, protocol.loc.file, protocol.loc.line, protocol.devices, str(e), engine)


def verify_model(
    model: Callable[[int], Protocol] | Protocol, devices: int = 4, **options
) -> Result:
    protocol = model if isinstance(model, Protocol) else model(devices)
    return check_protocol(protocol, **options)


def verify_path(
    paths: str | Iterable[str],
    devices: Iterable[int] = (2, 4, 8),
    *,
    engine: str = "auto",
    budget: Budget | None = None,
    progress_for: Callable[[str, int], ProgressFn | None] | None = None,
    assume: Iterable[Assumption] = (),
    invocations: int = 1,
    skipped: list[Skipped] | None = None,
    **options,
) -> list[Result]:
    """Every Result for the files at `paths` (see `check_paths`)."""
    return list(check_paths(
        paths, devices, engine=engine, budget=budget, progress_for=progress_for, assume=assume,
        invocations=invocations, skipped=skipped, **options,
    ))


def check_paths(
    paths: str | Iterable[str],
    devices: Iterable[int] = (2, 4, 8),
    *,
    engine: str = "auto",
    budget: Budget | None = None,
    progress_for: Callable[[str, int], ProgressFn | None] | None = None,
    assume: Iterable[Assumption] = (),
    invocations: int = 1,
    skipped: list[Skipped] | None = None,
    **options,
) -> Iterator[Result]:
    """What `semcheck verify PATH...` runs, one Result at a time as each check finishes (so
    an interrupted run keeps what it has). Files a folder walk left out, and files that
    compiled no kernel, are appended to `skipped` when it is given.

    A file that cannot be read as Python gives one error Result (at the first device
    count), not one per count."""
    devices = list(devices)
    load_options = {k: options.pop(k) for k in _LOAD_OPTIONS if k in options}  # the rest go to the engine
    walked = walk([paths] if isinstance(paths, str) else list(paths))
    if skipped is not None:
        skipped.extend(walked.skipped)
    # Load everything first, so an --assume that names no input fails before any checking.
    loaded: list[Result | tuple[str, int, list]] = []
    for path in walked.files:
        try:
            classification = classify(path)
        except LoadError as e:
            loaded.append(_load_error_result(path, devices[0] if devices else 0, e, engine))
            continue
        empty: dict[int, NothingToCheck] = {}
        for n in devices:
            try:
                loaded.append((path, n, load(path, n, classification=classification, **load_options)))
            except NothingToCheck as e:
                empty[n] = e
            except LoadError as e:
                loaded.append(_load_error_result(path, n, e, engine))
        if empty and len(empty) == len(devices) and skipped is not None and not _declares_expectations(path):
            skipped.append(Skipped(path, Why.NO_KERNEL))
        else:  # declared to hold a kernel, compiled one at some counts only, or a caller that wants errors
            loaded.extend(_load_error_result(path, n, e, engine) for n, e in empty.items())
    assume = list(assume)
    protocols = [
        p for item in loaded if not isinstance(item, Result) for p in item[2] if not isinstance(p, LoadError)
    ]
    if assume and protocols:
        assumptions.check_names(protocols, assume, source="the checked kernels and models")
    for item in loaded:
        if isinstance(item, Result):
            yield item
            continue
        path, n, protocols = item
        for protocol in protocols:
            if isinstance(protocol, LoadError):  # one kernel of the file cannot be lowered
                yield _load_error_result(path, n, protocol, engine)
                continue
            try:
                protocol = repeat(assumptions.apply(protocol, assume), invocations)
            except ValueError as e:
                yield error_result(protocol.name, protocol.loc.file, protocol.loc.line, n, str(e), engine)
                continue
            progress = progress_for(protocol.name, n) if progress_for else None
            result = check_protocol(protocol, engine=engine, budget=budget, progress=progress, **options)
            result.invocations = invocations
            if protocol.devices < n:
                result.violations.append(mesh_smaller_warning(protocol, n))
            yield result


_LOAD_OPTIONS = ("capture_timeout",)  # seconds a file may take to load (capture, model())


def _declares_expectations(path: str) -> bool:
    from semcheck import expectations

    try:
        return bool(expectations.declarations_for(path))
    except expectations.ExpectationError:
        return True  # a malformed declaration still says the file is meant to be checked


def mesh_smaller_warning(protocol: Protocol, requested: int) -> Violation:
    """The script ran with `requested` devices but the kernel's mesh used fewer: the larger
    count was never checked, so a gate must not count it as covered."""
    return Violation(
        kind=Kind.MESH_SMALLER_THAN_DEVICES.value,
        severity=SEVERITY[Kind.MESH_SMALLER_THAN_DEVICES],
        message=(
            f"the kernel's mesh has {protocol.devices} device(s) but the check ran with {requested}: "
            f"{requested} devices were not checked (build the mesh from all of jax.devices() to check "
            f"them, or leave {requested} out of --devices)"
        ),
        device=None, core=None, location=protocol.loc,
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
        results.append(_load_error_result(e.file, 0, e.to_load_error(), engine, kernel=e.kernel))
    return results


def _load_error_result(path: str, devices: int, e: LoadError, engine: str, kernel: str | None = None) -> Result:
    """An error Result located where the LoadError points (or at the file)."""
    file = e.loc.file if e.loc else path
    text = e.message + (f"\n  hint: {e.hint}" if e.hint else "")
    kernel = kernel or getattr(e, "kernel", None) or _stem(path)
    return error_result(kernel, file, e.loc.line if e.loc else 0, devices, text, engine)


def error_result(kernel: str, file: str, line: int, devices: int, message: str, engine: str) -> Result:
    return Result(
        kernel=kernel, file=file, line=line, backend="unknown", semantics="unknown",
        devices=devices, cores=0, engine=engine, verdict=Verdict.ERROR, error=message,
    )


def _stem(path: str) -> str:
    import os

    return os.path.splitext(os.path.basename(path))[0]
