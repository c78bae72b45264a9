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
    ("dma_unit_rounding", [[0, 0], [3, 0], [1, 0], [5, 0]], None, False),  # rounded down
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
