"""A sweep: every (file, device count) of a `semcheck verify` run is one task (capture or
load the file at that count, then check each of its kernels), run one after the other, on
a pool of local worker processes (`-j N`), or on a Ray cluster (`--executor ray`).

Whatever runs the tasks, the Results come back in the order a serial run makes them (task
by task, in the order of the files and device counts given), so every report is the same;
only the time fields differ. A task that fails where it runs (a crashed worker, a lost
node, a bug) is an error Result for that file and device count, never a lost one.

Workers run each task in the working directory the sweep started in, so relative paths
and the paths in messages read as in a serial run; a Ray worker therefore needs the files
at the same paths (one machine, a shared filesystem, or the same checkout everywhere).
"""

from __future__ import annotations

import enum
import os
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable

from semcheck.assumptions import Assumption, covers
from semcheck.engines.budget import Budget, ProgressFn
from semcheck.result import Result

if TYPE_CHECKING:
    from semcheck.checks import LoadReport
    from semcheck.frontends import Classification, LoadError
    from semcheck.ir import Loc

ProgressFor = Callable[[str, int], "ProgressFn | None"]


class Executor(str, enum.Enum):
    LOCAL = "local"  # this machine: serial with -j 1, else a pool of worker processes
    RAY = "ray"


@dataclass(frozen=True)
class SweepOptions:
    """How every check of the sweep runs: what `semcheck verify`'s flags say."""

    engine: str = "auto"
    budget: Budget | None = None
    assume: tuple[Assumption, ...] = ()
    invocations: int = 1
    reduce: bool = True
    symmetry: bool = True  # rotations of the device axis (engines/explicit/symmetry.py), when reducing
    split: bool = True
    unroll: int | None = None
    capture_timeout: float | None = None  # seconds a file may take to load (capture, model())
    cores_enter_together: bool = True  # the reading of core entry (semcheck/core_entry.py)
    exhaustive: bool = False  # every finding, not only the first counterexample (engines.check)

    def check_options(self) -> dict:
        options: dict[str, bool | int] = {"reduce": self.reduce, "split": self.split,
                                          "cores_enter_together": self.cores_enter_together,
                                          "exhaustive": self.exhaustive}
        if not self.symmetry:
            options["symmetry"] = False
        if self.unroll is not None:
            options["unroll"] = self.unroll
        return options


@dataclass(frozen=True)
class Task:
    index: int  # position in the serial order
    path: str  # as the user gave it (relative to `cwd`)
    devices: int
    options: SweepOptions
    cwd: str
    classification: "Classification | None" = None  # how the file reads (model or kernel script)
    file_error: "LoadError | None" = None  # the file cannot be read as Python: this one task says so


@dataclass
class Plan:
    tasks: list[Task]
    skipped: list  # frontends.Skipped: what the folder walk left out


@dataclass
class TaskOutcome:
    index: int
    results: list[Result]
    # For --assume's name check: how many kernels the file gave, and the names of their inputs.
    loaded: int = 0
    input_names: frozenset[str] = field(default_factory=frozenset)
    load: "LoadReport | None" = None  # how loading went (a capture line)
    devices: int = 0
    nothing_to_check: str | None = None  # the script ran and compiled no kernel: why


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def plan(paths: Iterable[str], devices: Iterable[int], options: SweepOptions) -> Plan:
    """One task per (file, device count), files in walk order. Each file is read once here:
    one that is not Python gets a single task that reports it."""
    from semcheck.frontends import LoadError, classify, walk

    cwd = os.getcwd()
    walked = walk(list(paths))
    counts = list(devices)
    tasks: list[Task] = []
    for path in walked.files:
        try:
            classification = classify(path)
        except LoadError as e:
            tasks.append(Task(len(tasks), path, counts[0] if counts else 0, options, cwd, file_error=e))
            continue
        for n in counts:
            tasks.append(Task(len(tasks), path, n, options, cwd, classification))
    return Plan(tasks, walked.skipped)


def run(tasks: list[Task], **how) -> list[Result]:
    """Every task's Results, in task order (see `iterate`)."""
    return [r for outcome in iterate(tasks, **how) for r in outcome.results]


