"""benchmarks/on_tpu.py, as far as a CPU machine can check it: one probe per hardware fact of
semcheck/tpu_facts.py (the table the checker reads), every probe kernel accepted by JAX's
Pallas TPU lowering, each probe's reading of the chip's answers, and a clear refusal where
there is no TPU. Running the probes needs a TPU; CI has none."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from semcheck import tpu_facts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "on_tpu.py")


@pytest.fixture(scope="module")
def on_tpu():
    spec = importlib.util.spec_from_file_location("on_tpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["on_tpu"] = module  # its dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("on_tpu", None)


def test_every_fact_has_one_probe_and_every_probe_a_fact(on_tpu):
    assert set(on_tpu.PROBES) == tpu_facts.FACT_KEYS
    assert len(tpu_facts.FACTS) == len(tpu_facts.FACT_KEYS)  # no key twice
    assert {f.key for f in tpu_facts.FACTS if not f.observed} >= {
        "dma_unit_rounding", "zero_size_dma", "traced_size_dma", "run_scoped_semaphore"}


def test_every_probe_kernel_lowers_for_tpu(on_tpu):
    failed = {key: why for key in on_tpu.PROBES if (why := on_tpu.lower_probe(key)) is not None}
    assert failed == {}


@pytest.mark.parametrize("key, outs, error, agrees", [
    ("nondecrementing_wait", [[2, 2]], None, True),
    ("nondecrementing_wait", [[4, 4]], None, False),  # the wait took nothing
    ("scratch_leftover_halts", None, "... has a nonzero value upon exit from a Mosaic kernel ...", True),
    ("scratch_leftover_halts", [[1]], None, False),
    ("leftover_carries_without_checks", [[0], [2, 1], [128], [128]], None, True),
    ("leftover_carries_without_checks", [[0], [0, 0], [128], [0]], None, False),  # zeroed at entry
    ("dma_semaphore_unit", [[n // 32, 0] for _, n in [(1, 512), (8, 4096), (16, 8192), (64, 32768), (2048, 1 << 20)]],
     None, True),
    ("dma_semaphore_unit", [[n, 0] for _, n in [(1, 512), (8, 4096), (16, 8192), (64, 32768), (2048, 1 << 20)]],
     None, False),  # bytes
    ("dma_unit_rounding", [[1, 0], [4, 0], [2, 0], [5, 0]], None, True),
    ("dma_unit_rounding", [[0, 0], [3, 0], [1, 0], [5, 0]], None, True),  # rounded down, balanced
    ("dma_unit_rounding", [[1, 1], [4, 0], [2, 0], [5, 0]], None, False),  # a wait left a unit
    ("dma_window_out_of_bounds", None, "BoundsCheck 3 ... dma.hbm_to_vmem", True),
    ("remote_to_own_device", [[1, 128, 128]], None, True),
    ("barrier_leftover_carries", [[1], [1]], None, True),
    ("barrier_leftover_carries", None, "a failure", None),  # cannot tell
])
def test_each_probe_reads_the_chips_answer_against_semchecks_assumption(on_tpu, key, outs, error, agrees):
    text, found = on_tpu.PROBES[key].judge(outs, error)
    assert found is agrees and text


def test_the_list_prints_every_fact_with_what_semcheck_assumes():
    done = subprocess.run([sys.executable, SCRIPT, "--list"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    for f in tpu_facts.FACTS:
        assert f.key in done.stdout and f.assumption in done.stdout


def test_without_a_tpu_it_says_so_and_exits_1():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, SCRIPT, "--only", "nondecrementing_wait"], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 1 and "no TPU here" in done.stderr and done.stdout == ""


def test_an_unknown_fact_is_refused():
    done = subprocess.run([sys.executable, SCRIPT, "--only", "no_such_fact"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "no_such_fact" in done.stderr


def test_the_semantics_page_states_every_fact():
    with open(os.path.join(ROOT, "docs", "semantics.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## What the hardware does"):]
    for f in tpu_facts.FACTS:
        assert f"`{f.key}`" in section, f.key


def _order_runs(on_tpu, earlier_in=()):
    """One run per copy_issue_order kernel call, each landed in order but those at `earlier_in`
    (indices of the calls), where 5 elements hold an earlier copy's data."""
    runs = []
    for i, (_case, copies) in enumerate(c for c in on_tpu.ORDER_CASES for _route in on_tpu.ORDER_ROUTES):
        n, covered = len(copies), 1024 * 128 if copies[0][2] == 1024 or copies[-1][2] == 1024 else copies[0][2] * 128
        runs.append([n, n, covered - 5, 5, 0] if i in earlier_in else [n, n, covered, 0, 0])
    return runs


def test_the_copy_order_probe_agrees_only_once_an_earlier_copy_showed_last(on_tpu):
    judge = on_tpu.PROBES["copy_issue_order"].judge
    text, agrees = judge(_order_runs(on_tpu), None)
    assert agrees is None and "showed last in 0 of the 10 runs in which every copy landed" in text
    text, agrees = judge(_order_runs(on_tpu, earlier_in={5}), None)
    assert agrees is True and "in 1 of the 10 runs" in text and "(512 KiB, then 4 KiB over its first rows, " \
        "remote to its own id)" in text
    unlanded = _order_runs(on_tpu)
    unlanded[0][0] = 3  # one copy's receive side never reached its count within the poll
    text, agrees = judge(unlanded, None)
    assert agrees is None and "in 0 of the 9 runs" in text and "1 runs had a copy that did not land" in text


def test_the_copy_order_probe_runs_in_jaxs_interpreter_and_finds_every_copy_landed_in_order(on_tpu):
    """JAX's TPU interpreter, in its eager DMA mode, lands each copy as it starts: every
    element of the destination holds the last-started copy's data."""
    outs = on_tpu.run_probe("copy_issue_order", interpret=True, repeats=1)
    assert outs == _order_runs(on_tpu)
    text, agrees = on_tpu.PROBES["copy_issue_order"].judge(outs, None)
    assert agrees is None and "in 0 of the 10 runs" in text


def test_the_copy_order_probe_sees_copies_that_land_in_reverse(on_tpu):
    """In its on_wait mode the interpreter lands a copy when it is waited for: waited for in
    reverse, the copies land in reverse, and the probe finds the earlier data last."""
    from jax.experimental.pallas import tpu as pltpu

    [(_case, copies)] = [c for c in on_tpu.ORDER_CASES if c[0] == "4 copies of 4 KiB"]
    on_tpu.INTERPRETED = True
    try:
        with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams()):
            for route in on_tpu.ORDER_ROUTES:
                step = on_tpu._order_step(copies, route, waits=[3, 2, 1, 0])
                assert [int(v) for v in step.fn(*step.args())] == [4, 4, 0, 1024, 0], route
    finally:
        on_tpu.INTERPRETED = False
