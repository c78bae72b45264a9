"""Every Mosaic GPU example kernel script gives the verdict its `# semcheck: expect` comments
declare, at 2, 4 and 8 devices, through the same path as `semcheck verify FILE --devices N`,
and every report points at the line of the example marked `# <- kind` for it."""

from __future__ import annotations

import os

import pytest

from tests.tpu_support import DEVICE_COUNTS, ROOT, expectation, prefetch, results

EXAMPLES = sorted(
    os.path.join(ROOT, "examples", "gpu", name)
    for name in os.listdir(os.path.join(ROOT, "examples", "gpu"))
    if name.endswith(".py") and not name.startswith("_")
)


CHECKS = [
    (path, devices) for path in EXAMPLES
    for devices in DEVICE_COUNTS
]


@pytest.fixture(scope="module", autouse=True)
def _all_results():
    for path in EXAMPLES:
        prefetch([path], DEVICE_COUNTS)


def test_the_gpu_protocols_each_have_an_example():
    names = {os.path.basename(p)[:-3] for p in EXAMPLES}
    assert {
        "grid_barrier", "grid_barrier_competing_waits", "ready_ring", "ready_ring_unwrapped",
        "tma_barrier", "tma_barrier_early_read", "tma_barrier_extra_wait",
        "warp_specialized_pipeline", "warp_specialized_pipeline_no_release",
        "tma_store_reuse", "tma_store_reuse_early", "tma_store_read_only_wait",
        "remote_store_ring", "remote_store_ring_no_wait",
        "warp_producer_consumer", "warp_producer_consumer_early_read",
        "warp_producer_consumer_no_release", "tcgen05_mma_pipeline", "tcgen05_mma_reload_early",
        "thread_exchange", "thread_exchange_no_wait", "tma_store_ring", "tma_store_ring_read_only_wait",
        "scoped_tile_handoff", "scoped_tile_handoff_no_read_wait",
        "remote_tma_load", "remote_tma_load_early_read", "remote_tma_load_before_ready",
        "remote_atomic_add", "remote_atomic_add_early_read",
    } <= names


@pytest.mark.parametrize("path,devices", CHECKS, ids=lambda v: os.path.basename(v) if isinstance(v, str) else str(v))
def test_example_gives_its_declared_verdict(path, devices):
    exp = expectation(path)
    [r] = results(path, devices)
    errors, warnings = exp.kinds_for(r)
    assert r.verdict.value == ("violation" if errors else "safe"), (r.kernel, r.error, [v.message for v in r.violations])
    assert {v.kind for v in r.errors} == errors
    assert {v.kind for v in r.warnings} == warnings
    assert (r.frontend, r.backend, r.devices) == ("gpu", "gpu", devices)


@pytest.mark.parametrize("path,devices", CHECKS, ids=lambda v: os.path.basename(v) if isinstance(v, str) else str(v))
def test_every_report_points_at_the_kernels_own_line(path, devices):
    exp = expectation(path)
    for r in results(path, devices):
        assert os.path.samefile(r.file, path)
        for v in r.violations:
            assert v.location is not None and os.path.samefile(v.location.file, path), v.message
            assert v.location.line in exp.markers.get(v.kind, set()), (v.kind, v.location, exp.markers)


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_every_example_declares_its_verdict_once(path):
    import ast

    assert expectation(path).declarations
    with open(path, encoding="utf-8") as f:
        docstring = ast.get_docstring(ast.parse(f.read())) or ""
    assert "Expected verdict" not in docstring and "Expected warnings" not in docstring


def test_the_gate_accepts_every_example():
    """`semcheck verify examples/gpu --expectations` passes: each buggy kernel fails the way
    it declares, each correct one is safe."""
    from semcheck.run import expectations

    found = [r for path, devices in CHECKS for r in results(path, devices)]
    for r, judgement in zip(found, expectations.judge_all(found)):
        assert judgement.matched, (r.file, r.devices, judgement)


