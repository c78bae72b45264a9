"""Constructs of expert-parallel kernels (issue 11) and the memory-soundness items of issue 17:
zero-size copies and accesses, dynamic-size DMAs, `pl.select_ref`, semaphore indices known
only at run time, prefix results of a kernel whose lowering stops, chained views after a
data-dependent start, and out-of-bounds copy windows.

Protocol-level rules are checked with both engines (`tests.agreement`); kernel-level ones on
small kernels traced in this process."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from semcheck import check_protocol, ir
from tests.engine_check import check
from semcheck.passes.invocations import repeat
from semcheck.model import DMA, ProtocolBuilder
from semcheck.semantics import System
from tests.agreement import assert_engines_agree, kinds
from tests.tpu_kernels import instrs, line_of, mesh, protocols, sharded


def _builder(devices=1):
    return ProtocolBuilder("t", devices=devices, backend="tpu")


def _kinds_both(protocol) -> set[str]:
    by_search, _by_solver = assert_engines_agree(protocol)
    return kinds(by_search)


# --- zero sizes -------------------------------------------------------------------------------


def _copy_into_rows_then_store(rows: int):
    """A copy of `rows` rows landing at row 2 while the thread stores rows 0:4."""
    p = _builder()
    sem = p.semaphore("sem", DMA)
    src, dst = p.buffer("src", (8, 128)), p.buffer("dst", (8, 128))
    t = p.thread(0)
    copy = t.dma_start(src.region(0, size=(rows, 128)), dst.region(2, size=(rows, 128)), recv_sem=sem)
    t.store(dst.region(0, size=(4, 128)))
    copy.wait_recv()
    return p.build()


def test_a_zero_row_copy_races_with_nothing_it_starts_inside():
    assert _kinds_both(_copy_into_rows_then_store(0)) == set()
    assert _kinds_both(_copy_into_rows_then_store(1)) == {"data_race"}  # the control


def test_a_zero_byte_copy_completes_as_it_starts():
    """Nobody waits for it, yet nothing is left in flight for the next invocation; a 0-byte
    wait on its semaphore passes at once. Exact states: entry, start (both sides done),
    wait, exit, per invocation, plus the start state."""
    p = _builder(2)
    send, recv = p.semaphore("send", DMA), p.semaphore("recv", DMA)
    buf = p.buffer("buf", (8, 128))
    t = p.thread(0)
    t.entry()
    t.dma_start(buf.region(0, size=(0, 128)), buf.region(0, size=(0, 128)), recv_sem=recv,
                send_sem=send, device=1, nbytes=0)
    t.dma_wait(send, 0, side="send")
    t.exit()
    protocol = repeat(p.build(), 2)
    assert _kinds_both(protocol) == set()
    result = check(protocol, split=False, reduce=False)
    assert result.verdict.value == "safe"
    assert result.stats.states == 9


def test_a_zero_byte_copy_on_a_regular_semaphore_adds_its_one_at_the_start():
    """A REGULAR semaphore given to a DMA gains 1 per completion (v6+), 0 bytes or not; the
    completion happens at the start, so a wait for it right after passes and nothing hangs."""
    p = _builder()
    flag = p.semaphore("flag")
    buf = p.buffer("buf", (8, 128))
    t = p.thread(0)
    t.dma_start(buf.region(0, size=(0, 128)), buf.region(4, size=(0, 128)), recv_sem=flag, nbytes=0)
    t.wait(flag, 1)
    assert _kinds_both(p.build()) == set()
    system = System(p.build())
    [start] = system.initial_states()
    after = system.step(start, system.thread_steps[0])
    assert after.events == () and tuple(after.sems) == (1,)


def test_a_zero_byte_copy_reads_as_complete_at_once_in_the_trace():
    """Its trace step names no completion to come; a REGULAR semaphore's 1 is added at once."""
    from semcheck.semantics.trace import build

    for sem_kind, said in ((DMA, "signals nothing"), (None, "adds flag@d0 +1")):
        p = _builder()
        flag = p.semaphore("flag", sem_kind) if sem_kind else p.semaphore("flag")
        buf = p.buffer("buf", (8, 128))
        t = p.thread(0)
        t.dma_start(buf.region(0, size=(0, 128)), buf.region(4, size=(0, 128)), recv_sem=flag, nbytes=0)
        system = System(p.build())
        [start] = system.initial_states()
        [step] = build(system, start, [system.thread_steps[0]])
        text = step.text
        assert text.endswith(f"(zero bytes: complete at once, {said})"), text


# --- kernels ------------------------------------------------------------------------------------


DMA_SEM, REGULAR_SEM = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR
HERE = __file__
ROW = 128 * 4 // 32  # one f32 row of the test blocks (8, 128), in the DMA units of a TPU (32 bytes)


