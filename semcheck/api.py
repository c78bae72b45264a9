"""The Python API, for scripts and pytest:

    from semcheck import verify_model
    result = verify_model(my_model, devices=4)
    assert result.verdict.value == "safe", result

`verify_path` runs what `semcheck verify PATH` runs and returns every Result. Like the CLI,
a check stops at its first counterexample; `exhaustive=True` (`--exhaustive`) reports every
finding of every kind. `assume=`
bounds protocol inputs by name (see `semcheck.passes.assumptions`), as `--assume` does;
`verify(fn, *example_args)` checks the Pallas TPU kernels a function calls, in-process.
"""

from __future__ import annotations

import warnings
from typing import Callable, Iterable, Iterator

from semcheck.passes.assumptions import Assumption
from semcheck.run.checks import (  # noqa: F401 (LoadReport, error_result: part of the API)
    LoadReport, check_loaded, check_one, error_result, load_error_result, stem,
)
from semcheck.engines.budget import Budget, ProgressFn
from semcheck.engines.options import CheckOptions
from semcheck.frontends import LoadError, Skipped
from semcheck.frontends.discovery import Why
from semcheck.ir import Protocol
from semcheck.result import Result


def check_protocol(
    protocol: Protocol,
    *,
    engine: str = "auto",
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
    assume: Iterable[Assumption] = (),
    cores_enter_together: bool = True,
    **options,
) -> Result:
    """Check one protocol. `engine`: auto (the default), explicit, z3 or simulate; `options`:
    the check's and the engines' (`exhaustive=True`, `split=False`, `reduce=False`,
    `symmetry=False`, `unroll=4`, `runs=`, `seed=`: `semcheck.engines.options`), an unknown
    one a TypeError; `assume`: bounds on the protocol's inputs; `cores_enter_together`: the
    reading of how the TensorCores of one chip enter a kernel (semcheck/passes/core_entry.py)."""
    return check_one(protocol, CheckOptions.from_keywords(engine=engine, **options), budget=budget,
                     progress=progress, assume=assume, cores_enter_together=cores_enter_together)


def verify_model(
    model: Callable[[int], Protocol] | Protocol, devices: int | str = 4, **options
) -> Result:
    """`devices="all"`: every device count, as `--devices all` (docs/parametric.md)."""
    if devices == "all" and not isinstance(model, Protocol):
        from semcheck.parametric.family import every_count_of

        if options:
            raise TypeError(f"verify_model(devices='all') takes no options, got {', '.join(sorted(options))}")
        return every_count_of(model).result
    protocol = model if isinstance(model, Protocol) else model(int(devices))
    return check_protocol(protocol, **options)


def verify_path(paths: str | Iterable[str], devices: Iterable[int] | str = (2, 4, 8), **options) -> list[Result]:
    """Every Result for the files at `paths`: `check_paths`, collected (same options).
    `devices="all"`: one Result per kernel for every device count, as `--devices all`
    (`semcheck.parametric.family.every_count` gives the whole outcome)."""
    if devices == "all":
        from semcheck.frontends import discover
        from semcheck.parametric.family import every_count

        if options:
            raise TypeError(f"verify_path(devices='all') takes no options, got {', '.join(sorted(options))}")
        return [o.result for path in discover([paths] if isinstance(paths, str) else list(paths))
                for o in every_count(path)]
    if isinstance(devices, str):
        raise TypeError(f"devices={devices!r}: give device counts, or 'all'")
    return list(check_paths(paths, devices, **options))


def check_paths(
    paths: str | Iterable[str],
    devices: Iterable[int] = (2, 4, 8),
    *,
    engine: str = "auto",
    budget: Budget | None = None,
    progress_for: Callable[[str, int], ProgressFn | None] | None = None,
    assume: Iterable[Assumption] = (),
    invocations: int = 1,
    on_load: Callable[[LoadReport], None] | None = None,
    skipped: list[Skipped] | None = None,
    jobs: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    on_done: Callable | None = None,
    capture_timeout: float | None = None,
    cores_enter_together: bool = True,
    **options,
) -> Iterator[Result]:
    """What `semcheck verify PATH...` runs, file by file, one file's Results as soon as its
    checks are done (so an interrupted run keeps what it has). Every (file, device count) is
    one task of a sweep (`semcheck.run.sweep`), run here, on `jobs` local processes or on Ray;
    each task loads its file within the check's budget and checks each of its kernels.

    Files a folder walk left out, and files that compiled no kernel at any device count
    (unless they declare expectations), are appended to `skipped` when it is given; a file
    that cannot be read as Python gives one error Result, not one per count. `on_load`
    hears how each (file, device count) loaded (`LoadReport`), as its task finishes.
    `capture_timeout`: seconds a file may take to load; `options`: the check's and the
    engines' (as `check_protocol` takes them)."""
    from semcheck.run import sweep
    from semcheck.run.tasks import SweepOptions

    sweep_options = SweepOptions(
        check=CheckOptions.from_keywords(engine=engine, **options), budget=budget, assume=tuple(assume),
        invocations=invocations, capture_timeout=capture_timeout, cores_enter_together=cores_enter_together,
    )
    plan = sweep.plan([paths] if isinstance(paths, str) else list(paths), list(devices), sweep_options)
    if skipped is not None:
        skipped.extend(plan.skipped)
    # Each check's Results are handed on as its task finishes (an interrupted run keeps them);
    # a file's "compiled no kernel" outcomes wait for its last task, which decides whether the
    # file is skipped (it compiled none at any count) or reported.
    empty: list = []
    seen = 0
    outcomes = sweep.iterate(
        plan.tasks, jobs=jobs, executor=sweep.Executor(executor), ray_address=ray_address,
        progress_for=progress_for, on_done=on_done, on_load=on_load,
    )
    for outcome in outcomes:
        task = plan.tasks[outcome.index]
        seen += 1
        if outcome.nothing_to_check is not None:
            empty.append(outcome)
        yield from outcome.results
        last = outcome.index + 1 == len(plan.tasks) or plan.tasks[outcome.index + 1].path != task.path
        if not last:
            continue
        path = task.path
        if empty and len(empty) == seen and skipped is not None and not _declares_expectations(path):
            skipped.append(Skipped(path, Why.NO_KERNEL))
        else:  # declared to hold a kernel, or compiled one at other counts
            for o in empty:
                yield error_result(stem(path), path, 0, o.devices, o.nothing_to_check, engine)
        empty, seen = [], 0


