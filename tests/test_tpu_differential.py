"""Differential test against JAX's TPU interpreter (`interpret=pltpu.InterpretParams()`).

Each example script runs unchanged in a process of its own (forked from one that imported
JAX once, tests/interpreter_forks.py) with TPU interpret mode forced on
(`pltpu.set_tpu_interpret_mode`), watched, since the interpreter hangs forever on a
deadlock: a run is hung once its CPU time stops growing (a deadlocked wait sleeps on a
condition variable) while one of its threads is in a semaphore wait, so a busy machine slows
a run without making it look hung; a run whose CPU time stops with no thread in a semaphore
wait stalled in XLA's runtime and is made again (`STALLED_ATTEMPTS`). For every example it can run, semcheck's verdict must agree with what it does:

* semcheck reports a hang (deadlock / unsatisfied_wait) <=> the interpreter hangs;
* semcheck says safe => the interpreter finishes;
* semcheck reports a bad device id <=> the interpreter fails on an out-of-range index;
* semcheck reports a copy window outside its buffer (`invalid_region`) <=> the interpreter
  fails on an out-of-bounds read or write;
* semcheck reports a load or store outside its `.at[...]` view but inside its buffer
  (`invalid_region`, the examples of OUTSIDE_VIEW_ONLY) => the interpreter finishes: it
  composes the view's and the access's indexers into one range of the buffer and checks
  only that, so it touches the buffer past the view silently;
* semcheck reports a data race whose racy read sizes a later copy => the interpreter finishes,
  or, in a schedule that loses the race, fails on that copy's window, sized from its
  uninitialized memory (`RACE_FAILS_ON_UNINITIALIZED`);
* a leftover semaphore is not a hang: the interpreter finishes (it only prints a line, and in
  its default on_wait mode never even runs a copy nobody waits for).

Examples the interpreter rejects (non-decrementing waits, semaphore_read) must be rejected
with the documented message, and semcheck must have analyzed them anyway.

A remote signal or copy that arrives before its target entered the kernel
(`remote_before_entry`) is lost in semcheck's model, since entering allocates the target's
semaphores afresh, so a wait for it can hang there; the interpreter allocates every
device's semaphores before any device runs, so it neither sees the early arrival nor hangs.

Races: with `InterpretParams(detect_races=True)`, in both DMA execution modes and several
random seeds, every race the interpreter reports (it prints the two accesses' source lines)
must be one semcheck reports too (`test_every_race_the_interpreter_reports_...`).
The runner mends one assertion of JAX 0.10.2's race detector: a wait for 0 (a 0-byte copy's)
on a semaphore nothing signalled yet returns, as it does without race detection, instead of
asserting that the semaphore has a vector clock (`Semaphore.wait` in
jax/_src/pallas/mosaic/interpret/shared_memory.py). Whether a wait comes before any signal
depends on the interpreter's thread schedule, so unmended, kernels with 0-byte copies failed
in some runs and not others.

Kernels with parallel grid dimensions are compared on two TensorCores per device (the
interpreter's `num_cores_or_threads=2` against semcheck's megacore result). On one core the
interpreter shuffles parallel grid coordinates, while semcheck runs the grid in order as a
single-core chip does, so the two are not comparable there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests import interpreter_forks
from tests.tpu_support import (
    HANG_KINDS, MEGACORE, ROOT, config_of, device_counts, example_paths, made_once, prefetch, results, script_verdict,
)

DEVICE_COUNTS = (2, 4)
# The module's interpreter runs share one xdist worker (its fixtures are module-scoped), so
# they run side by side in its threads, one per core (at most 8: a run can take a GB), not
# two at a time while the other workers sit idle: on a CI machine of many cores they were
# the slow tier's whole tail (45 of its 55 minutes on 2 cores).
INTERPRETERS_AT_ONCE = max(2, min(os.cpu_count() or 2, 8))
# A run is hung when it used less than IDLE_CPU seconds of CPU in the last HUNG_AFTER seconds
# (a deadlocked interpreter: about 0.01 s; a live run on a loaded 2-core machine: seconds).
HUNG_AFTER = 15.0
IDLE_CPU = 0.3
GIVE_UP = 900.0  # wall seconds after which a run still computing is "timed out", never "hung"

# What the runner prints when the interpreter permuted a parallel grid dimension of two or
# more coordinates, the only use JAX 0.10.2 makes of `random_seed`
# (`_get_randomized_grid_coordinates` in jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py,
# never under a TensorCoreMesh).
SEED_DECIDES = "semcheck-test: random_seed permuted a parallel grid dimension"
RUNNER = """
import json, runpy, sys
from jax.experimental.pallas import tpu as pltpu
from jax._src.pallas.mosaic.interpret import interpret_pallas_call, shared_memory
SEED_DECIDES = "%s"