def _call(kernel, scratch=(), prefetch=None, out_space=pl.ANY):
    """per_device(block) running `kernel([flags_ref,] x_ref, o_ref, *scratch)`, with x in HBM
    and o in `out_space` (VMEM for a kernel that stores to it: Pallas TPU lowering refuses a
    store to an HBM ref); `prefetch` is the scalar-prefetch operand (an int32 array), if any."""

    def per_device(block):
        out_shape = jax.ShapeDtypeStruct(block.shape, block.dtype)
        any_spec = pl.BlockSpec(memory_space=pl.ANY)
        out_spec = pl.BlockSpec(memory_space=out_space)
        if prefetch is None:
            return pl.pallas_call(kernel, out_shape=out_shape, in_specs=[any_spec], out_specs=out_spec,
                                  scratch_shapes=list(scratch))(block)
        spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, in_specs=[any_spec], out_specs=out_spec,
                                            scratch_shapes=list(scratch))
        return pl.pallas_call(kernel, out_shape=out_shape, grid_spec=spec)(jnp.asarray(prefetch, jnp.int32), block)

    return per_device


def _evaluate(op: ir.Operand, registers: dict[str, int]) -> int:
    from semcheck.semantics import apply_op

    if isinstance(op, int):
        return op
    if isinstance(op, ir.Reg):
        return registers[op.name]
    return apply_op(op.op, _evaluate(op.a, registers), _evaluate(op.b, registers))


def _errors(per_device, devices=2):
    from semcheck.frontends.capture import capture_function, lower_captures

    return lower_captures(capture_function(*sharded(per_device, mesh((devices,)))))


# --- copies counting on a REGULAR semaphore --------------------------------------------------------


def test_a_copy_counting_on_a_regular_semaphore_says_it_adds_one_not_its_bytes():
    """The verdict rests on the completion's amount (a wait for 1 balances only if a copy adds
    1), which JAX 0.10.2's interpreter counts in bytes: the result says which rule it used.
    A copy on a DMA semaphore gets no such note (the control)."""
    from semcheck.lower.tpu_hardware import REGULAR_DMA_COUNT

    def waiting_for(amount):
        def on_regular(x_ref, o_ref, flag):
            pltpu.make_async_copy(x_ref, o_ref, flag).start()
            pl.semaphore_wait(flag, amount)
        return on_regular

    def on_dma(x_ref, o_ref, sem):
        copy = pltpu.make_async_copy(x_ref, o_ref, sem)
        copy.start()
        copy.wait()

    [regular] = protocols(_call(waiting_for(1), [REGULAR_SEM]), mesh((2,)))
    [start] = instrs(regular, ir.DmaStart, 0)
    assert start.nbytes == 8 * ROW  # the amount a DMA semaphore would get; a REGULAR one gains 1
    assert REGULAR_DMA_COUNT in regular.notes
    assert check_protocol(regular).verdict.value == "safe"
    [two] = protocols(_call(waiting_for(2), [REGULAR_SEM]), mesh((2,)))
    assert {v.kind for v in check_protocol(two, exhaustive=True).errors} == {"unsatisfied_wait"}
    assert REGULAR_DMA_COUNT in two.notes
    [dma] = protocols(_call(on_dma, [DMA_SEM]), mesh((2,)))
    assert not any("REGULAR semaphore" in note for note in dma.notes)
    assert check_protocol(dma).verdict.value == "safe"


# --- dynamic-size DMAs ----------------------------------------------------------------------------


def test_a_dma_sized_per_thread_has_exact_bytes_and_regions():
    def kernel(x_ref, o_ref, sem):
        rows = 2 + lax.axis_index("x")  # 2 rows on device 0, 3 on device 1
        copy = pltpu.make_async_copy(x_ref.at[pl.ds(1, rows)], o_ref.at[pl.ds(0, rows)], sem)
        copy.start()
        copy.wait()

    [p] = protocols(_call(kernel, [DMA_SEM]), mesh((2,)))
    for device, rows in ((0, 2), (1, 3)):
        [start] = instrs(p, ir.DmaStart, device)
        [wait] = instrs(p, ir.DmaWait, device)
        assert (start.nbytes, wait.nbytes) == (rows * ROW, rows * ROW)
        assert start.src.start == (1, 0) and start.src.size == (rows, 128)
        assert start.dst.start == (0, 0) and start.dst.size == (rows, 128)
    assert check_protocol(p).verdict.value == "safe"


def test_a_dma_sized_from_scalar_prefetch_is_symbolic():
    """The byte count and the window follow the caller's value: a wait for a fixed 4 rows
    matches only a count of 4 (else it hangs, or leaves bytes over)."""
    from semcheck.passes.assumptions import Assumption, apply

    def kernel(counts_ref, x_ref, o_ref, sem):
        rows = counts_ref[0]
        pltpu.make_async_copy(x_ref.at[pl.ds(0, rows)], o_ref.at[pl.ds(0, rows)], sem).start()
        pltpu.make_async_copy(x_ref.at[pl.ds(0, 4)], o_ref.at[pl.ds(0, 4)], sem).wait()  # 4 rows

    [p] = protocols(_call(kernel, [DMA_SEM], prefetch=[4]), mesh((2,)))
    [start] = instrs(p, ir.DmaStart, 0)[:1]
    rows = ir.Reg("counts_ref[0]@d0")
    assert ir.registers_of(start.nbytes) == {rows.name}
    assert [_evaluate(start.nbytes, {rows.name: n}) for n in (0, 3)] == [0, 3 * ROW]
    assert start.src.size == (rows, 128) and start.dst.size == (rows, 128)
    bounded = apply(p, [Assumption("counts_ref[0]", 3, 5)])
    result = check_protocol(bounded, exhaustive=True)
    by_kind = {v.kind: v for v in result.errors}
    assert set(by_kind) == {"unsatisfied_wait", "semaphore_leftover"}
    assert 3 in by_kind["unsatisfied_wait"].inputs.values()
    assert 5 in by_kind["semaphore_leftover"].inputs.values()
    assert check_protocol(apply(p, [Assumption("counts_ref[0]", 4, 4)])).verdict.value == "safe"
    assert check_protocol(apply(p, [Assumption("counts_ref[0]", 3, 5)]), engine="z3").verdict.value == "violation"


