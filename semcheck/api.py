"""The Python API, for scripts and pytest:

    from semcheck import verify_model
    result = verify_model(my_model, devices=4)
    assert result.verdict.value == "safe", result

`verify_path` runs what `semcheck verify PATH` runs and returns every Result. `assume=`
bounds protocol inputs by name (see `semcheck.assumptions`), as `--assume` does;
`verify(fn, *example_args)` checks the Pallas TPU kernels a function calls, in-process.
"""

from __future__ import annotations

from typing import Callable, Iterable

from semcheck import assumptions, engines
from semcheck.assumptions import Assumption
from semcheck.engines.budget import Budget, ProgressFn
from semcheck.frontends import LoadError, discover, load
from semcheck.invocations import repeat
from semcheck.prefix import prefix_result
from semcheck.ir import Protocol
from semcheck.result import Result, Verdict
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


def verify_path(
    paths: str | Iterable[str],
    devices: Iterable[int] = (2, 4, 8),
    *,
    engine: str = "auto",
    budget: Budget | None = None,
    progress_for: Callable[[str, int], ProgressFn | None] | None = None,
    assume: Iterable[Assumption] = (),
    invocations: int = 1,
    **options,
) -> list[Result]:
    # Load everything first, so an --assume that names no input fails before any checking.
    loaded: list[Result | tuple[str, int, list]] = []
    for path in discover([paths] if isinstance(paths, str) else list(paths)):
        for n in devices:
            try:
                loaded.append((path, n, load(path, n)))
            except LoadError as e:
                loaded.append(_load_error_result(path, n, e, engine))
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
            for protocol in stopped.prefixes if stopped is not None else [protocol]:
                try:
                    protocol = repeat(assumptions.apply(protocol, assume), invocations)
                except ValueError as e:
                    results.append(error_result(protocol.name, protocol.loc.file, protocol.loc.line, n, str(e), engine))
                    continue
                progress = progress_for(protocol.name, n) if progress_for else None
                result = check_protocol(protocol, engine=engine, budget=budget, progress=progress, **options)
                result.invocations = invocations
                if stopped is not None:  # lowering stopped part-way: what its prefix decides
                    result = prefix_result(result, protocol, _error_text(stopped), stopped.loc)
                results.append(result)
    return results


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