def test_a_reported_hazard_is_not_carried_in_states():
    """Every device of the pipeline without release records a phase overrun and a race.
    Carried in states, the devices' hazard sets multiplied them: 1,449,894 states at 8
    devices. Dropped once their findings are recorded, the schedules that differ only in
    what was already reported are one state."""
    path = next(p for p in EXAMPLES if p.endswith("warp_specialized_pipeline_no_release.py"))
    [result] = results(path, 8)
    assert {v.kind for v in result.errors} == {"barrier_phase_overrun", "data_race"}
    assert result.stats.states * 4 < 1_449_894


@pytest.mark.parametrize("name,states", [
    ("warp_producer_consumer.py", 48), ("warp_producer_consumer_early_read.py", 54),
    # the two buggy ones: 4 states more each than when a reported race silenced both its
    # lines (a line stays watched until each pair it may race in is reported); 2 of them
    # fewer again for the tcgen05 one, since a reported pair stops ordering only its own
    # two lines (independence._MemoryView); 2 fewer again for both tcgen05 ones with the
    # joint counting cut (docs/search.md; 62 and 56 before: the unreduced search, 2,500 and
    # 45,369 states, finds what the reduced one finds)
    ("warp_producer_consumer_no_release.py", 102),
    ("tcgen05_mma_pipeline.py", 60), ("tcgen05_mma_reload_early.py", 54),
])
def test_the_warp_and_tensor_core_examples_explore_exactly_these_states_at_2_devices(name, states):
    """Warps 0 and 1 of each device's one Pallas thread are threads of their own (warps 2
    and 3 do nothing and take no part), and so is a thread's tensor core; the state counts
    pin that model."""
    [r] = results(os.path.join(ROOT, "examples", "gpu", name), 2)
    assert r.stats.states == states
    assert sorted({v.kind for v in r.errors}) == sorted(expectation(os.path.join(ROOT, "examples", "gpu", name)).kinds_for(r)[0])


# The root cause each buggy example's report leads with (engines/diagnosis.py), as its docstring
# names the bug; None: the symptom is the cause (a bad id, a wait for a phase nothing completes),
# or no rule names it (a barrier phase overrun).
ROOT_CAUSES = {
    "cluster_exchange_no_wait.py": {("data_race", "UNCONSUMED_SIGNAL")},
    "grid_barrier_competing_waits.py": {("unsatisfied_wait", "COMPETING_WAITS")},
    "ready_ring_unwrapped.py": {("invalid_device_id", None)},
    "remote_atomic_add_early_read.py": {("data_race", "LATE_WAIT")},
    "remote_store_ring_no_wait.py": {("data_race", "LATE_WAIT")},
    "remote_tma_load_before_ready.py": {("data_race", "LATE_WAIT")},
    "remote_tma_load_early_read.py": {("data_race", "LATE_WAIT")},
    "scoped_tile_handoff_no_read_wait.py": {("data_race", "LATE_WAIT")},
    "tcgen05_mma_reload_early.py": {("data_race", "LATE_WAIT")},
    "thread_exchange_no_wait.py": {("data_race", "UNCONSUMED_SIGNAL")},
    "tma_barrier_early_read.py": {("data_race", "LATE_WAIT")},
    "tma_barrier_extra_wait.py": {("unsatisfied_wait", None)},
    "tma_store_read_only_wait.py": {("data_race", "UNWAITED_COPY")},
    "tma_store_reuse_early.py": {("data_race", "LATE_WAIT")},
    "tma_store_ring_read_only_wait.py": {("data_race", "UNWAITED_COPY")},
    "warp_producer_consumer_early_read.py": {("data_race", "LATE_WAIT")},
    "warp_producer_consumer_no_release.py": {("barrier_phase_overrun", None), ("data_race", "UNCONSUMED_SIGNAL")},
    "warp_specialized_pipeline_no_release.py": {("barrier_phase_overrun", None), ("data_race", "UNCONSUMED_SIGNAL")},
}