def test_a_dma_size_semcheck_cannot_know_names_the_size_and_where_it_came_from():
    def kernel(x_ref, o_ref, rows_ref, sem):
        rows = rows_ref[0]  # <- loaded from a VMEM buffer
        pltpu.make_async_copy(x_ref.at[pl.ds(0, rows)], o_ref.at[pl.ds(0, rows)], sem).start()  # <- sized

    found, errors = _errors(_call(kernel, [pltpu.SMEM((1,), jnp.int32), DMA_SEM]))
    assert not found
    [error] = errors
    assert error.message.startswith("dma_start: the size of the DMA destination along its dim 0")
    where = ir.Loc(HERE, line_of(HERE, "# <- loaded from a VMEM"))
    assert f"depends on the value loaded from rows_ref at {where}" in error.message
    assert error.line == line_of(HERE, "# <- sized")
    assert "ShapedArray" not in error.message


def _protocols_with_values(per_device, devices=2) -> list[ir.Protocol]:
    """The kernel's Protocols with the operand values it receives when it runs (ones)."""
    from semcheck.frontends.capture import capture_function, lower_captures

    found, errors = lower_captures(capture_function(*sharded(per_device, mesh((devices,))), operand_values=True))
    assert not errors, errors
    return found


def _blocked_fetch_then_signal(wait_for: int):
    """Blocks of x fetched by a double-buffered copy sized `lax.select(valid, 4, 0)` (the
    prefetch past the last block moves 0 rows, as fused MoE kernels fetch their gating
    blocks); each block's first element (1.0 in the test's ones) is the signal amount."""
    rows_per_block, blocks = 4, 2

    def kernel(x_ref, o_ref, buf, sems, counter):
        def fetch(b):
            rows = lax.select(jnp.logical_and(0 <= b, b < blocks), rows_per_block, 0)
            return pltpu.make_async_copy(x_ref.at[pl.ds(b * rows_per_block, rows)],
                                         buf.at[b % 2, pl.ds(0, rows)], sems.at[b % 2])

        fetch(0).start()

        def body(b, carry):
            fetch(b + 1).start()
            fetch(b).wait()
            pl.semaphore_signal(counter, buf[b % 2, 0, 0].astype(jnp.int32))  # <- amount from the block
            return carry

        lax.fori_loop(0, blocks, body, 0)
        pl.semaphore_wait(counter, wait_for)

    scratch = [pltpu.VMEM((2, rows_per_block, 128), jnp.float32), DMA_SEM((2,)), REGULAR_SEM]
    return _call(kernel, scratch)


def test_data_a_select_sized_copy_brings_is_evaluated_per_iteration():
    """The copy's window has a traced size (a dynamic-shape aval), known per iteration: the
    data it moves is followed, so the signal amounts are known (issue 11, tpu-inference's
    fused MoE gating fetch)."""
    [p] = _protocols_with_values(_blocked_fetch_then_signal(wait_for=2))
    starts = instrs(p, ir.DmaStart, 0)
    assert [s.nbytes for s in starts] == [4 * ROW, 4 * ROW, 0]  # the last prefetch is empty
    assert [s.inc for s in instrs(p, ir.Signal, 0) if s.sem.alloc == "counter"] == [1, 1]
    line = line_of(HERE, "# <- amount from the block")
    assert {u.loc.line for u in p.data_uses} == {line}
    assert all(u.script_inputs == ("x_ref",) for u in p.data_uses)
    assert check_protocol(p).verdict.value == "safe"
    [p_bad] = _protocols_with_values(_blocked_fetch_then_signal(wait_for=3))
    assert "unsatisfied_wait" in {v.kind for v in check_protocol(p_bad).errors}


def test_a_wait_through_a_reshaped_view_with_a_traced_size_counts_its_bytes():
    def kernel(x_ref, o_ref, buf, sem):
        rows = 2 + lax.axis_index("x")
        flat = buf.reshape(8, 128)
        pltpu.make_async_copy(x_ref.at[pl.ds(0, rows)], flat.at[pl.ds(0, rows)], sem).start()
        pltpu.make_async_copy(flat.at[pl.ds(0, rows)], flat.at[pl.ds(0, rows)], sem).wait()

    [p] = protocols(_call(kernel, [pltpu.VMEM((2, 4, 128), jnp.float32), DMA_SEM]), mesh((2,)))
    for device, rows in ((0, 2), (1, 3)):
        [start] = instrs(p, ir.DmaStart, device)
        [wait] = instrs(p, ir.DmaWait, device)
        assert (start.nbytes, wait.nbytes) == (rows * ROW, rows * ROW)
        assert (start.dst.start, start.dst.size) == ((0, 0, 0), (1, rows, 128))
    assert check_protocol(p).verdict.value == "safe"