def iterate(tasks: list[Task], *, jobs: int = 1, executor: Executor = Executor.LOCAL,
            ray_address: str | None = None, progress_for: ProgressFor | None = None,
            on_done: Callable[[Task, TaskOutcome], None] | None = None,
            on_load: Callable[["LoadReport"], None] | None = None):
    """Every task's outcome, in task order: one by one as they finish when run here, all at
    the end from a pool or a cluster. `progress_for` (live progress of each check) applies
    only to tasks run in this process; `on_done` is told of each finished task as it
    finishes, in whatever order that is, and `on_load` of how its file loaded."""
    if on_load is not None:
        told = on_done

        def on_done(task: Task, outcome: TaskOutcome) -> None:
            if outcome.load is not None:
                on_load(outcome.load)
            if told is not None:
                told(task, outcome)

    if executor is Executor.RAY:
        from semcheck import sweep_ray

        outcomes = sweep_ray.run(tasks, address=ray_address, on_done=on_done)
    elif jobs <= 1 or len(tasks) <= 1:
        # One by one, so an interrupted run keeps what finished; with --assume the names are
        # checked (after every task) before any outcome is handed on.
        assumed = bool(tasks) and bool(tasks[0].options.assume)
        outcomes = []
        for task in tasks:
            outcome = run_task_safely(task, progress_for)
            outcomes.append(outcome)
            if on_done:
                on_done(task, outcome)
            if not assumed:
                yield outcome
        if not assumed:
            return
    else:
        finished: dict[int, TaskOutcome] = {}
        try:
            outcomes = _run_in_processes(tasks, jobs, on_done, finished)
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: what finished, for the partial report
            yield from sorted(finished.values(), key=lambda o: o.index)
            raise
    outcomes.sort(key=lambda o: o.index)
    check_assumed_names(tasks, outcomes)
    yield from outcomes


def _run_in_processes(tasks: list[Task], jobs: int, on_done, outcomes: dict[int, TaskOutcome]) -> list[TaskOutcome]:
    """Every task's outcome, from a pool of `jobs` workers; `outcomes` fills as they finish.
    An interrupt (Ctrl-C, SIGTERM, SIGHUP: a KeyboardInterrupt here) kills every worker and
    what it runs at once, rather than waiting for the tasks under way."""
    # The pool's modules (multiprocessing, sockets) are imported only when a sweep uses one.
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    context = _process_context()
    # The workers' captures share one capture server: JAX is imported once, not per worker.
    server = _capture_server_address(tasks)

    def pool(workers: int):
        return _stopped_on_interrupt(ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                                         initializer=_start_worker, initargs=(server,)))

    orphans: list[Task] = []  # tasks of a pool that broke when some worker of it died

    def finish(task: Task, outcome: TaskOutcome) -> None:
        outcomes[task.index] = outcome
        if on_done:
            on_done(task, outcome)

    with pool(min(jobs, len(tasks))) as workers:
        futures = {workers.submit(run_task_safely, task): task for task in tasks}
        for future in as_completed(futures):
            try:
                finish(futures[future], future.result())
            except BrokenProcessPool:
                orphans.append(futures[future])
            except Exception as e:
                finish(futures[future], failed(futures[future], f"the worker process running it failed: "
                                                                 f"{type(e).__name__}: {e}"))
    # Run each orphan again in a worker of its own: only a task that kills its worker fails.
    for task in sorted(orphans, key=lambda t: t.index):
        with pool(1) as alone:
            try:
                outcome = alone.submit(run_task_safely, task).result()
            except Exception as e:
                outcome = failed(task, "the worker process running it failed (it died: killed, out of "
                                       f"memory, or a crash in native code): {type(e).__name__}")
        finish(task, outcome)
    return [outcomes[task.index] for task in tasks]


def _capture_server_address(tasks: list[Task]) -> str | None:
    """The capture server the workers share, started here when a task captures a script."""
    from semcheck.frontends import FileKind

    if not any(t.classification is not None and t.classification.kind is FileKind.KERNEL for t in tasks):
        return None
    from semcheck.frontends.capture_process import capture_server_address

    return capture_server_address()


