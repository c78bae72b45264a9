"""One task of a sweep: load a file at one device count and check each of its kernels.

The types a sweep's tasks are made of (`SweepOptions`, `Task`, `TaskOutcome`) and the
function that runs one (`run_task_safely`), wherever it runs: in this process, in a worker
of a local pool (`semcheck.run.sweep`) or on a Ray worker (`semcheck.run.sweep_ray`). Both
executors import them from here, so neither imports the other.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import field
from typing import TYPE_CHECKING, Callable

from semcheck.engines.budget import Budget, ProgressFn
from semcheck.engines.options import CheckOptions
from semcheck.passes.assumptions import Assumption
from semcheck.ir import Protocol
from semcheck.records import record
from semcheck.result import Result

if TYPE_CHECKING:
    from semcheck.frontends import Classification, LoadError
    from semcheck.ir import Loc
    from semcheck.run.checks import LoadReport

ProgressFor = Callable[[str, int], "ProgressFn | None"]


@record(frozen=True)
class SweepOptions:
    """How every check of the sweep runs: what `semcheck verify`'s flags say."""

    check: CheckOptions = CheckOptions()  # the engine and its options (engines/options.py)
    budget: Budget | None = None
    assume: tuple[Assumption, ...] = ()
    invocations: int = 1
    capture_timeout: float | None = None  # seconds a file may take to load (capture, model())
    cores_enter_together: bool = True  # the reading of core entry (semcheck/passes/core_entry.py)

    @property
    def engine(self) -> str:
        return self.check.engine


@record(frozen=True)
class Task:
    index: int  # position in the serial order
    path: str  # as the user gave it (relative to `cwd`)
    devices: int
    options: SweepOptions
    cwd: str
    classification: "Classification | None" = None  # how the file reads (model or kernel script)
    file_error: "LoadError | None" = None  # the file cannot be read as Python: this one task says so



@record
class TaskOutcome:
    index: int
    results: list[Result]
    # For --assume's name check: how many kernels the file gave, and the names of their inputs.
    loaded: int = 0
    input_names: frozenset[str] = field(default_factory=frozenset)
    load: "LoadReport | None" = None  # how loading went (a capture line)
    devices: int = 0
    nothing_to_check: str | None = None  # the script ran and compiled no kernel: why



def run_task_safely(task: Task, progress_for: ProgressFor | None = None) -> TaskOutcome:
    """`run_task`, with anything it raises turned into an error Result (a worker must
    always send an answer back)."""
    from semcheck.passes.assumptions import AssumptionError

    try:
        return run_task(task, progress_for)
    except AssumptionError:
        raise
    except Exception as e:
        detail = traceback.format_exception_only(type(e), e)[-1].strip()
        return failed(task, f"internal error while checking it: {detail}")


def failed(task: Task, message: str) -> TaskOutcome:
    from semcheck.run.checks import error_result

    kernel = os.path.splitext(os.path.basename(task.path))[0]
    return TaskOutcome(task.index, [error_result(kernel, task.path, 0, task.devices, message, task.options.engine)])


