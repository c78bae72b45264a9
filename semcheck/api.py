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

from semcheck.assumptions import Assumption
from semcheck.checks import (  # noqa: F401 (LoadReport, error_result: part of the API)
    LoadReport, _error_text, _load_error_result, check_protocol, error_result,
)
from semcheck.engines.budget import Budget, ProgressFn
from semcheck.frontends import LoadError
from semcheck.ir import Protocol
from semcheck.prefix import prefix_result
from semcheck.result import Result


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
    on_load: Callable[[LoadReport], None] | None = None,
    jobs: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    on_done: Callable | None = None,
    **options,
) -> list[Result]:
    """Every Result of checking `paths` at each device count, file by file. The same tasks
    `semcheck verify -j N` or `--executor ray` runs elsewhere (`semcheck.sweep`); each
    task loads its file within the check's budget (loading is part of each check's time)
    and checks each of its kernels. `on_load`, when given, hears how each (file, device
    count) loaded (`LoadReport`), as its task finishes."""
    from semcheck import sweep

    unroll = options.pop("unroll", None)
    sweep_options = sweep.SweepOptions(
        engine=engine, budget=budget, assume=tuple(assume), invocations=invocations,
        reduce=options.pop("reduce", True), split=options.pop("split", True), unroll=unroll,
    )
    if options:
        raise TypeError(f"verify_path() got unexpected options: {', '.join(sorted(options))}")
    tasks = sweep.plan([paths] if isinstance(paths, str) else list(paths), devices, sweep_options)
    return sweep.run(tasks, jobs=jobs, executor=sweep.Executor(executor), ray_address=ray_address,
                     progress_for=progress_for, on_done=on_done, on_load=on_load)


# A capture subprocess told to stop after the time left gets this long to report what it
# captured before it is stopped from outside.
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