def test_a_copy_through_a_reshaped_view_at_an_unknown_offset_counts_its_bytes():
    """tpu-inference's batched RPA writeback (bref_override.py:302-309): the destination is
    `ref.reshape(-1, ...).at[pl.ds(offset, sz)]`, the offset read from the page table (not
    known), the size known per thread. A reshape or bitcast keeps the bytes, so the copy
    moves what the last indexer's window holds, wherever it lies; its region is the buffer."""
    def kernel(x_ref, o_ref, offset_ref, buf, sem):
        rows = 2 + lax.axis_index("x")
        flat = buf.reshape(8, 128)
        window = flat.at[pl.ds(offset_ref[0], rows)]  # <- offset not known
        pltpu.make_async_copy(x_ref.at[pl.ds(0, rows)], window, sem).start()
        pltpu.make_async_copy(window, window, sem).wait()

    scratch = [pltpu.SMEM((1,), jnp.int32), pltpu.VMEM((2, 4, 128), jnp.float32), DMA_SEM]
    [p] = protocols(_call(kernel, scratch), mesh((2,)))
    for device, rows in ((0, 2), (1, 3)):
        [start] = instrs(p, ir.DmaStart, device)
        [wait] = instrs(p, ir.DmaWait, device)
        assert (start.nbytes, wait.nbytes) == (rows * ROW, rows * ROW)
        assert (start.dst.start, start.dst.size) == ((0, 0, 0), (2, 4, 128))  # the whole buffer
    assert check_protocol(p).verdict.value == "safe"


def test_an_empty_copy_through_a_reshaped_view_at_an_unknown_offset_touches_nothing():
    """The batched RPA writeback's size is `jnp.where(do_writeback, sz, 0)`: where it is 0
    the copy touches nothing wherever its unknown offset points, so it races with no copy
    in flight (before: its region was the whole buffer, a data_race warning)."""
    def kernel(x_ref, o_ref, offset_ref, buf, sems):
        flat = buf.reshape(8, 128)
        in_flight = pltpu.make_async_copy(x_ref.at[pl.ds(0, 4)], flat.at[pl.ds(0, 4)], sems.at[0])
        in_flight.start()
        rows = 0 * lax.axis_index("x")  # known per thread: 0
        empty = pltpu.make_async_copy(x_ref.at[pl.ds(0, rows)], flat.at[pl.ds(offset_ref[0], rows)], sems.at[1])
        empty.start()  # <- empty
        empty.wait()
        in_flight.wait()

    scratch = [pltpu.SMEM((1,), jnp.int32), pltpu.VMEM((2, 4, 128), jnp.float32), DMA_SEM((2,))]
    [p] = protocols(_call(kernel, scratch), mesh((2,)))
    [_, start] = instrs(p, ir.DmaStart, 0)
    assert start.nbytes == 0 and start.loc.line == line_of(HERE, "# <- empty")
    assert 0 in start.dst.size
    assert check_protocol(p).verdict.value == "safe"


# --- views ---------------------------------------------------------------------------------------


def test_a_chained_view_after_a_data_dependent_start_keeps_its_offset():
    """`o.at[pl.ds(idx, 4)].at[pl.ds(0, 2)]` lies somewhere in o, not at rows 0:2: a store to
    rows 4:6 while the copy is in flight may race with it (issue 17)."""

    def kernel(x_ref, o_ref, idx_ref, sem):
        window = o_ref.at[pl.ds(idx_ref[0], 4)].at[pl.ds(0, 2)]
        copy = pltpu.make_async_copy(x_ref.at[pl.ds(0, 2)], window, sem)
        copy.start()
        o_ref[pl.ds(4, 2), :] = jnp.zeros((2, 128), jnp.float32)  # <- races if idx is 3, 4 or 5
        copy.wait()

    [p] = protocols(_call(kernel, [pltpu.SMEM((1,), jnp.int32), DMA_SEM], out_space=pltpu.VMEM), mesh((2,)))
    [start] = instrs(p, ir.DmaStart, 0)
    assert (start.dst.start, start.dst.size) == ((0, 0), (8, 128))
    assert start.dst.widened and "dim 0" in start.dst.widened
    result = check_protocol(p)
    # whether it races depends on idx, which semcheck cannot follow: a warning, no verdict
    [race] = [v for v in result.warnings if v.kind == "data_race"]
    assert race.location.line == line_of(HERE, "# <- races if idx")
    assert "may be one no run reaches" in race.message and result.verdict.value == "inconclusive"


def test_chained_strided_views_compose_starts_and_strides():
    def kernel(x_ref, o_ref, sem):
        every_other = x_ref.at[pl.ds(1, 3, stride=2)]  # rows 1, 3, 5
        copy = pltpu.make_async_copy(every_other.at[pl.ds(1, 2)], o_ref.at[pl.ds(0, 2)], sem)  # rows 3, 5
        copy.start()
        copy.wait()

    [p] = protocols(_call(kernel, [DMA_SEM]), mesh((2,)))
    [start] = instrs(p, ir.DmaStart, 0)
    assert (start.src.start, start.src.size) == ((3, 0), (3, 128))  # rows 3 to 5
    assert start.nbytes == 2 * ROW