def _declares_expectations(path: str) -> bool:
    from semcheck.run import expectations

    try:
        return bool(expectations.declarations_for(path))
    except expectations.ExpectationError:
        return True  # a malformed declaration still says the file is meant to be checked


class JaxVersionWarning(UserWarning):
    """This JAX is not one semcheck was tested with (semcheck/jax_compat.py)."""


def _notice_jax_version() -> None:
    from semcheck import jax_compat

    notice = jax_compat.notice_once()
    if notice:
        warnings.warn(notice, JaxVersionWarning, stacklevel=3)


def verify(fn: Callable, *example_args, devices: int | None = None, tpu_cores: int | None = None,
           engine: str = "auto", budget: Budget | None = None, assume: Iterable[Assumption] = (),
           cores_enter_together: bool = True, progress: ProgressFn | None = None, **options) -> list[Result]:
    """Check every Pallas kernel (TPU or Mosaic GPU) that `fn(*example_args)` calls, in this process.

    `fn` is traced with `jax.make_jaxpr`; its kernels must run inside `jax.shard_map`, whose
    mesh decides the devices. It is then run once on `example_args` (a fresh `jax.jit`, each
    kernel replaced by zeros) so that values the kernels compute from their operands
    (routing, counts) are taken from those arguments, as for a script (docs/data-evaluation.md). `devices`, when given, is the device count the caller expects:
    semcheck checks the process has that many JAX devices (set
    `XLA_FLAGS=--xla_force_host_platform_device_count=N` before importing jax, e.g. at the top
    of conftest.py) and that every kernel's mesh has that many. Returns one Result per kernel
    (two for a kernel with parallel grid dimensions: one and two TensorCores per device); a
    kernel that cannot be lowered gives a Result with verdict "error". `options` are
    `check_protocol`'s (`exhaustive=True`, `reduce=False`, ...).
    """
    check = CheckOptions.from_keywords(engine=engine, **options)  # an unknown one fails before tracing
    import jax

    from semcheck.frontends.capture import capture_function, lower_captures

    if devices is not None and jax.device_count() < devices:
        raise LoadError(
            f"semcheck.verify(devices={devices}): this process has only {jax.device_count()} "
            "JAX device(s)",
            hint=f"set XLA_FLAGS=--xla_force_host_platform_device_count={devices} before jax is "
            "imported (e.g. at the top of conftest.py), or check a script with `semcheck verify "
            "FILE --devices N`, which runs it in a subprocess with N devices",
        )
    _notice_jax_version()
    captures = capture_function(fn, *example_args, operand_values=True)
    if not captures:
        raise LoadError(
            f"{getattr(fn, '__name__', fn)!s} calls no Pallas kernel (pl.pallas_call, pl.kernel or plgpu.kernel)",
            hint="pass the function that calls the kernel inside jax.shard_map",
        )
    protocols, errors = lower_captures(captures, tpu_cores=tpu_cores)
    for protocol in protocols:
        if devices is not None and protocol.devices != devices:
            raise LoadError(
                f"semcheck.verify(devices={devices}): kernel {protocol.name} runs on a mesh of "
                f"{protocol.devices} device(s)",
                protocol.loc,
                hint="build the mesh from jax.devices()[:devices]",
            )
    return check_loaded(
        [*protocols, *(e.to_load_error() for e in errors)],
        lambda protocol: check_one(protocol, check, budget=budget, progress=progress, assume=assume,
                                   cores_enter_together=cores_enter_together),
        lambda error: load_error_result(error.loc.file if error.loc else "", 0, error, engine),
    )