def mend_zero_waits(wait):
    # A wait for 0 passes at once. JAX 0.10.2's race detector then asserts that the semaphore
    # has a vector clock, which it has not if nothing signalled it yet (a 0-byte copy's wait
    # before the copy ran): there is no clock to import, so such a wait simply returns.
    def mended(self, value, global_core_id, **kwargs):
        if value == 0 and self.detect_races and self.clocks[int(global_core_id)] is None:
            return
        return wait(self, value, global_core_id, **kwargs)
    return mended

def counted(wait):
    # How many threads sit in a semaphore wait, written to the file the watcher names: a run
    # that stops using CPU with none of them is stalled in XLA's runtime, not hung on the
    # kernel's synchronization (every wait of the interpreter's kernels is a Semaphore.wait).
    def waiting(self, *args, **kwargs):
        blocked[0] += 1
        try:
            return wait(self, *args, **kwargs)
        finally:
            blocked[0] -= 1
    return waiting

def report_blocked(path):
    import time
    while True:
        with open(path, "w") as f:
            f.write(str(blocked[0]))
        time.sleep(0.5)

def noting_permutations(randomize):
    # JAX 0.10.2 uses `random_seed` only here, to permute the coordinates of parallel grid
    # dimensions: a run in which no permutation has two or more coordinates gives every
    # seed the same schedule, and says so by not printing SEED_DECIDES.
    def randomized(grid, *args, **kwargs):
        coordinates = randomize(grid, *args, **kwargs)
        if any(c.shape[0] > 1 for c in coordinates):
            print(SEED_DECIDES, file=sys.stderr, flush=True)
        return coordinates
    return randomized

randomizer = getattr(interpret_pallas_call, "_get_randomized_grid_coordinates", None)
if randomizer is None:  # another JAX: assume that the seed may decide the schedule
    print(SEED_DECIDES, file=sys.stderr, flush=True)
else:
    interpret_pallas_call._get_randomized_grid_coordinates = noting_permutations(randomizer)
blocked = [0]
shared_memory.Semaphore.wait = counted(mend_zero_waits(shared_memory.Semaphore.wait))
if len(sys.argv) > 3:
    import threading
    threading.Thread(target=report_blocked, args=(sys.argv[3],), daemon=True).start()