def _packed_slot_read(read_slot: int):
    """A bf16 double buffer read as packed u32 words (`buf.bitcast(u32).reshape(...)`, as
    fused MoE kernels read their token slots) while a copy into slot 1 is in flight."""

    def kernel(x_ref, o_ref, rows, buf, words_out, sem):
        pltpu.make_async_copy(rows, buf.at[1], sem).start()
        words = buf.bitcast(jnp.uint32).reshape(2, 4, 128)
        words_out[...] = words[read_slot]  # <- reads one slot
        pltpu.make_async_copy(rows, buf.at[1], sem).wait()

    scratch = [pltpu.VMEM((4, 2, 128), jnp.bfloat16), pltpu.VMEM((2, 4, 2, 128), jnp.bfloat16),
               pltpu.VMEM((4, 128), jnp.uint32), DMA_SEM]
    return _call(kernel, scratch)


def test_a_view_through_bitcast_and_reshape_touches_only_its_slot():
    """Packing two bf16 rows per u32 word keeps the slot's box: reading slot 0 does not
    race with the copy into slot 1 (it did when such views widened to the whole buffer)."""
    [p] = protocols(_packed_slot_read(0), mesh((2,)))
    [load] = [i for i in instrs(p, ir.Load, 0) if i.region.buffer == "buf"]
    assert (load.region.start, load.region.size) == ((0, 0, 0, 0), (1, 4, 2, 128))
    assert check_protocol(p).verdict.value == "safe"
    [p_bad] = protocols(_packed_slot_read(1), mesh((2,)))
    [race] = [v for v in check_protocol(p_bad).errors if v.kind == "data_race"]
    assert race.location.line == line_of(HERE, "# <- reads one slot")


# --- pl.select_ref ---------------------------------------------------------------------------------


def test_a_select_ref_with_a_known_index_picks_its_ref():
    def kernel(x_ref, o_ref, sems):
        def step(i, carry):
            sem = pl.select_ref(i % 2, sems.at[0], sems.at[1])
            copy = pltpu.make_async_copy(x_ref.at[pl.ds(i, 1)], o_ref.at[pl.ds(i, 1)], sem)
            copy.start()
            copy.wait()
            return carry

        lax.fori_loop(0, 3, step, 0)

    [p] = protocols(_call(kernel, [DMA_SEM((2,))]), mesh((2,)))
    assert [s.recv_sem.index for s in instrs(p, ir.DmaStart)] == [0, 1, 0]
    assert [w.sem.index for w in instrs(p, ir.DmaWait)] == [0, 1, 0]
    assert not instrs(p, ir.Branch)
    assert check_protocol(p).verdict.value == "safe"


def test_a_select_ref_with_a_run_time_index_branches_over_its_refs():
    """Mosaic's `_select_to_ifop`: option k for index k < n - 1, the last for any other."""

    def kernel(slot_ref, x_ref, o_ref, a_ref, b_ref, c_ref, sem):
        slot = slot_ref[0]
        source = pl.select_ref(slot, a_ref, b_ref, c_ref)
        pltpu.make_async_copy(source, o_ref, sem).start()
        pltpu.make_async_copy(x_ref, o_ref, sem).wait()

    scratch = [pltpu.VMEM((8, 128), jnp.float32)] * 3 + [DMA_SEM]
    [p] = protocols(_call(kernel, scratch, prefetch=[1]), mesh((2,)))
    from semcheck.semantics import System

    system = System(p)
    chosen = {}
    for value in (-1, 0, 1, 2, 7):
        state = system.initial_state(tuple(value for _ in p.inputs))
        while not isinstance(system.current(state, 0), ir.DmaStart):
            state = system.step(state, system.thread_steps[0])
        chosen[value] = system.current(state, 0).src.buffer
    assert chosen == {-1: "c_ref", 0: "a_ref", 1: "b_ref", 2: "c_ref", 7: "c_ref"}
    assert check_protocol(p).verdict.value == "safe"


def test_a_select_ref_on_buffer_contents_checks_every_option():
    """The slot comes from a buffer semcheck does not track: each device may pick either
    semaphore, and one pick leaves the wait on the other one hanging."""

    def kernel(x_ref, o_ref, slot_ref, sems):
        sem = pl.select_ref(slot_ref[0], sems.at[0], sems.at[1])  # <- picked from data
        pltpu.make_async_copy(x_ref, o_ref, sem).start()
        pltpu.make_async_copy(x_ref, o_ref, sems.at[0]).wait()

    [p] = protocols(_call(kernel, [pltpu.SMEM((1,), jnp.int32), DMA_SEM((2,))]), mesh((2,)))
    assert [(i.lo, i.hi) for i in p.inputs] == [(0, 1), (0, 1)]
    assert any("pl.select_ref" in note and "slot_ref" in note for note in p.notes)
    [stuck] = check_protocol(p).errors
    assert stuck.kind == "unsatisfied_wait" and 1 in stuck.inputs.values()


# --- semaphore indices semcheck cannot know -----------------------------------------------------