def _start_worker(capture_server: str | None) -> None:
    """In each worker: use the sweep's capture server, and end (with what the worker runs)
    when the process that started it is gone, even if that one was killed outright."""
    from semcheck.frontends import capture_server as server
    from semcheck.frontends import processes

    if capture_server:
        os.environ[server.ADDRESS_ENVIRONMENT] = capture_server
    processes.exit_with_parent()


class _stopped_on_interrupt:
    """A pool as a context: on the way out of an interrupt, its workers (and what they run)
    are killed and its queued tasks dropped, instead of waiting for them to finish."""

    def __init__(self, pool):
        self.pool = pool

    def __enter__(self):
        return self.pool

    def __exit__(self, kind, error, traceback):
        if kind is None or issubclass(kind, Exception):
            self.pool.shutdown(wait=True)
            return
        from semcheck.frontends import processes

        workers = list((getattr(self.pool, "_processes", None) or {}).values())
        for worker in workers:
            processes.kill_tree(worker.pid)
        self.pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.join(timeout=5)


def _process_context():
    """fork where it is safe (no other threads, JAX not loaded: workers start at once, with
    every module already imported); else forks of a clean server process that imported
    semcheck once (forkserver, reused by every pool of this process); else a fresh
    interpreter per worker."""
    import multiprocessing
    import sys
    import threading

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1 and "jax" not in sys.modules:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["semcheck.sweep", "semcheck.api", "semcheck.engines"])
        return context
    return multiprocessing.get_context("spawn")


def run_task_safely(task: Task, progress_for: ProgressFor | None = None) -> TaskOutcome:
    """`run_task`, with anything it raises turned into an error Result (a worker must
    always send an answer back)."""
    from semcheck.assumptions import AssumptionError

    try:
        return run_task(task, progress_for)
    except AssumptionError:
        raise
    except Exception as e:
        detail = traceback.format_exception_only(type(e), e)[-1].strip()
        return failed(task, f"internal error while checking it: {detail}")


def failed(task: Task, message: str) -> TaskOutcome:
    from semcheck.checks import error_result

    kernel = os.path.splitext(os.path.basename(task.path))[0]
    return TaskOutcome(task.index, [error_result(kernel, task.path, 0, task.devices, message, task.options.engine)])