def run_task(task: Task, progress_for: ProgressFor | None = None) -> TaskOutcome:
    """Load `task.path` at `task.devices` devices and check each of its kernels (of a kernel
    whose lowering stopped part-way, what its prefix decides). Loading is part of each
    check's time budget: the check's clock starts when its file begins to load."""
    import time

    from semcheck.passes import assumptions
    from semcheck.run.checks import (
        LoadReport, check_loaded, check_one, error_result, error_text, load_error_result, load_within,
        out_of_budget_loading, stem,
    )
    from semcheck.engines.budget import Budget, BudgetExceeded
    from semcheck.frontends import LoadError, NothingToCheck
    from semcheck.passes.invocations import repeat

    options = task.options
    budget = options.budget or Budget.from_env()
    path, n = task.path, task.devices
    if task.file_error is not None:  # not Python: one error for the file
        return TaskOutcome(task.index, [load_error_result(path, n, task.file_error, options.engine)], devices=n)
    heard: list = []  # the capture's CaptureTimes, once the script's load reports them

    def load_report(seconds: float, failed: bool, kernels: int | None = None) -> LoadReport:
        times = heard[-1] if heard else None
        if kernels is None:
            kernels = times.kernels if times else 1
        return LoadReport(path, n, seconds, kernels, dict(times.phases) if times else {}, failed,
                          kept=bool(times and times.kept))

    with _working_directory(task.cwd):
        started = time.monotonic()
        progress = progress_for(stem(path), n) if progress_for else None
        try:
            file_budget = budget.started(started)
            if options.capture_timeout is not None and file_budget.deadline is not None:  # the caller's own limit on loading, if tighter
                from dataclasses import replace

                file_budget = replace(file_budget, deadline=min(file_budget.deadline, started + options.capture_timeout))
            loaded = load_within(path, n, file_budget, progress, on_phases=heard.append,
                                  classification=task.classification,
                                  assumed=tuple(a.name for a in options.assume))
        except NothingToCheck as e:
            report = load_report(time.monotonic() - started, False, kernels=0)
            return TaskOutcome(task.index, [], load=report, devices=n, nothing_to_check=error_text(e))
        except (LoadError, BudgetExceeded) as e:
            seconds = time.monotonic() - started
            result = (load_error_result(path, n, e, options.engine) if isinstance(e, LoadError)
                      else out_of_budget_loading(path, n, e.reason, e.by, options.engine, seconds, e.notes))
            return TaskOutcome(task.index, [result], load=load_report(seconds, True))
        report = load_report(time.monotonic() - started, False)
        protocols = [q for p in loaded for q in (p.prefixes if isinstance(p, LoadError) else [p])]
        names = frozenset(inp.name for p in protocols for inp in p.inputs)
        check_budget = budget.started(started)
        def unlowered(stopped: LoadError) -> Result:  # what its mesh has, as a capture knows it
            devices = stopped.devices or n
            return _noting_a_smaller_mesh(load_error_result(path, devices, stopped, options.engine), devices, n,
                                          stopped.loc)

        def check(protocol: Protocol) -> Result:
            try:
                protocol = repeat(assumptions.apply(protocol, options.assume), options.invocations)
            except ValueError as e:
                error = error_result(protocol.name, protocol.loc.file, protocol.loc.line,
                                     protocol.devices, str(e), options.engine)
                return _noting_a_smaller_mesh(error, protocol.devices, n, protocol.loc)
            progress = progress_for(protocol.name, n) if progress_for else None
            result = check_one(protocol, options.check, budget=check_budget, progress=progress,
                               cores_enter_together=options.cores_enter_together)
            result.invocations = options.invocations
            return _noting_a_smaller_mesh(result, protocol.devices, n, protocol.loc)

        results = check_loaded(loaded, check, unlowered)
    return TaskOutcome(task.index, results, len(protocols), names, report, n)


def _noting_a_smaller_mesh(result: Result, mesh_devices: int, requested: int, loc: Loc | None) -> Result:
    """`result` with a warning when the kernel's mesh has fewer devices than the check was
    asked for (its result is of the mesh, not of `requested` devices), whatever its verdict."""
    from semcheck.run.checks import mesh_smaller_warning

    if mesh_devices < requested:
        result.violations.append(mesh_smaller_warning(mesh_devices, requested, loc))
    return result


class _working_directory:
    def __init__(self, path: str):
        self.path = path
        self.previous: str | None = None

    def __enter__(self):
        if os.path.realpath(os.getcwd()) != os.path.realpath(self.path):
            self.previous = os.getcwd()
            os.chdir(self.path)

    def __exit__(self, *exc):
        if self.previous is not None:
            os.chdir(self.previous)
