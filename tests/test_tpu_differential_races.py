"""Every race JAX's TPU interpreter reports (`InterpretParams(detect_races=True)`) on an
example, in both DMA execution modes, and with three random seeds where the seed decides
anything, is reported by semcheck at the same lines. The interpreter runs and the helpers
that read its output are test_tpu_differential.py's; this module holds the race runs apart
so that xdist gives them a worker of their own beside that module's verdict runs (each
module's runs share a module-scoped fixture, so a module runs whole on one worker). The
first race run of each example, in on_wait mode with seed 0, is that module's verdict run
too: the two modules share it (`shared_run`), whichever asks first makes it."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.test_tpu_differential import (
    DEVICE_COUNTS, INTERPRETERS_AT_ONCE, RACE_MODES, RACE_SEEDS, SEED_DECIDES, assert_semcheck_reports,
    interpreter_races, interpreter_runs, lost_the_race, race_params, races_are_compared, shared_run,
)
from tests.tpu_support import example_paths, prefetch, script_verdict


def first_race_runs():
    """(example, devices, interpreter params, semcheck config) for every run the interpreter
    can finish (`races_are_compared`), in each DMA mode with the first seed: eager first,
    since on_wait's is also the verdict module's run, which that module makes meanwhile."""
    compared = [(path, n, params, config) for path, n, params, config in interpreter_runs()
                if races_are_compared(path, n, config)]
    return [(path, n, race_params(params, mode, RACE_SEEDS[0]), config)
            for mode in reversed(RACE_MODES) for path, n, params, config in compared]


def further_seed_runs(first: list) -> list:
    """The runs with the other seeds, of the examples whose first runs said that their seed
    permuted a parallel grid dimension (SEED_DECIDES): for any other example a run with
    another seed is the same run again."""
    decides = {(path, n) for (path, n, _params, _config), (_outcome, output) in first if SEED_DECIDES in output}
    return [(path, n, dict(params, random_seed=seed, dma_execution_mode=mode), config)
            for (path, n, params, config), _done in first if (path, n) in decides
            and params.get("dma_execution_mode", RACE_MODES[0]) == RACE_MODES[0]
            for mode in RACE_MODES for seed in RACE_SEEDS[1:]]


def _run_all(runs: list) -> list:
    with ThreadPoolExecutor(max_workers=INTERPRETERS_AT_ONCE) as pool:
        return list(zip(runs, pool.map(lambda r: shared_run(r[0], r[1], r[2]), runs)))


@pytest.fixture(scope="module")
def race_outcomes():
    prefetch(example_paths(), DEVICE_COUNTS)
    first = _run_all(first_race_runs())
    return first + _run_all(further_seed_runs(first))


@pytest.mark.slow
def test_every_race_the_interpreter_reports_is_reported_by_semcheck(race_outcomes):
    races_seen, problems = 0, []
    for (path, devices, params, config), (outcome, output) in race_outcomes:
        where = (os.path.basename(path), devices, params.get("dma_execution_mode", "on_wait"), params.get("random_seed", 0))
        if outcome != "finished" and not lost_the_race(path, outcome, output):
            problems.append((where, outcome, output[-1000:]))
            continue
        # (a run that failed on a lost race's uninitialized value still printed its races)
        races = interpreter_races(output, path)
        races_seen += len(races)
        try:
            assert_semcheck_reports(script_verdict(path, devices, config), races)
        except AssertionError as e:
            problems.append((where, "missed", str(e)))
    assert not problems, problems
    assert races_seen  # the comparison is not vacuous: the interpreter does find races


@pytest.mark.slow
def test_the_seeds_vary_where_a_parallel_grid_dimension_is_permuted(race_outcomes):
    """The further seeds ran, and only, for the examples compared on two TensorCores (whose
    grids have a parallel dimension), and each of their runs was permuted too: SEED_DECIDES
    is what decides which examples get them, so it must be printed where expected."""
    seeded = {(os.path.basename(path), n) for (path, n, params, _c), _done in race_outcomes if params.get("random_seed")}
    parallel = {(os.path.basename(path), n) for (path, n, params, _c), _done in race_outcomes
                if params.get("num_cores_or_threads") == 2}
    assert seeded and seeded == parallel, (sorted(seeded), sorted(parallel))
    assert all(SEED_DECIDES in output for (_p, _n, params, _c), (_o, output) in race_outcomes
               if params.get("num_cores_or_threads") == 2)
    assert len(race_outcomes) == 2 * len({(p, n) for (p, n, _params, _c), _done in race_outcomes}) + 4 * len(seeded)