def test_every_buggy_example_leads_with_the_root_cause_its_docstring_names():
    buggy = {}
    for path in EXAMPLES:
        [r] = results(path, 2)
        if r.errors:
            buggy[os.path.basename(path)] = {(v.kind.value, v.cause.kind.name if v.cause else None) for v in r.errors}
    assert buggy == ROOT_CAUSES


# How the headline of each buggy example that names a semaphore semcheck made (or JAX left
# unnamed) says it: `pl.get_global`'s by the local its line binds (it was `global#0`), a
# thread's TMA store counters by what they count (it was `tma_store_read_thread0`).
NAMED_IN_HEADLINE = {
    "grid_barrier_competing_waits.py": "compete for one count of `arrived`:",
    "remote_store_ring_no_wait.py": "before the wait at line 30 on `ready` that orders it",
    "scoped_tile_handoff_no_read_wait.py": "before the wait at line 37 on the source reads of this thread's TMA "
                                           "stores that orders it",
    "tma_store_reuse_early.py": "before the wait at line 25 on the source reads of this thread's TMA stores that "
                                "orders it",
}


def test_every_semaphore_a_headline_names_is_one_the_kernels_author_wrote_or_says_what_it_is():
    from semcheck.report import causes

    statements = {}
    for path in EXAMPLES:
        [r] = results(path, 2)
        source = open(path, encoding="utf-8").read()
        for v in r.errors:
            c = v.cause
            if c is None or c.semaphore is None:
                continue
            statements[os.path.basename(path)] = causes.statement(c)
            if not c.semaphore_shown_as:
                assert f" {c.semaphore} = " in source or f"{c.semaphore}," in source or f"{c.semaphore})" in source, (
                    path, c.semaphore)
    for name, said in NAMED_IN_HEADLINE.items():
        assert said in statements[name], (name, statements[name])


# A step of each buggy example's trace that names a counter the lowering made, as the trace says
# it: by what it stands for, as the headline does (it said `warp_fork[1]@d0`,
# `tma_store_read[0]@d0`, `block barrier (gpu.barrier)@d0`, `tcgen05_done@d0`).
NAMED_IN_TRACE = {
    "warp_producer_consumer_no_release.py":
        "signal the fork into warps of a warp-level core_map (warp 1) += 1 (0 -> 1)",
    "tma_store_reuse_early.py":
        "start DMA tile[0:64, 0:128] -> o_ref[0:1, 0:64, 0:128] (on completion: send the source reads of this "
        "thread's TMA stores (group 0) +1, recv the writes of this thread's TMA stores (group 0) +1)",
    "warp_specialized_pipeline_no_release.py":
        "wait the block-wide barrier (gpu.barrier) that begins a thread-collective pl.run_scoped >= 2 without "
        "decrement (holds 2)",
    "tcgen05_mma_reload_early.py":
        "start DMA a[0:128, 0:128] -> tcgen05_operands[0:1] (on completion: recv the tensor core's reads of this "
        "thread's operands +1)",
}


def test_every_trace_step_names_a_counter_the_lowering_made_by_what_it_stands_for():
    from semcheck.report import json as json_report

    texts = {}
    for path in EXAMPLES:
        [r] = results(path, 2)
        for v in r.errors:
            texts.setdefault(os.path.basename(path), []).extend(step.text for step in v.trace)
            for step in v.trace:
                if step.semaphore_shown_as:
                    assert step.semaphore_shown_as in step.text and step.declaration not in step.text, step.text
                    # the machine fields keep the model's name, and JSON adds the one the text says
                    as_json = json_report.step_dict(step)
                    assert as_json["semaphore"].startswith(step.declaration)
                    assert as_json["semaphore_shown_as"] == step.semaphore_shown_as
    for name, said in NAMED_IN_TRACE.items():
        assert said in texts[name], (name, texts[name])