def run_task(task: Task, progress_for: ProgressFor | None = None) -> TaskOutcome:
    """Load `task.path` at `task.devices` devices and check each of its kernels (of a kernel
    whose lowering stopped part-way, what its prefix decides). Loading is part of each
    check's time budget: the check's clock starts when its file begins to load."""
    import time

    from semcheck import assumptions
    from semcheck.checks import (
        LoadReport, _error_text, _load_error_result, _load_within, _out_of_budget_loading, _stem,
        check_protocol, error_result,
    )
    from semcheck.engines.budget import Budget, BudgetExceeded
    from semcheck.frontends import LoadError, NothingToCheck
    from semcheck.invocations import repeat
    from semcheck.prefix import prefix_result

    options = task.options
    budget = options.budget or Budget.from_env()
    path, n = task.path, task.devices
    if task.file_error is not None:  # not Python: one error for the file
        return TaskOutcome(task.index, [_load_error_result(path, n, task.file_error, options.engine)], devices=n)
    phases: dict[str, float] = {}
    captured = [1]

    def heard(seconds: dict[str, float], kernels: int) -> None:
        phases.update(seconds)
        captured[0] = kernels

    with _working_directory(task.cwd):
        started = time.monotonic()
        progress = progress_for(_stem(path), n) if progress_for else None
        try:
            file_budget = budget.started(started)
            if options.capture_timeout is not None and file_budget.deadline is not None:  # the caller's own limit on loading, if tighter
                from dataclasses import replace

                file_budget = replace(file_budget, deadline=min(file_budget.deadline, started + options.capture_timeout))
            loaded = _load_within(path, n, file_budget, progress, on_phases=heard,
                                  classification=task.classification,
                                  assumed=tuple(a.name for a in options.assume))
        except NothingToCheck as e:
            report = LoadReport(path, n, time.monotonic() - started, 0, phases, False)
            return TaskOutcome(task.index, [], load=report, devices=n, nothing_to_check=_error_text(e))
        except (LoadError, BudgetExceeded) as e:
            seconds = time.monotonic() - started
            result = (_load_error_result(path, n, e, options.engine) if isinstance(e, LoadError)
                      else _out_of_budget_loading(path, n, e.reason, options.engine, seconds))
            return TaskOutcome(task.index, [result], load=LoadReport(path, n, seconds, captured[0], phases, True))
        report = LoadReport(path, n, time.monotonic() - started, captured[0], phases, False)
        protocols = [q for p in loaded for q in (p.prefixes if isinstance(p, LoadError) else [p])]
        names = frozenset(inp.name for p in protocols for inp in p.inputs)
        check_budget = budget.started(started)
        results = []
        for item in loaded:
            stopped = item if isinstance(item, LoadError) else None
            if stopped is not None and not stopped.prefixes:  # one kernel of the file cannot be lowered
                # What its mesh has, as a lowered kernel's result says (the capture knows it).
                devices = stopped.devices or n
                error = _load_error_result(path, devices, stopped, options.engine)
                results.append(_noting_a_smaller_mesh(error, devices, n, stopped.loc))
                continue
            for protocol in stopped.prefixes if stopped is not None else [item]:
                try:
                    protocol = repeat(assumptions.apply(protocol, options.assume), options.invocations)
                except ValueError as e:
                    error = error_result(protocol.name, protocol.loc.file, protocol.loc.line,
                                         protocol.devices, str(e), options.engine)
                    results.append(_noting_a_smaller_mesh(error, protocol.devices, n, protocol.loc))
                    continue
                progress = progress_for(protocol.name, n) if progress_for else None
                result = check_protocol(protocol, engine=options.engine, budget=check_budget,
                                        progress=progress, **options.check_options())
                result.invocations = options.invocations
                if stopped is not None:  # lowering stopped part-way: what its prefix decides
                    result = prefix_result(result, protocol, _error_text(stopped), stopped.loc)
                results.append(_noting_a_smaller_mesh(result, protocol.devices, n, protocol.loc))
    return TaskOutcome(task.index, results, len(protocols), names, report, n)


def _noting_a_smaller_mesh(result: Result, mesh_devices: int, requested: int, loc: Loc | None) -> Result:
    """`result` with a warning when the kernel's mesh has fewer devices than the check was
    asked for (its result is of the mesh, not of `requested` devices), whatever its verdict."""
    from semcheck.checks import mesh_smaller_warning

    if mesh_devices < requested:
        result.violations.append(mesh_smaller_warning(mesh_devices, requested, loc))
    return result


def check_assumed_names(tasks: list[Task], outcomes: list[TaskOutcome]) -> None:
    """An `--assume` that names no input of any checked kernel is an error (a typo must not
    leave the full range in place). Nothing loaded at all: the load errors say why."""
    from semcheck.assumptions import AssumptionError

    if not tasks or not tasks[0].options.assume or not any(o.loaded for o in outcomes):
        return
    known = frozenset().union(*(o.input_names for o in outcomes))
    for a in tasks[0].options.assume:
        if not any(covers(a.name, name) for name in known):
            where = f"{a.loc}: " if a.loc else ""
            inputs = ", ".join(sorted(known)) or "none"
            raise AssumptionError(f"{where}assume {a}: there is no input named {a.name!r} in the "
                                  f"checked kernels and models (inputs: {inputs})")


class _working_directory:
    def __init__(self, path: str):
        self.path, self.previous = path, None

    def __enter__(self):
        if os.path.realpath(os.getcwd()) != os.path.realpath(self.path):
            self.previous = os.getcwd()
            os.chdir(self.path)

    def __exit__(self, *exc):
        if self.previous is not None:
            os.chdir(self.previous)
