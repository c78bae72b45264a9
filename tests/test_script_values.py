"""The values the script passes are the values checked (issue 26, part 1).

Scalar prefetch is an operand like the others: its elements hold the script's values, per
device, and the kernel's own stores to it are followed from grid step to grid step. An
element is a protocol input only where `semcheck.assume` / `--assume` names it, or where the
capture saw no value (a kernel traced but not run): then every value of its type. The result
says which values were the script's and which were ranges (`Result.values`), in the JSON and
in one line of the text report."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from semcheck import check_protocol, ir
from semcheck.passes.assumptions import Assumption
from semcheck.report import json as json_report
from semcheck.report import text
from semcheck.result import CheckedValues
from tests.tpu_kernels import instrs, line_of, mesh

HERE = __file__
INT32 = (-(1 << 31), (1 << 31) - 1)
DMA_SEMS, REGULAR_SEMS = pltpu.SemaphoreType.DMA((2,)), pltpu.SemaphoreType.REGULAR((2,))
BLOCK = (8, 128)


def _prefetched(kernel, prefetch, scratch, grid=(1,), x_rows=8):
    """per_device(block): `kernel(state_ref, x_hbm, o_hbm, *scratch)` over `grid`, with the
    scalar-prefetch operand `prefetch` a constant of the wrapper (as ragged paged attention
    passes its `(seq_idx, buf_idx)`)."""

    def per_device(block):
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=grid, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=list(scratch))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype), grid_spec=spec,
                              compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",) * len(grid)),
                              )(jnp.asarray(prefetch, jnp.int32), block)

    fn = jax.shard_map(per_device, mesh=mesh((2,)), in_specs=P("x"), out_specs=P("x"), check_vma=False)
    return fn, jnp.ones((2 * x_rows, 128), jnp.float32)


def _run(fn_and_x, assumed=()) -> list[ir.Protocol]:
    """The kernel's protocols with the operand values it receives when the script runs it."""
    from semcheck.frontends.capture import capture_function, lower_captures

    found, errors = lower_captures(capture_function(*fn_and_x, operand_values=True), assumed=assumed)
    assert not errors, errors
    return found


def _slot_kernel(state_ref, x_hbm, o_hbm, sems):
    slot = state_ref[1]  # <- the slot
    pl.semaphore_signal(sems.at[slot], 1)
    pl.semaphore_wait(sems.at[slot], 1)


def test_a_slot_the_wrapper_passes_as_the_constant_0_0_is_0():
    """Read as any int32, the slot was -1 in some run: invalid_semaphore_index, after which
    ragged paged attention's check stopped. It is the script's 0, on every device."""
    [p] = _run(_prefetched(_slot_kernel, (0, 0), [REGULAR_SEMS]))
    assert p.inputs == ()
    assert [s.sem.index for s in instrs(p, ir.Signal, 0) if s.sem.alloc == "sems"] == [0]
    result = check_protocol(p, engine="explicit")
    assert result.verdict.value == "safe", result.violations
    assert result.stats.states == 18
    assert result.values == CheckedValues(("state_ref",), ())
    line = line_of(HERE, "# <- the slot")
    assert {(u.what, u.loc.line, u.value, u.script_inputs) for u in p.data_uses} == {
        ("the signalled semaphore index", line + 1, 0, ("state_ref",)),
        ("the waited semaphore index", line + 2, 0, ("state_ref",)),
    }


def test_a_kernel_traced_but_not_run_checks_every_value_of_the_slot_and_says_why():
    """No script values (the script only traced the kernel): the slot is an input per device
    over int32, as before, and a note says why; -1 is then a bad index."""
    from semcheck.frontends.capture import capture_function, lower_captures

    [p], errors = lower_captures(capture_function(*_prefetched(_slot_kernel, (0, 0), [REGULAR_SEMS])))
    assert not errors, errors
    assert sorted((i.name, i.lo, i.hi, i.assumed) for i in p.inputs) == [
        ("state_ref[1]@d0", *INT32, False), ("state_ref[1]@d1", *INT32, False)]
    assert any("state_ref[1] is a scalar-prefetch operand whose script value is not known (the kernel was "
               "traced but not run" in note for note in p.notes), p.notes
    result = check_protocol(p)
    assert {v.kind for v in result.errors} == {"invalid_semaphore_index"}
    assert result.values == CheckedValues((), p.inputs)
    assert text.values_lines(result) == ["  values: over ranges state_ref[1] any int32"]


