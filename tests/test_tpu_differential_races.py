"""Every race JAX's TPU interpreter reports (`InterpretParams(detect_races=True)`) on an
example, in both DMA execution modes and three runs each, is reported by semcheck at the
same lines. The interpreter runs and the helpers that read its output are
test_tpu_differential.py's; this module holds the race runs apart so that xdist gives them
a worker of their own beside that module's verdict runs (each module's runs share a
module-scoped fixture, so a module runs whole on one worker)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.test_tpu_differential import (
    DEVICE_COUNTS, INTERPRETERS_AT_ONCE, RACE_MODES, RACE_SEEDS, REJECTED, assert_semcheck_reports, interpreter_races,
    interpreter_runs, lost_the_race, run_interpreter,
)
from tests.tpu_support import HANG_KINDS, config_of, example_paths, prefetch, results


def race_runs():
    """(example, devices, interpreter params, semcheck config) for every run the interpreter
    can finish: not the kernels it rejects, not those that hang."""
    runs = []
    for path, devices, params, config in interpreter_runs():
        if os.path.basename(path) in REJECTED:
            continue
        [result] = [r for r in results(path, devices) if config_of(r) == config]
        kinds = {v.kind for v in result.errors}
        if kinds & {"invalid_device_id", "invalid_region"} or (kinds & HANG_KINDS and "remote_before_entry" not in kinds):
            continue  # the interpreter fails on the bad id or window, or hangs
        for mode in RACE_MODES:
            for seed in RACE_SEEDS:
                runs.append((path, devices, dict(params, detect_races=True, dma_execution_mode=mode,
                                                 random_seed=seed), config))
    return runs


@pytest.fixture(scope="module")
def race_outcomes():
    prefetch(example_paths(), DEVICE_COUNTS)
    runs = race_runs()
    with ThreadPoolExecutor(max_workers=INTERPRETERS_AT_ONCE) as pool:
        done = pool.map(lambda r: run_interpreter(r[0], r[1], r[2], tail=None), runs)
        return [(run, outcome) for run, outcome in zip(runs, done)]


@pytest.mark.slow
def test_every_race_the_interpreter_reports_is_reported_by_semcheck(race_outcomes):
    races_seen, problems = 0, []
    for (path, devices, params, config), (outcome, output) in race_outcomes:
        where = (os.path.basename(path), devices, params["dma_execution_mode"], params["random_seed"])
        if outcome != "finished" and not lost_the_race(path, outcome, output):
            problems.append((where, outcome, output[-1000:]))
            continue
        # (a run that failed on a lost race's uninitialized value still printed its races)
        races = interpreter_races(output, path)
        races_seen += len(races)
        [result] = [r for r in results(path, devices) if config_of(r) == config]
        try:
            assert_semcheck_reports(result, races)
        except AssertionError as e:
            problems.append((where, "missed", str(e)))
    assert not problems, problems
    assert races_seen  # the comparison is not vacuous: the interpreter does find races