def test_a_semaphore_index_from_buffer_contents_branches_over_the_array():
    """`sems.at[slot_ref[0]]` with the slot kept in SMEM: every index of the array is
    checked on every device, so a signal to one slot with a wait on another is caught."""

    def kernel(x_ref, o_ref, slot_ref, sems):
        pl.semaphore_signal(sems.at[slot_ref[0]], 1)  # <- slot from SMEM
        pl.semaphore_wait(sems.at[0], 1)

    [p] = protocols(_call(kernel, [pltpu.SMEM((1,), jnp.int32), REGULAR_SEM((3,))]), mesh((2,)))
    assert [(i.lo, i.hi) for i in p.inputs] == [(0, 2), (0, 2)]
    [signal] = [s for s in instrs(p, ir.Signal) if s.sem.alloc == "sems"]
    assert isinstance(signal.sem.index, ir.Reg) and signal.sem.index.name == p.inputs[0].name
    assert any("slot_ref" in note and "every index 0..2" in note for note in p.notes)
    [stuck] = check_protocol(p).errors
    assert stuck.kind == "unsatisfied_wait" and set(stuck.inputs.values()) & {1, 2}


def test_a_run_time_semaphore_index_outside_the_array_is_invalid_semaphore_index():
    def kernel(slot_ref, x_ref, o_ref, sems):
        pl.semaphore_signal(sems.at[slot_ref[0]], 1)  # <- slot from scalar prefetch
        pl.semaphore_wait(sems.at[slot_ref[0]], 1)

    from semcheck.passes.assumptions import Assumption, apply

    [p] = protocols(_call(kernel, [REGULAR_SEM((2,))], prefetch=[1]), mesh((2,)))
    assert check_protocol(apply(p, [Assumption("slot_ref[0]", 0, 1)])).verdict.value == "safe"
    kinds_found = {v.kind for v in check_protocol(apply(p, [Assumption("slot_ref[0]", 0, 2)])).errors}
    assert kinds_found == {"invalid_semaphore_index"}


# --- copy windows outside their buffer --------------------------------------------------------------


def test_a_copy_window_outside_its_buffer_is_invalid_region_in_both_engines():
    """Rows 4 + d .. 8 + d of an 8-row block: inside on device 0, one row past the end on
    device 1 (JAX's TPU interpreter fails that copy with an out-of-bounds read)."""

    def kernel(x_ref, o_ref, sem):
        start = 4 + lax.axis_index("x")
        copy = pltpu.make_async_copy(x_ref.at[pl.ds(start, 4)], o_ref.at[pl.ds(0, 4)], sem)
        copy.start()  # <- window
        copy.wait()

    [p] = protocols(_call(kernel, [DMA_SEM]), mesh((2,)))
    for engine in ("explicit", "z3"):
        [fault] = check_protocol(p, engine=engine).errors
        assert fault.kind == "invalid_region" and fault.device == 1, engine
        assert fault.location.line == line_of(HERE, "# <- window")
        assert "[5:9, 0:128]" in fault.message and "shape (8, 128)" in fault.message


def test_window_bounds_follow_the_inputs_in_both_engines():
    p = _builder()
    sem = p.semaphore("sem", DMA)
    buf = p.buffer("buf", (4, 8))
    row = p.input("row", -1, 4)
    t = p.thread(0)
    copy = t.dma_start(buf.region(row, size=(1, 8)), buf.region(0, size=(1, 8)), recv_sem=sem)
    copy.wait_recv()
    t.dma_start(buf.region(row, size=(0, 8)), buf.region(4, size=(0, 8)), recv_sem=sem, nbytes=0)
    protocol = p.build()
    by_search, _by_solver = assert_engines_agree(protocol)
    assert kinds(by_search) == {"invalid_region"}
    # every row outside 0..3 faults at the first copy; an empty window at row 4 is inside
    system = System(protocol)
    faulting = set()
    for state in system.initial_states():
        after = system.step(state, system.thread_steps[0])
        if after.faults:
            faulting.add(state.inputs[0])
    assert faulting == {-1, 4}



def _gather_rows_into_the_tail(*, disable_bounds_checks: bool, always_one_row: bool = False):
    """The gather of fused MoE kernels: copy i moves `valid_i` rows (0 or 1, traced) into row
    6 + i of an 8-row buffer, so rows 8 and 9 are empty windows past the end (row 9's starts
    one past the extent); `always_one_row` makes them one row each, outside for real."""

    def kernel(x_ref, o_ref, sem):
        d = lax.axis_index("x")
        for i in range(4):
            row = d * 0 + 6 + i  # traced, as a row from metadata is (JAX refuses a static one past the end)
            valid = jnp.logical_or(row < 8, always_one_row).astype(jnp.int32)
            pltpu.make_async_copy(x_ref.at[pl.ds(i, valid)], o_ref.at[pl.ds(row, valid)], sem).start()  # <- gather
        pltpu.make_async_copy(x_ref.at[pl.ds(0, 2)], o_ref.at[pl.ds(6, 2)], sem).wait()

    def per_device(block):
        params = pltpu.CompilerParams(disable_bounds_checks=disable_bounds_checks)
        any_spec = pl.BlockSpec(memory_space=pl.ANY)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
                              in_specs=[any_spec], out_specs=any_spec, scratch_shapes=[DMA_SEM],
                              compiler_params=params)(block)

    [p] = protocols(per_device, mesh((2,)))
    return p


