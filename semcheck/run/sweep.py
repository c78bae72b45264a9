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
from typing import TYPE_CHECKING, Callable, Iterable

from semcheck.passes.assumptions import covers
from semcheck.records import record
from semcheck.result import Result
from semcheck.run.tasks import ProgressFor, SweepOptions, Task, TaskOutcome, failed, run_task_safely

if TYPE_CHECKING:
    from semcheck.run.checks import LoadReport


class Executor(str, enum.Enum):
    LOCAL = "local"  # this machine: serial with -j 1, else a pool of worker processes
    RAY = "ray"


@record
class Plan:
    tasks: list[Task]
    skipped: list  # frontends.Skipped: what the folder walk left out


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
        from semcheck.run import sweep_ray

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
        manager = getattr(self.pool, "_executor_manager_thread", None)  # shutdown() forgets it
        for worker in workers:
            processes.kill_tree(worker.pid)
        self.pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.join(timeout=5)
        # The pool's thread, seeing its workers dead, closes its wake-up pipe. CPython 3.11's
        # exit hook for pools writes to that pipe without the pool's lock: were the thread
        # still closing it as this process exits, the hook prints "OSError: [Errno 9] Bad file
        # descriptor" after our last line. Once the thread has ended, the hook does nothing.
        if manager is not None:
            manager.join(timeout=10)


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
        context.set_forkserver_preload(["semcheck.run.sweep", "semcheck.api", "semcheck.engines"])
        return context
    return multiprocessing.get_context("spawn")


def check_assumed_names(tasks: list[Task], outcomes: list[TaskOutcome]) -> None:
    """An `--assume` that names no input of any checked kernel is an error (a typo must not
    leave the full range in place). Nothing loaded at all: the load errors say why."""
    from semcheck.passes.assumptions import AssumptionError

    if not tasks or not tasks[0].options.assume or not any(o.loaded for o in outcomes):
        return
    known = frozenset().union(*(o.input_names for o in outcomes))
    for a in tasks[0].options.assume:
        if not any(covers(a.name, name) for name in known):
            where = f"{a.loc}: " if a.loc else ""
            inputs = ", ".join(sorted(known)) or "none"
            raise AssumptionError(f"{where}assume {a}: there is no input named {a.name!r} in the "
                                  f"checked kernels and models (inputs: {inputs})")
