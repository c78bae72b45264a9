"""Differential test against JAX's TPU interpreter (`interpret=pltpu.InterpretParams()`).

Each example script runs unchanged in a subprocess with TPU interpret mode forced on
(`pltpu.set_tpu_interpret_mode`), under a timeout, since the interpreter hangs forever on a
deadlock. For every example it can run, semcheck's verdict must agree with what it does:

* semcheck reports a hang (deadlock / unsatisfied_wait) <=> the interpreter hangs;
* semcheck says safe => the interpreter finishes;
* semcheck reports a bad device id <=> the interpreter fails on an out-of-range index;
* a leftover semaphore is not a hang: the interpreter finishes (it only prints a line, and in
  its default on_wait mode never even runs a copy nobody waits for).

Examples the interpreter rejects (non-decrementing waits, semaphore_read) must be rejected
with the documented message, and semcheck must have analyzed them anyway.

Kernels with parallel grid dimensions are compared on two TensorCores per device (the
interpreter's `num_cores_or_threads=2` against semcheck's megacore result). On one core the
interpreter shuffles parallel grid coordinates, while semcheck runs the grid in order as a
single-core chip does, so the two are not comparable there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.tpu_support import HANG_KINDS, MEGACORE, ROOT, config_of, example_paths, prefetch, results

DEVICE_COUNTS = (2, 4)
TIMEOUT = 30.0  # a run that has not finished by then hangs (the examples finish in ~3 s)

RUNNER = """
import json, runpy, sys
from jax.experimental.pallas import tpu as pltpu
pltpu.set_tpu_interpret_mode(pltpu.InterpretParams(**json.loads(sys.argv[2])))
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

REJECTED = {  # example -> what the interpreter says when it refuses the kernel
    "nondecrementing_poll.py": "Non-decrementing wait is not supported",
    "nondecrementing_poll_leftover.py": "Non-decrementing wait is not supported",
    "read_fast_path.py": "semaphore_read",
    "read_fast_path_race.py": "semaphore_read",
}


def _has_parallel_grid(path: str) -> bool:
    return any(config_of(r) == MEGACORE for r in results(path, 2))


def interpreter_runs():
    """(example, devices, interpreter params, semcheck config to compare with)."""
    runs = []
    for path in example_paths():
        for n in DEVICE_COUNTS:
            if _has_parallel_grid(path):
                runs.append((path, n, {"num_cores_or_threads": 2}, MEGACORE))
            else:
                runs.append((path, n, {}, ""))
    return runs


_outcomes: dict = {}


def run_interpreter(path: str, devices: int, params: dict) -> tuple[str, str]:
    """("finished" | "hung" | "failed", output tail)."""
    import json

    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = ROOT
    try:
        proc = subprocess.run(
            [sys.executable, "-c", RUNNER, path, json.dumps(params)],
            env=env, capture_output=True, text=True, timeout=TIMEOUT, cwd=os.path.dirname(path),
        )
    except subprocess.TimeoutExpired:
        return "hung", ""
    text = (proc.stdout or "") + (proc.stderr or "")
    return ("finished" if proc.returncode == 0 else "failed"), text[-4000:]


@pytest.fixture(scope="module")
def outcomes():
    prefetch(example_paths(), DEVICE_COUNTS)
    runs = interpreter_runs()
    # Hung runs sleep on condition variables, so several can wait side by side.
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = pool.map(lambda r: run_interpreter(r[0], r[1], r[2]), runs)
        return {(path, n): (config, outcome) for (path, n, _p, config), outcome in zip(runs, done)}


@pytest.mark.slow
@pytest.mark.parametrize("devices", DEVICE_COUNTS)
@pytest.mark.parametrize("path", example_paths(), ids=os.path.basename)
def test_semcheck_agrees_with_the_tpu_interpreter(outcomes, path, devices):
    config, (outcome, output) = outcomes[(path, devices)]
    [result] = [r for r in results(path, devices) if config_of(r) == config]
    assert result.error is None, result.error
    kinds = {v.kind for v in result.errors}
    name = os.path.basename(path)
    if name in REJECTED:
        assert outcome == "failed" and REJECTED[name] in output, (outcome, output)
        return
    if kinds & HANG_KINDS:
        assert outcome == "hung", (kinds, outcome, output)
    elif "invalid_device_id" in kinds:
        assert outcome == "failed" and "out of bounds" in output, (outcome, output)
    else:
        assert outcome == "finished", (kinds, outcome, output)
        if not kinds:
            assert result.verdict.value == "safe"


@pytest.mark.slow
def test_the_differential_covers_safe_and_hanging_kernels(outcomes):
    seen = {outcome for _config, (outcome, _output) in outcomes.values()}
    assert {"finished", "hung", "failed"} <= seen


@pytest.mark.slow
def test_the_discharge_interpreter_rejects_the_remote_signal_handshake_that_semcheck_checks():
    """`interpret=True` (the discharge interpreter) cannot run a remote signal at all."""
    path = os.path.join(os.path.dirname(example_paths()[0]), "remote_handshake.py")
    runner = RUNNER.replace(
        "pltpu.set_tpu_interpret_mode(pltpu.InterpretParams(**json.loads(sys.argv[2])))",
        "from jax._src import config; config.pallas_tpu_interpret_mode_context_manager.set_global(True)",
    )
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", runner, path, "{}"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0 and "Remote signal not implemented" in proc.stderr
    assert [r.verdict.value for r in results(path, 2)] == ["safe"]