def test_an_empty_window_past_the_end_faults_only_where_bounds_are_checked():
    """With Mosaic's bounds check on (the default), JAX's interpreter fails the empty window
    that starts at row 9 of 8; with disable_bounds_checks=True nothing checks it and it
    moves nothing, so the kernel is safe, with a note saying why. A one-row window there
    is invalid_region either way."""
    checked = _gather_rows_into_the_tail(disable_bounds_checks=False)
    unchecked = _gather_rows_into_the_tail(disable_bounds_checks=True)
    outside = _gather_rows_into_the_tail(disable_bounds_checks=True, always_one_row=True)
    for engine in ("explicit", "z3"):
        [fault] = check_protocol(checked, engine=engine).errors
        assert fault.kind == "invalid_region" and "[9:9, 0:128]" in fault.message, engine
        assert fault.location.line == line_of(HERE, "# <- gather")
        result = check_protocol(unchecked, engine=engine)
        assert result.verdict.value == "safe" and not result.violations, engine
        [fault] = check_protocol(outside, engine=engine).errors
        assert fault.kind == "invalid_region" and "[8:9, 0:128]" in fault.message, engine
    assert any("disable_bounds_checks=True" in note for note in unchecked.notes)
    assert not any("disable_bounds_checks=True" in note for note in checked.notes)


# --- races on regions the lowering widened ------------------------------------------------------


def _race_at_a_row_read_from(row_source):
    """A copy of row 0 in flight while the kernel stores to a row `row_source(idx)` picks."""

    def kernel(x_ref, o_ref, idx, sem):
        copy = pltpu.make_async_copy(x_ref.at[pl.ds(0, 1)], o_ref.at[pl.ds(0, 1)], sem)
        copy.start()
        o_ref[pl.ds(row_source(idx), 1), :] = jnp.zeros((1, 128), jnp.float32)  # <- the store
        copy.wait()

    return _call(kernel, [pltpu.SMEM((1,), jnp.int32), DMA_SEM], out_space=pltpu.VMEM)


def test_a_race_on_a_row_semcheck_cannot_follow_is_a_warning_and_the_verdict_inconclusive():
    """The row comes from SMEM scratch nothing wrote: semcheck keeps the whole dim, so the
    race with the copy of row 0 may be one no run reaches (the row may be 3)."""
    for engine in ("explicit", "z3"):
        [result] = _verify(_race_at_a_row_read_from(lambda idx: idx[0]), engine=engine)
        assert result.verdict.value == "inconclusive", (engine, result)
        assert result.errors == []
        [race] = result.warnings
        assert race.kind == "data_race" and race.location.line == line_of(HERE, "# <- the store")
        assert "may be one no run reaches" in race.message and "dim 0" in race.message
        assert "widened" in result.unjustified
        assert any("may be one no run reaches" in note for note in result.notes)


def test_a_race_on_a_row_semcheck_knows_stays_a_violation():
    for engine in ("explicit", "z3"):
        [result] = _verify(_race_at_a_row_read_from(lambda idx: 0), engine=engine)
        assert result.verdict.value == "violation", engine
        [race] = result.errors
        assert race.kind == "data_race" and "may be one" not in race.message
        assert not any("no run reaches" in note for note in result.notes)


def test_a_widened_region_on_which_no_race_is_found_leaves_the_verdict_safe():
    """Widening only ever adds races: a kernel whose widened store races with nothing is safe."""

    def kernel(x_ref, o_ref, idx, sem):
        o_ref[pl.ds(idx[0], 1), :] = jnp.zeros((1, 128), jnp.float32)
        pltpu.make_async_copy(x_ref.at[pl.ds(0, 1)], o_ref.at[pl.ds(0, 1)], sem).start()
        pltpu.make_async_copy(x_ref.at[pl.ds(0, 1)], o_ref.at[pl.ds(0, 1)], sem).wait()

    [result] = _verify(_call(kernel, [pltpu.SMEM((1,), jnp.int32), DMA_SEM], out_space=pltpu.VMEM))
    assert result.verdict.value == "safe", result


def test_accesses_kept_from_every_branch_of_an_undecidable_branch_are_marked_widened():
    from semcheck.lower.emitter import Emitter

    em = Emitter()
    loc = ir.Loc("k.py", 3)
    em.emit(ir.Store(loc, ir.Region("a", (0,), (1,))))
    start = em.mark()
    em.emit(ir.Load(loc, ir.Region("a", (1,), (1,))))
    em.emit(ir.Signal(loc, ir.SemRef("s", 0), 1))
    em.widen_accesses_since(start, "kept from both branches")
    before, load, signal = em.items
    assert before.region.widened is None and load.region.widened == "kept from both branches"
    assert isinstance(signal, ir.Signal)
    assert load.region == ir.Region("a", (1,), (1,))  # the mark is not part of the region's identity


# --- prefix results ------------------------------------------------------------------------------


def _verify(per_device, devices=2, engine="explicit"):
    from semcheck import verify

    fn, x = sharded(per_device, mesh((devices,)))
    return verify(fn, x, engine=engine)