pltpu.set_tpu_interpret_mode(pltpu.InterpretParams(**json.loads(sys.argv[2])))
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
""" % SEED_DECIDES

REJECTED = {  # example -> what the interpreter says when it refuses the kernel
    "nondecrementing_poll.py": "Non-decrementing wait is not supported",
    "nondecrementing_poll_leftover.py": "Non-decrementing wait is not supported",
    "read_fast_path.py": "semaphore_read",
    "read_fast_path_race.py": "semaphore_read",
    "poll_arrivals.py": "semaphore_read",
    "poll_arrivals_miscounted.py": "semaphore_read",
    # the first kernel reads its count semaphore (as JAX's auto-assigned barrier test does)
    "handoff_shared_collective_id.py": "semaphore_read",
    "handoff_own_collective_ids.py": "semaphore_read",
    # JAX 0.10.2's interpreter implements device ids over mesh axes only, not a dict naming the
    # core axis of a TensorCoreMesh (interpret_pallas_call raises NotImplementedError).
    "core_local_barrier.py": "NotImplementedError: {'core'",
    # Programs whose kernels hand DMA semaphores on (out_specs in memory space SEMAPHORE): JAX
    # 0.10.2's interpreter has no initial value for a semaphore output (get_uninitialized_value
    # in jax/_src/pallas/mosaic/interpret/utils.py), and with uninitialized_memory="zero" it
    # fails on AbstractSemaphoreTyRules.full; semcheck is the only oracle for these.
    "async_remote_copy.py": "NotImplementedError: nan + dma_sem",
    "async_remote_copy_send_only.py": "NotImplementedError: nan + dma_sem",
    "async_remote_copy_nested_jit.py": "NotImplementedError: nan + dma_sem",
    "async_remote_copy_nested_jit_waits_twice.py": "NotImplementedError: nan + dma_sem",
}

# Examples whose only invalid_region is a load or store outside its `.at[...]` view and inside
# its buffer. JAX's TPU interpreter composes a view's and an access's indexers into one range
# of the buffer (`to_range` in jax/_src/pallas/mosaic/interpret/utils.py, 0.10.2 and 0.11.1)
# and checks only the buffer, so it writes past the view and finishes; semcheck reports it
# (docs/kinds/invalid_region.md says why), and here the interpreter must finish.
OUTSIDE_VIEW_ONLY = {
    "paged_append_straddles_page.py",  # the second row lands in the next physical page
}


# A racy read that the interpreter's schedule loses shows up as its uninitialized memory:
# int32 reads INT32_MAX (`get_uninitialized_value`, jax/_src/pallas/mosaic/interpret/utils.py).
# Where such a value sizes or places a later copy, the interpreter fails on that copy's window
# in the schedules that lose the race, and finishes in the others. Sums of counts wrap in
# int32, so the window has a bound near +-2**31 (INT32_MAX + c) or, from two such values,
# c - 2, which can be negative; the kernels' real windows are small and never negative. A
# negative start shows either as the copy's refused window or, where the copy lands, as the
# interpreter's own assertion that a stored range starts at 0 or later
# (`is_range_out_of_bounds_for_shape` in jax/_src/pallas/mosaic/interpret/utils.py): which one
# depends on how the interpreter's device threads interleave.
RACE_FAILS_ON_UNINITIALIZED = {
    # counts_smem is copied before a peer's histogram row arrived, so its counts are INT32_MAX
    "moe_metadata_sem_unfenced.py",
}
_WINDOW_FROM_UNINITIALIZED = re.compile(
    r"slice\([^)]*(-\d|\d{10})[^)]*\)[^\n]*but buffer has shape"
    r"|in is_range_out_of_bounds_for_shape\s+assert r\.start is not None and 0 <= r\.start"
)


def lost_the_race(path: str, outcome: str, output: str) -> bool:
    """Whether the run failed on a window sized from uninitialized memory, in an example
    where a racy read decides that window."""
    return (
        os.path.basename(path) in RACE_FAILS_ON_UNINITIALIZED
        and outcome == "failed"
        and _WINDOW_FROM_UNINITIALIZED.search(output) is not None
    )


def _has_parallel_grid(path: str) -> bool:
    return any(config_of(r) == MEGACORE for r in results(path, 2))


def interpreter_runs():
    """(example, devices, interpreter params, semcheck config to compare with). Where the
    race runs will run the example (`races_are_compared`), the verdict run is their first,
    with race detection on, so that one run serves both modules."""
    runs = []
    for path in example_paths():
        for n in device_counts(path, DEVICE_COUNTS):
            params, config = ({"num_cores_or_threads": 2}, MEGACORE) if _has_parallel_grid(path) else ({}, "")
            if races_are_compared(path, n, config):
                params = race_params(params, RACE_MODES[0], RACE_SEEDS[0])
            runs.append((path, n, params, config))
    return runs


def races_are_compared(path: str, devices: int, config: str) -> bool:
    """Whether the race runs run this example: not the kernels the interpreter rejects, nor
    those on which it fails (a bad id or window) or hangs."""
    if os.path.basename(path) in REJECTED:
        return False
    kinds = {v.kind for v in script_verdict(path, devices, config).errors}
    return not (kinds & {"invalid_device_id", "invalid_region"} or (kinds & HANG_KINDS and "remote_before_entry" not in kinds))


def race_params(params: dict, mode: str, seed: int) -> dict:
    """`params` with race detection in DMA execution mode `mode` and random seed `seed`,
    written as JAX's defaults leave out (on_wait; a seed of 0 is `random_seed or 0`, the
    default None's), so that equal runs have equal parameters."""
    changed = dict(params, detect_races=True, dma_execution_mode=mode, random_seed=seed)
    if mode == "on_wait":
        del changed["dma_execution_mode"]
    if not seed:
        del changed["random_seed"]
    return changed


