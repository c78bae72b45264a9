"""The Pallas pipeline's own block copies at grid-step boundaries (semcheck/lower/pipeline.py).

As JAX 0.10.2's TPU interpreter does: an input block is copied in before a step that is the
core's first or whose block index changed; an output block is copied out after a step that is
the core's last or whose next step has another block index. A kernel DMA still in flight on a
block across such a copy races with it; a revisited block index is not copied again. The
examples block_copy_in_step.py / block_copy_across_steps.py are the pair the gate and the
interpreter differential (tests/test_tpu_differential.py) check.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from semcheck import ir
from semcheck.engines.explicit import search as explicit
from semcheck.lower.pipeline import BlockDim, PipelinedBlock, hbm_region
from semcheck.semantics import System
from semcheck.engines.options import ExplicitOptions
from tests.agreement import assert_engines_agree, kinds
from tests.tpu_kernels import instrs, mesh, protocols, sharded

BLOCK = (8, 128)
STEPS = 4
DMA = pltpu.SemaphoreType.DMA


def read_block_across_steps(x_ref, x_hbm, o_ref, scratch, sem):
    """Even steps start a copy out of the input block; the odd step after waits for it."""
    i = pl.program_id(0)
    copy = pltpu.make_async_copy(x_ref, scratch, sem)

    @pl.when(i % 2 == 0)
    def _():
        copy.start()

    @pl.when(i % 2 == 1)
    def _():
        copy.wait()

    o_ref[...] = jnp.zeros_like(o_ref)


def pipelined(body, input_index_map, parallel=False):
    def per_device(block):
        return pl.pallas_call(
            body, grid=(STEPS,), out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(BLOCK, input_index_map), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(BLOCK, lambda i: (i, 0)),
            scratch_shapes=[pltpu.VMEM(BLOCK, jnp.float32), DMA],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel" if parallel else "arbitrary",)),
        )(block, block)

    return per_device


def pipeline_accesses(protocol: ir.Protocol, core: int = 0) -> list[tuple[str, str]]:
    return [
        (type(i).__name__, i.region.buffer)
        for i in instrs(protocol, (ir.Load, ir.Store), 0, core)
        if i.region.start == ()  # the whole block: the pipeline (the kernel names its regions)
    ]


def test_an_input_block_refilled_while_a_copy_still_reads_it_is_a_race():
    [p] = protocols(pipelined(read_block_across_steps, lambda i: (i, 0)), mesh((1,)), rows=STEPS * 8)
    assert pipeline_accesses(p) == [("Store", "x_ref")] * STEPS  # a new block every step
    by_search, _ = assert_engines_agree(p)
    assert kinds(by_search) == {"data_race"}
    full = explicit.explore(System(p), ExplicitOptions(reduce=False, silence_reported_races=False))
    assert set(full.findings) == set(explicit.explore(System(p),
                                                      ExplicitOptions(silence_reported_races=False)).findings)


def test_the_pipelines_copies_say_what_they_are():
    """The copy-in, copy-out and HBM write-back are flagged on the access (their line is the
    pallas_call's, so a report names them by what they are), and none of the kernel's own is."""
    [p] = protocols(pipelined(read_block_across_steps, lambda i: (i, 0)), mesh((1,)), rows=STEPS * 8)
    flagged = [(type(i).__name__, i.region.buffer, i.pipeline) for i in instrs(p, (ir.Load, ir.Store), 0, 0)
               if i.pipeline is not None]
    assert flagged == [("Store", "x_ref", ir.PipelineCopy.COPY_IN)] * STEPS
    kernels = [i for i in instrs(p, (ir.Load, ir.Store), 0, 0) if i.pipeline is None]
    assert kernels and all(i.region.buffer == "o_ref" for i in kernels)  # o_ref[...] = ... of each step


def test_the_copy_out_of_a_block_a_later_step_waits_for_is_named_as_the_pipelines():
    """examples/tpu/block_copy_across_steps.py: the race is with the pipeline's write-back at
    the end of the step, which the report called "the read at line 45" (the pallas_call)."""
    import os

    from semcheck.report import causes
    from tests.tpu_support import ROOT, results

    path = os.path.join(ROOT, "examples", "tpu", "block_copy_across_steps.py")
    source = open(path, encoding="utf-8").read().splitlines()
    line = {marker: next(n for n, text in enumerate(source, 1) if marker in text)
            for marker in ("copy(i - 1).wait()", "copy(i).start()", "pl.pallas_call(")}
    [r] = results(path, 2)
    [c] = {v.cause for v in r.errors}
    assert (c.kind.name, c.pipeline, c.buffer, c.before.line, c.site.line, c.by.line) == (
        "LATE_WAIT", ir.PipelineCopy.COPY_OUT, "o_ref", line["pl.pallas_call("], line["copy(i - 1).wait()"],
        line["copy(i).start()"])
    assert causes.statement(c) == (
        f"the pipeline writes the output block `o_ref` back at the end of each grid step (line "
        f"{line['pl.pallas_call(']}, its pallas_call), ahead of the wait at line {line['copy(i - 1).wait()']} on "
        f"`sem` that orders it after the copy from line {line['copy(i).start()']}: that wait comes only in a later "
        "grid step")
    # the trace step says which of the pipeline's copies it is, too (it was "load o_ref")
    assert {v.trace[-1].text.split("  --")[0] for v in r.errors} == {"pipeline copy-out (after the grid step) of o_ref"}
    assert causes.fix(c) == (f"wait for the copy from line {line['copy(i).start()']} within the grid step that "
                             f"starts it: move the wait at line {line['copy(i - 1).wait()']} into that step, before "
                             "it ends")


def test_a_revisited_input_block_is_not_copied_again_so_the_copy_across_steps_is_safe():
    [p] = protocols(pipelined(read_block_across_steps, lambda i: (i // 2, 0)), mesh((1,)), rows=STEPS * 8)
    assert pipeline_accesses(p) == [("Store", "x_ref")] * (STEPS // 2)  # steps 0 and 2 only
    by_search, _ = assert_engines_agree(p)
    full = explicit.explore(System(p), ExplicitOptions(reduce=False))
    assert (kinds(by_search), kinds(full)) == (set(), set())
    assert (by_search.states, full.states) == (15, 17)


def test_blocks_no_dma_touches_get_no_copies():
    def kernel(x_ref, x_hbm, o_ref, scratch, sem):
        o_ref[...] = x_ref[...]

    [p] = protocols(pipelined(kernel, lambda i: (i, 0)), mesh((1,)), rows=STEPS * 8)
    assert pipeline_accesses(p) == []
    assert not any("Pallas pipeline" in note for note in p.notes)


@pytest.mark.parametrize("core, copies", [(0, 1), (1, 1)])
def test_on_two_cores_each_core_copies_its_own_first_block_in(core, copies):
    """Steps (0, 1) on core 0 and (2, 3) on core 1, blocks i // 2: one block per core."""
    found = protocols(pipelined(read_block_across_steps, lambda i: (i // 2, 0), parallel=True), mesh((1,)),
                      rows=STEPS * 8)
    two = next(p for p in found if p.cores == 2)
    assert pipeline_accesses(two, core) == [("Store", "x_ref")] * copies
    assert any("Pallas pipeline" in note for note in two.notes)


# --- the HBM side of a copy-out on a megacore chip -------------------------------------------------


def accumulate(o_ref_index_map, grid=(STEPS,)):
    """Each step adds its input block into an output block the index map picks; the grid is
    "parallel" (split between the cores of a megacore chip)."""
    def kernel(x_ref, o_ref):
        o_ref[...] += x_ref[...]

    def per_device(block):
        return pl.pallas_call(
            kernel, grid=grid, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(BLOCK, lambda i: (i, 0))],
            out_specs=pl.BlockSpec(BLOCK, o_ref_index_map),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        )(block)

    return per_device


def write_backs(protocol: ir.Protocol, core: int) -> list[tuple[tuple, tuple]]:
    return [
        (i.region.start, i.region.size)
        for i in instrs(protocol, ir.Store, 0, core) if i.region.buffer == "o_ref (HBM array)"
    ]


def test_on_two_cores_each_output_block_is_written_back_to_its_region_of_the_shared_hbm_array():
    """Steps (0, 1) on core 0 and (2, 3) on core 1, output blocks (i, 0): each core writes
    back its own rows; on one core the HBM array is not part of the protocol."""
    one, two = protocols(accumulate(lambda i: (i, 0)), mesh((1,)), rows=STEPS * 8)
    assert [write_backs(two, core) for core in (0, 1)] == [
        [((0, 0), (8, 128)), ((8, 0), (8, 128))],
        [((16, 0), (8, 128)), ((24, 0), (8, 128))],
    ]
    [hbm] = [b for b in two.buffers if b.written_back]
    assert (hbm.shape, hbm.scope) == ((32, 128), ir.Scope.DEVICE)
    assert not any(b.written_back for b in one.buffers) and write_backs(one, 0) == []
    result = explicit.explore(System(two))
    assert (kinds(result), result.states) == (set(), 28)


def test_two_cores_writing_back_one_output_block_race_on_the_hbm_array():
    """An output block the index map keeps for the whole grid: a core writes it back once,
    after its last step, and both cores write back the same rows."""
    one, two = protocols(accumulate(lambda i: (0, 0)), mesh((1,)), rows=STEPS * 8)
    assert write_backs(two, 0) == write_backs(two, 1) == [((0, 0), (8, 128))]
    assert kinds(explicit.explore(System(one))) == set()
    by_search, _ = assert_engines_agree(two)
    assert kinds(by_search) == {"data_race"}
    assert by_search.states == 27
    full = explicit.explore(System(two), ExplicitOptions(reduce=False, silence_reported_races=False))
    assert kinds(full) == {"data_race"}


def test_a_race_on_written_back_blocks_says_how_to_give_each_core_its_own_blocks():
    from semcheck.api import verify
    from semcheck.semantics.properties import WRITE_BACK_RACE_HINT

    fn, x = sharded(accumulate(lambda i: (0, 0)), mesh((1,)), rows=STEPS * 8)
    results = verify(fn, x)
    [two] = [r for r in results if "2 TensorCores" in r.kernel]
    [race] = two.errors
    assert (race.kind, race.hint) == ("data_race", WRITE_BACK_RACE_HINT)
    assert "o_ref (HBM array)" in race.message
    assert any("HBM array of a pipelined output" in note for note in two.notes)


@pytest.mark.parametrize("dims, index, region", [
    # Blocked: the index counts blocks; the last block is cut at the array's edge.
    ((BlockDim(8, False), BlockDim(128, False)), (2, 0), ((16, 0), (4, 128))),
    # Squeezed and Element: the index is the start, in elements.
    ((BlockDim(1, True), BlockDim(8, True)), (3, 5), ((3, 5), (1, 8))),
])
def test_a_block_index_becomes_its_region_of_the_hbm_array_as_the_interpreter_computes_it(dims, index, region):
    block = PipelinedBlock("o", False, {(0,): index}, hbm="o (HBM array)", block_dims=dims, array_shape=(20, 128))
    found = hbm_region(block, (0,))
    assert (found.start, found.size, found.widened) == (*region, None)


def test_an_unknown_output_block_index_writes_back_the_whole_array_widened():
    block = PipelinedBlock("o", False, {(0,): None}, hbm="o (HBM array)",
                           block_dims=(BlockDim(8, False),), array_shape=(32,))
    found = hbm_region(block, (0,))
    assert (found.start, found.size) == ((), ()) and found.widened


# --- the example pair against JAX's TPU interpreter -----------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("mode", ["on_wait", "eager"])
def test_the_interpreter_reports_the_copy_across_steps_against_its_pipeline_and_not_the_fix(mode):
    import os

    from semcheck.api import verify_path
    from tests.test_tpu_differential import KERNEL_BOUNDARY, interpreter_races, run_interpreter
    from tests.tpu_support import ROOT

    params = {"detect_races": True, "dma_execution_mode": mode}
    buggy = os.path.join(ROOT, "examples", "tpu", "block_copy_across_steps.py")
    fixed = os.path.join(ROOT, "examples", "tpu", "block_copy_in_step.py")
    start_line = next(n for n, line in enumerate(open(buggy, encoding="utf-8"), 1) if "copy(i).start()" in line)

    outcome, output = run_interpreter(buggy, 2, params, tail=None)
    assert outcome == "finished"
    assert frozenset({KERNEL_BOUNDARY, start_line}) in interpreter_races(output, buggy)
    [result] = verify_path(buggy, [2], engine="explicit")
    assert {v.kind for v in result.errors} == {"data_race"}
    assert start_line in {line for v in result.errors for line in (v.location.line, *(r.line for r in v.related))}

    outcome, output = run_interpreter(fixed, 2, params, tail=None)
    assert (outcome, interpreter_races(output, fixed)) == ("finished", set())
    [result] = verify_path(fixed, [2], engine="explicit")
    assert result.verdict.value == "safe"


# Examples whose model these changes made bigger (pipeline copies, shared HBM), small enough
# for both engines and the unreduced search at 2 devices.
CHANGED_EXAMPLES = ("block_copy_across_steps.py", "block_copy_in_step.py", "shift_single_barrier.py",
                    "chunked_shift.py", "core_barrier.py", "core_barrier_one_sided.py",
                    "megacore_row_sums.py", "megacore_row_sums_parallel_reduction.py")


@pytest.mark.parametrize("name", CHANGED_EXAMPLES)
def test_engines_and_the_unreduced_search_agree_on_the_examples_whose_model_grew(name):
    import os

    from semcheck.frontends import capture_cache
    from tests.tpu_support import ROOT

    # Through the session's capture cache: tests/test_shared_hbm.py checks core_barrier.py at
    # 2 devices too.
    outcome = capture_cache.capture(os.path.join(ROOT, "examples", "tpu", name), 2)
    assert outcome.protocols and not outcome.errors, (outcome.script_error, outcome.errors)
    for p in outcome.protocols:
        by_search, _ = assert_engines_agree(p)
        full = explicit.explore(System(p), ExplicitOptions(reduce=False, silence_reported_races=False))
        assert kinds(full) == kinds(by_search)