def test_a_race_before_an_unsupported_construct_is_a_violation_with_the_stop_noted():
    """The race happens whatever follows the construct semcheck cannot lower: a violation
    (a gate fails on it as on any other), not an error; the stop is a note."""
    def kernel(x_ref, o_ref, sem):
        copy = pltpu.make_async_copy(x_ref, o_ref, sem)
        copy.start()
        o_ref[0, :] = jnp.zeros((128,), jnp.float32)  # <- races with the copy in flight
        copy.wait()
        pltpu.async_copy(x_ref, o_ref, sem, add=True).wait()  # <- not lowerable

    stop = f":{line_of(HERE, '# <- not lowerable')} on 2 of 2 thread(s)"
    for engine in ("explicit", "z3"):
        [result] = _verify(_call(kernel, [DMA_SEM], out_space=pltpu.VMEM), engine=engine)
        assert result.verdict.value == "violation" and result.error is None, engine
        race, jax_refuses = sorted(result.errors, key=lambda v: v.kind)
        assert race.kind == "data_race" and race.location.line == line_of(HERE, "# <- races with the copy")
        # JAX's own TPU lowering refuses add=True too, at the same line
        assert jax_refuses.kind == "not_lowerable" and jax_refuses.location.line == line_of(HERE, "# <- not lowerable")
        [note] = [note for note in result.notes if "lowering stopped at" in note]
        assert stop in note and "it stopped there because dma_start: async_copy(add=True) is not lowerable" in note


def test_jax_refusing_a_copy_inside_a_helper_points_at_the_users_call():
    """pltpu.sync_copy is a run_scoped around a DMA: the DMA JAX refuses was bound inside
    JAX's helper, so the traceback JAX chains onto its error holds no line of the kernel's;
    the run_scoped equation around it does, and is where the finding points (not the
    kernel's def line)."""

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)
        pltpu.sync_copy(x_ref, o_ref, add=True)  # <- sync_copy add

    [result] = _verify(_call(kernel, out_space=pltpu.VMEM))
    [refused] = [v for v in result.violations if v.kind == "not_lowerable"]
    assert refused.location.line == line_of(HERE, "# <- sync_copy add")
    assert "DMA with add=True is not supported" in refused.message
    # the stop names the function the kernel called, not the async_copy it is built on
    [note] = [note for note in result.notes if "lowering stopped at" in note]
    assert "it stopped there because dma_start: sync_copy(add=True) is not lowerable" in note, note


def test_a_hang_at_the_cut_is_never_reported():
    """Device 1 waits for a signal device 0 would send after the construct semcheck cannot
    lower: the prefix has no verdict on it (and nothing else wrong)."""

    def kernel(x_ref, o_ref, sem, dma):
        me = lax.axis_index("x")

        @pl.when(me == 1)
        def _():
            pl.semaphore_wait(sem, 1)

        @pl.when(me == 0)
        def _():
            pltpu.async_copy(x_ref, o_ref, dma, add=True).wait()  # <- stops device 0
            pl.semaphore_signal(sem, 1, device_id=(1,))

    for engine in ("explicit", "z3"):
        [result] = _verify(_call(kernel, [REGULAR_SEM, DMA_SEM]), engine=engine)
        # no hang; JAX's own TPU lowering refuses add=True as semcheck does, at its line: a
        # violation found before the lowering stopped is a violation, the stop noted
        assert result.verdict.value == "violation" and result.error is None, engine
        assert [(v.kind, v.location.line) for v in result.violations] == [
            ("not_lowerable", line_of(HERE, "# <- stops device 0"))]
        assert any("1 of 2 thread(s)" in note and "no data race" in note for note in result.notes)


_STOPPING_SCRIPT = '''
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, PartitionSpec as P

def kernel(x_ref, o_ref, sem):
    copy = pltpu.make_async_copy(x_ref, o_ref, sem)
    copy.start()
    o_ref[0, :] = jnp.zeros((128,), jnp.float32)  # races with the copy
    copy.wait()
    pltpu.async_copy(x_ref, o_ref, sem, add=True).wait()  # not lowerable

def per_device(b):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(b.shape, b.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.SemaphoreType.DMA])(b)

if __name__ == "__main__":
    m = Mesh(np.array(jax.devices()), ("x",))
    f = jax.jit(jax.shard_map(per_device, mesh=m, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    f(jnp.ones((8 * m.size, 128), jnp.float32))
'''


def test_the_cli_reports_a_prefix_race_as_a_violation_and_exits_1(tmp_path, capsys):
    """Through the capture child (the prefix travels with the pickled error)."""
    import json

    from semcheck import cli

    script = tmp_path / "stopping.py"
    script.write_text(_STOPPING_SCRIPT)
    code = cli.main(["verify", str(script), "--devices", "2", "--format", "json", "-q"])
    [result] = json.loads(capsys.readouterr().out)["results"]
    assert code == 1 and result["verdict"] == "violation"
    assert any("stopping.py:12 on" in note and "it stopped there because dma_start: async_copy(add=True)" in note
               for note in result["notes"])
    found = sorted((v["kind"], v["location"]["line"]) for v in result["violations"])
    assert found == [("data_race", 10), ("not_lowerable", 12)]  # JAX's TPU lowering refuses add=True too