def shared_run(path: str, devices: int, params: dict) -> tuple[str, str]:
    """`run_interpreter(path, devices, params, tail=None)`, made once per test session: the
    verdict and race modules, on different xdist workers, share a run (`made_once`)."""
    found = made_once("interpreter", (os.path.abspath(path), devices, sorted(params.items())),
                      lambda: run_interpreter(path, devices, params, tail=None))
    assert found is not None
    return found


# A run that stops using CPU while no thread waits on a semaphore has stalled in XLA's CPU
# runtime (seen with two cores per device on a 2-core machine: every core's nested XLA
# execution idle, no interpreter wait pending: 10 of 30 runs of megacore_row_sums.py at 2
# devices beside three busy loops, none of 30 on an idle machine). Such a run is made again,
# up to this many times in all, rather than called a hang of the kernel: a kernel that hangs
# always has a thread in a semaphore wait, so it is still "hung" at its first attempt.
STALLED_ATTEMPTS = 8


def run_interpreter(path: str, devices: int, params: dict, tail: int | None = 4000) -> tuple[str, str]:
    """("finished" | "hung" | "failed" | "timed out" | "stalled", output (its last `tail`
    characters)): "hung" has a thread blocked in a semaphore wait; "stalled" (the runtime,
    not the kernel) only once every attempt stalled."""
    for _ in range(STALLED_ATTEMPTS):
        outcome, output = _run_interpreter_once(path, devices, params, tail)
        if outcome != "stalled":
            break
    return outcome, output


def _run_interpreter_once(path: str, devices: int, params: dict, tail: int | None) -> tuple[str, str]:
    import json

    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = ROOT
    with tempfile.NamedTemporaryFile("rb") as out, tempfile.NamedTemporaryFile("rb") as err, \
            tempfile.NamedTemporaryFile("r") as blocked:
        # as `python -c RUNNER ...` in a subprocess, forked from a process that imported JAX once
        proc = interpreter_forks.start(RUNNER, [path, json.dumps(params), blocked.name], env, os.path.dirname(path),
                                       out.name, err.name)
        stopped = _watch(proc)
        if stopped == "hung" and _blocked_waits(blocked.name) == 0:
            return "stalled", ""
        if stopped is not None:
            return stopped, ""
        out.seek(0)
        err.seek(0)
        text = out.read().decode(errors="replace") + err.read().decode(errors="replace")
    return ("finished" if proc.returncode == 0 else "failed"), text[-tail:] if tail else text


def _watch(proc: interpreter_forks.Child) -> str | None:
    """Wait for `proc`; None once it exits, or why it was killed ("hung": its CPU time stood
    still for HUNG_AFTER seconds; "timed out": still computing after GIVE_UP seconds)."""
    started = time.monotonic()
    progress_at, progress_cpu = started, 0.0
    while True:
        try:
            proc.wait(timeout=1.0)
            return None
        except TimeoutError:
            pass
        now = time.monotonic()
        cpu = _cpu_seconds(proc.pid)
        if cpu is None:
            continue  # it has just exited: the next wait reaps it
        if cpu - progress_cpu >= IDLE_CPU:
            progress_at, progress_cpu = now, cpu
        stopped = "hung" if now - progress_at >= HUNG_AFTER else "timed out" if now - started >= GIVE_UP else None
        if stopped is not None:
            proc.kill()
            proc.wait()
            return stopped