def test_an_assumed_prefetch_element_is_a_range_and_the_result_says_so():
    """`--assume 'state_ref[1]=0..1'`: the slot is an input per device over 0..1 (both slots
    checked), marked assumed in the result, its JSON and its values line."""
    [p] = _run(_prefetched(_slot_kernel, (0, 0), [REGULAR_SEMS]), assumed=["state_ref[1]"])
    assert sorted(i.name for i in p.inputs) == ["state_ref[1]@d0", "state_ref[1]@d1"]
    assert not p.data_uses  # nothing was taken from the script's 0
    result = check_protocol(p, engine="explicit", assume=[Assumption("state_ref[1]", 0, 1)])
    assert result.verdict.value == "safe", result.violations
    assert result.stats.states == 72  # the 18 of the script's slots, once per combination of two slots
    assert [(i.name, i.lo, i.hi, i.assumed) for i in result.values.ranges] == [
        ("state_ref[1]@d0", 0, 1, True), ("state_ref[1]@d1", 0, 1, True)]
    assert result.values.script == ()
    assert text.values_lines(result) == ["  values: over ranges state_ref[1] 0..1 (assumed)"]
    [row] = json.loads(json_report.render([result]))["results"]
    assert row["values"] == {"script": [], "ranges": [
        {"name": "state_ref[1]@d0", "lo": 0, "hi": 1, "assumed": True},
        {"name": "state_ref[1]@d1", "lo": 0, "hi": 1, "assumed": True}], "withheld": [], "fed": []}
    wider = check_protocol(p, engine="explicit", assume=[Assumption("state_ref[1]", 0, 2)])
    assert {v.kind for v in wider.errors} == {"invalid_semaphore_index"}


STEPS = 4


def _flip_kernel(state_ref, x_hbm, o_hbm, sems, flag_sem):
    """Each step signals and waits on the slot in state_ref[0], then flips it for the next;
    the step that sees the flag in state_ref[1] set signals flag_sem and clears the flag."""
    slot = state_ref[0]  # <- read each step
    pl.semaphore_signal(sems.at[slot], 1)
    pl.semaphore_wait(sems.at[slot], 1)
    state_ref[0] = 1 - slot

    @pl.when(state_ref[1] == 1)  # <- the flag
    def _():
        pl.semaphore_signal(flag_sem, 1)
        state_ref[1] = 0

    @pl.when(pl.program_id(0) == STEPS - 1)
    def _():
        pl.semaphore_wait(flag_sem, 1)


def test_the_kernels_own_stores_to_scalar_prefetch_are_followed_from_step_to_step():
    """Step 0 reads the script's (1, 1); later steps read what the step before stored: the
    slot flipped (0, 1, 0: computed from the script's 1, so still its value's consequence),
    and the flag cleared (0). Read as a fresh input at each step, the flag could signal
    again and the slot could be -1. (Which script operands a value depends on is tracked
    per buffer: the flag's 0 shares state_ref with the flipped slot, so it is counted as
    depending on the script's state_ref too, erring towards "depends".)"""
    [p] = _run(_prefetched(_flip_kernel, (1, 1), [REGULAR_SEMS, pltpu.SemaphoreType.REGULAR], grid=(STEPS,)))
    assert p.inputs == ()
    slot_line = line_of(HERE, "# <- read each step") + 1
    flag_line = line_of(HERE, "# <- the flag")
    uses = [(u.value, u.script_inputs) for u in p.data_uses
            if u.device == 0 and u.loc.line == slot_line and u.what == "the signalled semaphore index"]
    assert uses == [(1, ("state_ref",)), (0, ("state_ref",)), (1, ("state_ref",)), (0, ("state_ref",))]
    assert [u.value for u in p.data_uses if u.device == 0 and u.loc.line == flag_line] == [1, 0, 0, 0]
    assert [s.sem.index for s in instrs(p, ir.Signal, 0) if s.sem.alloc == "sems"] == [1, 0, 1, 0]
    assert len([s for s in instrs(p, ir.Signal, 0) if s.sem.alloc == "flag_sem"]) == 1
    assert check_protocol(p).verdict.value == "safe"


def _table_kernel(table_ref, x_hbm, o_hbm, sems):
    """Walks a table of row counts the wrapper passes, up to its first negative entry (a
    `while` whose trip count is read from scalar prefetch), copying that many rows each."""

    def cond(k):
        return jnp.logical_and(k < 4, table_ref[jnp.minimum(k, 3)] >= 0)

    def body(k):
        rows = table_ref[k]
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(0, rows)], o_hbm.at[pl.ds(0, rows)], sems.at[k % 2])
        copy.start()  # <- sized from the table
        copy.wait()
        return k + 1

    lax.while_loop(cond, body, 0)


