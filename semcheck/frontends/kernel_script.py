"""Kernel scripts: run the user's file and capture its Pallas kernels (TPU and Mosaic GPU) (see frontends/capture.py).

Returns one Protocol per captured kernel (two for a kernel with parallel grid dimensions:
one core and two), and a LoadError in place of each kernel that cannot be lowered, so the
other kernels of the file are still checked.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable

from semcheck.errors import LoadError, NothingToCheck
from semcheck.ir import Loc, Protocol, display_path
from semcheck.records import record

if TYPE_CHECKING:  # the capture imports JAX's machinery: only its record's name is needed here
    from semcheck.frontends.capture import MissingModule


@record(frozen=True)
class CaptureTimes:
    """How a script's capture went, for the CLI's capture line (run.checks.LoadReport)."""

    phases: dict[str, float]  # seconds of each phase: jax import, script, lowering
    kernels: int  # kernels captured
    kept: bool = False  # served from the capture cache: `phases` are those of the capture that made it


OnPhases = Callable[[CaptureTimes], None]


def load(path: str, devices: int, *, capture_timeout: float | None = None, assumed: tuple[str, ...] = (),
         on_phases: OnPhases | None = None) -> list[Protocol | LoadError]:
    """`capture_timeout`: seconds the script may run; `assumed`: the input names the caller
    bounds (so the capture does not ask for them)."""
    from semcheck.frontends import capture_cache

    outcome = capture_cache.capture(path, devices, timeout=capture_timeout, assumed=tuple(assumed))
    if on_phases is not None:
        on_phases(CaptureTimes(dict(outcome.seconds), outcome.captured, outcome.kept))
    _reassume(outcome.assumptions)
    if not outcome.protocols and not outcome.errors and outcome.timed_out and capture_timeout is not None:
        from semcheck.engines.budget import BudgetExceeded
        from semcheck.kinds import StoppedBy

        # The check's own time budget ended the script: no verdict, rather than an error.
        raise BudgetExceeded(
            f"time budget ran out while running {path} with {devices} devices, before it compiled "
            "any Pallas kernel",
            StoppedBy.TIME,
            notes=(_where_stopped(capture_timeout, outcome.script_error_loc),),
        )
    if not outcome.protocols and not outcome.errors:
        # A script that ended itself (sys.exit(0) too) before its kernel is an error, never a
        # file with nothing to check.
        why = outcome.script_error or getattr(outcome, "exited", None)
        error = LoadError if why else NothingToCheck
        raise error(
            _nothing_captured(path, devices, why),
            outcome.script_error_loc or Loc(path, 0),
            hint=_missing_module_hint(outcome.missing_module) if outcome.missing_module else (
                _rerun_hint(path, devices) if outcome.script_error else _HINT),
        )
    notes = []
    if outcome.script_error:
        notes.append(
            f"{outcome.script_error}, after semcheck had captured {outcome.captured} kernel(s); "
            "they are checked anyway (semcheck returns zeros from captured kernels, so checks "
            "on their results can fail)"
        )
    items: list[Protocol | LoadError] = []
    for protocol in outcome.protocols:
        extra = list(notes)  # a mesh smaller than `devices` is a warning (api.mesh_smaller_warning)
        items.append(dataclasses.replace(protocol, notes=protocol.notes + tuple(extra)) if extra else protocol)
    for kernel_error in outcome.errors:
        error = kernel_error.to_load_error()
        if notes:
            # A kernel that failed to lower says so too: values it lacks may be missing only
            # because the script stopped before the kernel ran (a timeout).
            error.prefixes = [dataclasses.replace(p, notes=p.notes + tuple(notes)) for p in error.prefixes]
            if outcome.timed_out:
                error.message = f"{error.message} ({outcome.script_error})"
        items.append(error)
    return items


def _reassume(made_by_the_script) -> None:
    """The script ran in the capture subprocess; its `semcheck.assume` calls count here, in
    the load that `frontends.load` is collecting."""
    from semcheck.passes import assumptions

    for a in made_by_the_script:
        assumptions.record(a)


_HINT = (
    "semcheck runs the file as `python FILE` with N CPU devices and captures each "
    "pl.pallas_call / pl.kernel when JAX compiles it: build the mesh from jax.devices(), "
    "wrap the kernel in jax.shard_map, and call it (e.g. jax.jit(f)(x)) when the file runs "
    "as __main__"
)


def _rerun_hint(path: str, devices: int) -> str:
    """The script itself failed (it raised, or exited non-zero): how to run it as semcheck did,
    to see the whole traceback; how to write a kernel script is beside the point."""
    return ("the script fails when run as semcheck runs it; to see the whole traceback, run "
            f"`XLA_FLAGS=--xla_force_host_platform_device_count={devices} JAX_PLATFORMS=cpu "
            f"python {display_path(path)}`")


def _missing_module_hint(missing: MissingModule) -> str:
    """The script imports what the environment semcheck runs in does not have: semcheck runs
    the script with its own Python, so the script's dependencies must be installed there.
    When a package above the module did import, installing that package is not the answer:
    the copy the script found lacks the module."""
    import sys

    if missing.package is not None:
        return (f"`{missing.package}` was found at {missing.package_dir}, but it has no `{missing.name}`: "
                f"the script imports a module that copy of `{missing.package}` lacks (add it there, or "
                f"put a complete `{missing.package}` first on the script's path)")
    top = missing.name.split(".")[0]
    return (f"semcheck runs the script with its own Python ({sys.executable}), where `{top}` is not "
            f"installed: install the script's dependencies there, e.g. `{sys.executable} -m pip install "
            f"{top}` (the package's name on PyPI may differ)")


def _where_stopped(seconds: float, loc: Loc | None) -> str:
    """What the script was doing when its time ran out, and how to give it longer."""
    import linecache

    where = ""
    if loc is not None:
        source = linecache.getline(loc.file, loc.line).strip()
        where = f", while it ran line {loc.line} of {loc.file}" + (f": {source}" if source else "")
    return (f"semcheck stopped the script after {seconds:.1f} s, the time left of this check's time "
            f"budget{where}, before it compiled any Pallas kernel; a script that needs longer to reach "
            "its kernels needs a larger budget: --timeout S (or SEMCHECK_TIMEOUT)")


def _nothing_captured(path: str, devices: int, script_error: str | None) -> str:
    if script_error:
        return f"{script_error} before any Pallas kernel was compiled (ran with {devices} devices)"
    return (
        f"{path} ran to completion with {devices} devices without compiling any Pallas "
        "kernel (pl.pallas_call, pl.kernel, pl.core_map or plgpu.kernel)"
    )