def _blocked_waits(path: str) -> int | None:
    """How many of the run's threads were in a semaphore wait when it was stopped (None when
    it never said)."""
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` and all its threads (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def outcomes():
    prefetch(example_paths(), DEVICE_COUNTS)
    runs = interpreter_runs()
    # Hung runs sleep on condition variables, so several can wait side by side.
    with ThreadPoolExecutor(max_workers=max(4, INTERPRETERS_AT_ONCE)) as pool:
        done = pool.map(lambda r: shared_run(r[0], r[1], r[2]), runs)
        return {(path, n): (config, outcome) for (path, n, _p, config), outcome in zip(runs, done)}


@pytest.mark.slow
@pytest.mark.parametrize(
    "path, devices", [(p, n) for p in example_paths() for n in device_counts(p, DEVICE_COUNTS)],
    ids=lambda v: os.path.basename(v) if isinstance(v, str) else str(v),
)
def test_semcheck_agrees_with_the_tpu_interpreter(outcomes, path, devices):
    config, (outcome, output) = outcomes[(path, devices)]
    output = output[-4000:]
    result = script_verdict(path, devices, config)
    assert result.error is None, result.error
    kinds = {v.kind for v in result.errors}
    name = os.path.basename(path)
    if name in REJECTED:
        assert outcome == "failed" and REJECTED[name] in output, (outcome, output)
        return
    if "remote_before_entry" in kinds:
        assert outcome == "finished", (kinds, outcome, output)
    elif kinds & HANG_KINDS:
        assert outcome == "hung", (kinds, outcome, output)
    elif "invalid_device_id" in kinds:
        assert outcome == "failed" and "out of bounds" in output, (outcome, output)
    elif "invalid_region" in kinds and name in OUTSIDE_VIEW_ONLY:
        assert all("outside its .at[...] view" in v.message for v in result.errors if v.kind == "invalid_region")
        assert outcome == "finished", (kinds, outcome, output)
    elif "invalid_region" in kinds:
        assert outcome == "failed" and "Out-of-bounds" in output, (outcome, output)
    elif lost_the_race(path, outcome, output):
        assert "data_race" in kinds, (kinds, output)
    else:
        assert outcome == "finished", (kinds, outcome, output)
        if not kinds:
            assert result.safe


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


# --- races ------------------------------------------------------------------------------------

RACE_MODES = ("on_wait", "eager")
# JAX 0.10.2 uses `random_seed` only to permute the coordinates of parallel grid dimensions
# (SEED_DECIDES above), so the seeds after the first run only where the first runs said
# that it decided something: for every other kernel, further seeds were the same run again.
RACE_SEEDS = (0, 1, 2)
KERNEL_BOUNDARY = "pallas_call"  # the interpreter's frame for the copy-in/out around a kernel
INTERLEAVED = "interleaved"  # an access whose report came out mixed with another's
# One access of a race the interpreter prints:
# "  read of KEY[RANGE] from DEVICE, CORE, FILE:LINE:COL (FUNCTION)" (or "..., pallas_call")
_RACE_ACCESS = re.compile(
    r"^\s+(?:read|write) of .*?\[(?P<range>.*)\] from .*?"
    r"(?:(?P<file>\S+?\.py):(?P<line>\d+):\d+ \(|(?P<boundary>pallas_call)$)"
)
_SLICE = re.compile(r"slice\((\d+), (\d+), (?:1|None)\)")


def touches_nothing(access_range: str) -> bool:
    """An access whose range has an empty slice (a 0-row copy) touches no memory. JAX's
    race detector still reports it against any access containing its start
    (`_slices_overlap` in jax/_src/pallas/mosaic/interpret/race_detection_state.py, 0.10.2,
    tests `start1 <= start2 < stop1` only), so such a report is not a race."""
    return any(int(start) >= int(stop) for start, stop in _SLICE.findall(access_range))


def interpreter_races(output: str, path: str) -> set[frozenset]:
    """What the interpreter printed, as sets of the two accesses' source lines in `path`
    (KERNEL_BOUNDARY for the copy-out at kernel exit). Its threads print concurrently, so
    a report can come out interleaved with another: then each access counts on its own,
    as {line, INTERLEAVED} (its partner is not known)."""
    races = set()
    for block in output.split("RACE DETECTED")[1:]:
        frames = []  # (line or KERNEL_BOUNDARY, whether the access touches nothing)
        for line in block.splitlines():
            if m := _RACE_ACCESS.match(line):
                empty = touches_nothing(m["range"])
                if m["boundary"]:
                    frames.append((KERNEL_BOUNDARY, empty))
                else:
                    where = os.path.join(os.path.dirname(path), m["file"])  # relative to the run's cwd
                    assert os.path.samefile(where, path), line  # accesses are lines of the kernel's file
                    frames.append((int(m["line"]), empty))
        if len(frames) == 2:
            if not any(empty for _, empty in frames):  # else a zero-size copy: no race
                races.add(frozenset(f for f, _ in frames))
        else:
            races.update(frozenset([f, INTERLEAVED]) for f, empty in frames if f != KERNEL_BOUNDARY and not empty)
    return races


def assert_semcheck_reports(result, races: set[frozenset]) -> None:
    """Each interpreter race must be a racing pair semcheck reported, between the same
    lines (one line, when both accesses are of one line). An access whose report came out
    interleaved with another (INTERLEAVED: its partner is unknown) must be a line of some
    reported pair.

    A race with the kernel boundary is a copy still landing when the kernel exits (nobody
    waited for it) against the copy-out of the output: semcheck reports that copy as a
    `semaphore_leftover` at its start line (or a race there)."""
    reported = {
        frozenset([v.location.line, *(loc.line for loc in v.related)])
        for v in result.errors if v.kind == "data_race"
    }
    lines = set().union(*reported) if reported else set()
    leftovers = {v.location.line for v in result.errors if v.kind == "semaphore_leftover" and v.location}
    for race in races:
        if KERNEL_BOUNDARY in race:
            assert race - {KERNEL_BOUNDARY} <= lines | leftovers, (sorted(race, key=str), leftovers)
        elif INTERLEAVED in race:
            assert race - {INTERLEAVED} <= lines, (sorted(race, key=str), sorted(map(sorted, reported)))
        else:
            assert race in reported, (sorted(race), sorted(map(sorted, reported)))


WHEEL_DRIVER = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType, Mesh
from jax.experimental.pallas.ops.tpu import all_gather as ag
mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
out = ag.all_gather(jnp.ones((mesh.size * 8, 128), jnp.float32), mesh=mesh, axis_name="x")
jax.block_until_ready(out)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", RACE_MODES)
@pytest.mark.parametrize("devices", [4, 8])
def test_the_wheel_all_gathers_races_are_reported_by_both(tmp_path, devices, mode):
    """The jax wheel's ops/tpu/all_gather: the interpreter reports races at its
    async_remote_copy calls, each between two copies from one line, in the runs whose thread
    schedule happens to expose them (at 4 devices, about half of them); semcheck reports
    both lines in every run."""
    from semcheck.api import verify_path
    from jax.experimental.pallas.ops.tpu import all_gather

    driver = tmp_path / "driver.py"
    driver.write_text(WHEEL_DRIVER)
    wheel = os.path.abspath(all_gather.__file__)
    outcome, output = run_interpreter(str(driver), devices, {"detect_races": True, "dma_execution_mode": mode},
                                      tail=None)
    assert outcome == "finished", output[-2000:]
    races = interpreter_races(output, wheel)
    copy_lines = {n for n, text in enumerate(open(wheel, encoding="utf-8"), start=1)
                  if "_dma = pltpu.async_remote_copy(" in text}
    assert {race - {INTERLEAVED} for race in races} <= {frozenset([line]) for line in copy_lines}
    [result] = verify_path(str(driver), [devices], exhaustive=True)
    assert_semcheck_reports(result, races)
    assert {v.location.line for v in result.errors if v.kind == "data_race"} == copy_lines
