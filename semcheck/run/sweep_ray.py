"""`--executor ray`: the sweep's tasks as Ray tasks, one CPU each, results streamed back
as they finish (and put back in serial order by `semcheck.run.sweep`, which imports this
module only when asked to run there; both take the task types from `semcheck.run.tasks`).

Where the cluster is: `--ray-address ADDR` (e.g. `ray://head:10001`, or `auto` for the
cluster this machine belongs to), else `RAY_ADDRESS`, else a Ray already initialized in
this process (a test or notebook), else a local cluster started for the run and stopped
after it. Workers need semcheck (and JAX, for kernel scripts) installed, and the checked
files at the same paths as here.

A task that fails on a worker (the worker dies, a node is lost, the task cannot be
unpickled) is an error Result for that file and device count, never a lost one.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

from semcheck.run.tasks import Task, TaskOutcome, failed, run_task_safely


class RayUnavailable(Exception):
    """Ray is not installed, or the cluster cannot be reached."""


def run(tasks: list[Task], *, address: str | None = None,
        on_done: Callable[[Task, TaskOutcome], None] | None = None) -> list[TaskOutcome]:
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--executor ray needs Ray: pip install 'semcheck[ray]'") from None
    started_here = False
    if not ray.is_initialized():
        options: dict[str, Any] = {"address": address, "logging_level": logging.WARNING}
        if address is None and not os.environ.get("RAY_ADDRESS"):
            options["include_dashboard"] = False  # a local cluster just for this run
        try:
            ray.init(**options)
        except Exception as e:
            raise RayUnavailable(f"cannot start or reach the Ray cluster"
                                 f"{' at ' + address if address else ''}: {type(e).__name__}: {e}") from None
        started_here = True
    try:
        check = ray.remote(num_cpus=1, max_retries=1)(run_task_safely)
        tasks_of = {check.remote(task): task for task in tasks}
        pending = list(tasks_of)
        outcomes: dict[int, TaskOutcome] = {}
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                task = tasks_of[ref]
                try:
                    outcome = ray.get(ref)
                except Exception as e:  # RayTaskError, WorkerCrashedError, NodeDiedError, ...
                    outcome = failed(task, f"the Ray task checking it failed: {type(e).__name__}: "
                                           f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}")
                outcomes[task.index] = outcome
                if on_done:
                    on_done(task, outcome)
        return [outcomes[task.index] for task in tasks]
    finally:
        if started_here:
            ray.shutdown()