def test_a_while_over_a_prefetched_table_and_its_ds_sizes_take_the_scripts_values():
    """The loop ran until the table's -1 (three copies), each sized by its entry; on main
    the loop condition read at a run-time index stopped the check."""
    [p] = _run(_prefetched(_table_kernel, (2, 5, 3, -1), [DMA_SEMS]))
    assert p.inputs == ()
    row = 128 * 4 // p.dma_unit  # a copy adds its size in the chip's DMA units (32 bytes on v5e)
    assert [s.nbytes for s in instrs(p, ir.DmaStart, 0)] == [2 * row, 5 * row, 3 * row]
    assert [s.src.size for s in instrs(p, ir.DmaStart, 1)] == [(2, 128), (5, 128), (3, 128)]
    result = check_protocol(p)
    assert result.verdict.value == "safe", result.violations
    assert result.values.script == ("table_ref",)


def _pick_kernel(state_ref, x_hbm, o_hbm, sem):
    """Signals the count a table (state_ref[1:], (2, 2, 3) here) holds for the slot in
    state_ref[0] and waits for 2: the read's index is known only at run time once the
    slot is a range."""
    count = state_ref[1 + state_ref[0]]  # <- picked by the slot
    pl.semaphore_signal(sem, count)
    pl.semaphore_wait(sem, 2)


def test_an_element_picked_by_an_assumed_index_is_exact_for_every_index():
    """The read is the sum over the table of (index == k) * element k, so every slot gives
    its own count: slots 0 and 1 are safe, slot 2 leaves 1 over. It was data semcheck could
    not know, and the lowering stopped at the signal."""
    [p] = _run(_prefetched(_pick_kernel, (0, 2, 2, 3), [pltpu.SemaphoreType.REGULAR]), assumed=["state_ref[0]"])
    assert sorted(i.name for i in p.inputs) == ["state_ref[0]@d0", "state_ref[0]@d1"]
    for engine in ("explicit", "z3"):
        safe = check_protocol(p, engine=engine, assume=[Assumption("state_ref[0]", 0, 1)])
        assert safe.verdict.value == "safe", (engine, safe.violations)
        wider = check_protocol(p, engine=engine, assume=[Assumption("state_ref[0]", 0, 2)])
        [leftover] = [v for v in wider.errors if v.kind == "semaphore_leftover"]
        assert {v.kind for v in wider.errors} == {"semaphore_leftover"}, (engine, wider.errors)
        assert leftover.inputs[f"state_ref[0]@d{leftover.device}"] == 2, (engine, leftover.inputs)


def _past_the_end_kernel(state_ref, x_hbm, o_hbm, sem):
    count = state_ref[pl.program_id(0) + 4]  # <- one past the end: JAX clamps it to element 3
    pl.semaphore_signal(sem, count)
    pl.semaphore_wait(sem, 2)


def test_a_read_past_the_end_of_an_assumed_operand_sees_the_element_jax_clamps_to():
    """Paged attention before jax-ml/jax 0e690c1a88 read lengths_ref[batch_size]. JAX's
    discharge clamps the index, so with the script's values the read sees the last element;
    with the operand assumed it must see that element's input, not 'data semcheck cannot
    know' (which made a branch an unconstrained input and gave findings no run has).

    The read itself is outside state_ref, and a TPU load is window-checked: the verdict is
    invalid_region at that line on every device (JAX's TPU interpreter raises; a chip reads
    whatever lies past the operand), and the thread stops there. What the read sees is
    then asserted on the signal it feeds."""
    [p] = _run(_prefetched(_past_the_end_kernel, (0, 0, 0, 2), [pltpu.SemaphoreType.REGULAR]))
    assert p.inputs == ()
    assert [s.inc for s in instrs(p, ir.Signal) if s.sem.alloc == "sem"] == [2]
    found = check_protocol(p, exhaustive=True).errors
    assert {(v.kind, v.device, v.location.line) for v in found} == {
        ("invalid_region", d, line_of(__file__, "# <- one past the end")) for d in (0, 1)}
    assert "the load's window [4:5] lies outside state_ref on device 0 of shape (4,)" in found[0].message
    [q] = _run(_prefetched(_past_the_end_kernel, (0, 0, 0, 2), [pltpu.SemaphoreType.REGULAR]), assumed=["state_ref"])
    assert sorted(i.name for i in q.inputs) == ["state_ref[3]@d0", "state_ref[3]@d1"]
    for d in (0, 1):
        assert [s.inc for s in instrs(q, ir.Signal, device=d) if s.sem.alloc == "sem"] == [ir.Reg(f"state_ref[3]@d{d}")]
    assert {v.kind for v in check_protocol(q, assume=[Assumption("state_ref", 0, 3)]).errors} == {"invalid_region"}
