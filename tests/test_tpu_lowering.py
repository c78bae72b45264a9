"""Lowering of each TPU primitive and construct to the IR, checked on small kernels traced in
this process (the path of `semcheck.verify`): device ids, core indices, decrement flags,
semaphore_read registers, DMA sides and byte sizes, semaphore arrays, scoped and barrier
semaphores, the default device barrier, grid order and the megacore split, loops, branches,
emit_pipeline, and the source line of every instruction."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from semcheck import ir
from semcheck.lower.tpu_kernel import ARRIVE, RELEASE
from tests.tpu_kernels import hbm_call, instrs, line_of, mesh, protocols

REGULAR, DMA = pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA
HERE = __file__


def call(kernel, *, scratch=(), grid=(), collective_id=None, semantics=None, skip_barrier=False, **kw):
    """per_device(block) running `kernel(x_ref, o_ref, *scratch)` as a pallas_call."""
    params = pltpu.CompilerParams(
        collective_id=collective_id, dimension_semantics=semantics, skip_device_barrier=skip_barrier
    )
    return hbm_call(kernel, scratch=scratch, compiler_params=params, grid=grid, **kw)


def body_signals(protocol, device=0, core=0):
    """Signals of the kernel body (the default device barrier's are left out)."""
    return [s for s in instrs(protocol, ir.Signal, device, core) if s.sem.alloc not in (ARRIVE, RELEASE)]


# --- device ids -----------------------------------------------------------------------------


def test_mesh_tuple_ids_are_linearized_row_major_over_the_whole_mesh():
    def kernel(x_ref, o_ref, sem):
        x, y = lax.axis_index("x"), lax.axis_index("y")
        pl.semaphore_signal(sem, 1, device_id=(x, lax.rem(y + 1, 2)))
        pl.semaphore_wait(sem, 1)

    [p] = protocols(call(kernel, scratch=[REGULAR]), mesh((2, 2), ("x", "y")))
    assert p.devices == 4
    for device in range(4):
        x, y = divmod(device, 2)
        [signal] = body_signals(p, device)
        assert signal.sem.device == x * 2 + (y + 1) % 2
    assert p.threads[0].body[-1] == ir.KernelExit(p.loc, "kernel")


def test_dict_ids_fill_the_missing_axes_with_the_callers_own_coordinates():
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1, device_id={"y": 0})
        pl.semaphore_signal(sem, 1, device_id={("x", "y"): 3})  # a joint axis, split major to minor
        pl.semaphore_wait(sem, 2)

    [p] = protocols(call(kernel, scratch=[REGULAR]), mesh((2, 2), ("x", "y")))
    for device in range(4):
        x = device // 2
        dict_signal, joint_signal = body_signals(p, device)
        assert dict_signal.sem.device == x * 2 + 0
        assert joint_signal.sem.device == 3


def test_logical_ids_are_used_as_they_are():
    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")
        pl.semaphore_signal(sem, 1, device_id=lax.rem(me + 3, 4), device_id_type=pl.DeviceIdType.LOGICAL)
        pl.semaphore_wait(sem, 1)

    [p] = protocols(call(kernel, scratch=[REGULAR]), mesh((4,)))
    assert [body_signals(p, d)[0].sem.device for d in range(4)] == [3, 0, 1, 2]


def test_core_index_and_dict_core_axis_pick_the_target_core():
    cores = pltpu.create_tensorcore_mesh("core", num_cores=2)

    def body(x_hbm, o_hbm, sem):
        core = lax.axis_index("core")
        pl.semaphore_signal(sem, 1, core_index=1 - core)
        pl.semaphore_signal(sem, 1, device_id={"x": lax.axis_index("x"), "core": 1 - core})
        pl.semaphore_wait(sem, 2)

    def per_device(block):
        return pl.kernel(body, out_type=jax.ShapeDtypeStruct(block.shape, block.dtype), mesh=cores,
                         scratch_types=[REGULAR])(block)

    [p] = protocols(per_device, mesh((2,)))
    assert p.cores == 2 and len(p.threads) == 4
    for device in range(2):
        for core in range(2):
            local, remote = body_signals(p, device, core)
            assert (local.sem.device, local.sem.core) == (None, 1 - core)
            assert (remote.sem.device, remote.sem.core) == (device, 1 - core)


# --- waits, reads ----------------------------------------------------------------------------


def test_decrement_is_read_from_the_eqn_literal_not_the_pretty_printer():
    """The printer shows `[dec]` for both waits; the literal says the first is
    decrement=False, which JAX's TPU lowering makes an ordinary wait: both decrement, and
    the first carries the `lowered_as_decrementing` warning at its own line."""
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 2)
        pl.semaphore_wait(sem, 2, decrement=False)
        pl.semaphore_wait(sem, 2)

    [p] = protocols(call(kernel, scratch=[REGULAR]), mesh((2,)))
    assert [(w.sem.alloc, w.decrement) for w in instrs(p, ir.Wait) if w.sem.alloc not in (ARRIVE, RELEASE)] == [
        ("sem", True), ("sem", True)
    ]
    from semcheck import check_protocol

    result = check_protocol(p)
    assert [v.kind for v in result.errors] == ["unsatisfied_wait"]  # the second wait: nothing left
    [warning] = result.warnings
    assert warning.kind == "lowered_as_decrementing"
    assert warning.location.line == line_of(HERE, "pl.semaphore_wait(sem, 2, decrement=False)")


def test_semaphore_read_becomes_a_register_that_a_branch_tests():
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1)
        seen = pl.semaphore_read(sem)

        @pl.when(seen == 1)
        def _():
            pl.semaphore_wait(sem, 1)

    [p] = protocols(call(kernel, scratch=[REGULAR]), mesh((2,)))
    [read] = instrs(p, ir.Read)
    [branch] = instrs(p, ir.Branch)
    assert read.dst in ir.registers_of(branch.cond)
    assert read.loc.line == line_of(HERE, "seen = pl.semaphore_read(sem)")


# --- DMAs -------------------------------------------------------------------------------------


def test_dma_sides_byte_sizes_and_semaphore_arrays():
    def kernel(x_ref, o_ref, send_sems, recv_sems, local_sem):
        me = lax.axis_index("x")
        right = lax.rem(me + 1, 2)
        half = x_ref.at[pl.ds(0, 4)]  # f32[4, 128]: 2048 bytes, 64 DMA units of 32 bytes
        copy = pltpu.make_async_remote_copy(half, o_ref.at[pl.ds(4, 4)], send_sems.at[1, 2],
                                            recv_sems.at[3], device_id=(right,))
        copy.start()
        copy.wait_send()
        copy.wait_recv()
        row = pltpu.make_async_copy(x_ref.at[0], o_ref.at[1], local_sem)  # f32[128]: 512 bytes
        row.start()
        row.wait()

    scratch = [DMA((2, 3)), DMA((4,)), DMA]
    [p] = protocols(call(kernel, scratch=scratch, collective_id=None), mesh((2,)))
    remote, local = instrs(p, ir.DmaStart)
    assert (remote.nbytes, remote.device) == (2048 // 32, 1)
    assert remote.send_sem.index == 1 * 3 + 2 and remote.recv_sem.index == 3
    assert remote.dst == ir.Region(remote.dst.buffer, (4, 0), (4, 128))
    assert (local.nbytes, local.device, local.send_sem) == (512 // 32, None, None)
    assert [(w.side, w.nbytes, w.sem.index) for w in instrs(p, ir.DmaWait)] == [
        (ir.DmaSide.SEND, 2048 // 32, 5), (ir.DmaSide.RECV, 2048 // 32, 3), (ir.DmaSide.RECV, 512 // 32, 0)
    ]
    assert {d.name: d.size for d in p.semaphores if d.kind is ir.SemKind.DMA} == {
        "send_sems": 6, "recv_sems": 4, "local_sem": 1
    }


def test_dma_bytes_follow_the_dtype():
    def kernel(x_ref, o_ref, buf, sem):
        copy = pltpu.make_async_copy(buf.at[pl.ds(0, 16)], buf.at[pl.ds(16, 16)], sem)
        copy.start()
        copy.wait()

    [p] = protocols(call(kernel, scratch=[pltpu.VMEM((32, 128), jnp.bfloat16), DMA]), mesh((2,)))
    [start] = instrs(p, ir.DmaStart)
    assert start.nbytes == 16 * 128 * 2 // 32  # bytes, in the DMA units of a TPU (32 bytes)


# --- scopes, barriers ---------------------------------------------------------------------------


def test_run_scoped_semaphores_are_scoped_allocations():
    def kernel(x_ref, o_ref):
        def scope(sem, dma_sem):
            pl.semaphore_signal(sem, 1)
            pl.semaphore_wait(sem, 1)
            pltpu.async_copy(x_ref, o_ref, dma_sem).wait()

        pl.run_scoped(scope, REGULAR, DMA)

    [p] = protocols(call(kernel), mesh((2,)))
    scoped = {d.name: d for d in p.semaphores if d.origin is ir.SemOrigin.SCOPED}
    assert {d.kind for d in scoped.values()} == {ir.SemKind.REGULAR, ir.SemKind.DMA}


def test_barrier_semaphore_is_keyed_by_collective_id_and_replaces_the_default_barrier():
    def kernel(x_ref, o_ref):
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(lax.rem(lax.axis_index("x") + 1, 2),))
        pl.semaphore_wait(barrier, 1)

    [p] = protocols(call(kernel, collective_id=7), mesh((2,)))
    [barrier] = [d for d in p.semaphores if d.origin is ir.SemOrigin.BARRIER]
    assert (barrier.kind, barrier.collective_id) == (ir.SemKind.BARRIER, 7)
    assert not {ARRIVE, RELEASE} & {d.name for d in p.semaphores}
    # The only note states the choice the verdict rests on: no default barrier, with its basis.
    [note] = p.notes
    assert note.startswith("collective_id=7 is set, so no default device barrier runs before the body")
    assert "jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py" in note

    def no_barrier_kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 1)

    [unused] = protocols(call(no_barrier_kernel, scratch=[REGULAR], collective_id=3), mesh((2,)))
    assert any("collective_id=3 is set but the kernel never uses the barrier" in n for n in unused.notes)


def test_newer_jax_auto_assigned_collective_ids_key_the_barrier_without_a_default_barrier(monkeypatch):
    """JAX 0.11's jax_pallas_auto_assign_collective_ids (absent from 0.10.2, so simulated
    here): a barrier without collective_id is legal and gets an id; "override" replaces one."""
    from semcheck.lower import tpu_kernel as tpu_layout

    def kernel(x_ref, o_ref):
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(lax.rem(lax.axis_index("x") + 1, 2),))
        pl.semaphore_wait(barrier, 1)

    for mode, given in (("yes", None), ("override", 5)):
        monkeypatch.setattr(tpu_layout, "_auto_collective_ids", lambda mode=mode: mode)
        [p] = protocols(call(kernel, collective_id=given), mesh((2,)))
        [barrier] = [d for d in p.semaphores if d.origin is ir.SemOrigin.BARRIER]
        assert barrier.collective_id >= tpu_layout.AUTO_COLLECTIVE_BASE_ID
        assert not {ARRIVE, RELEASE} & {d.name for d in p.semaphores}
        assert any(f"jax_pallas_auto_assign_collective_ids={mode}" in n for n in p.notes)
    monkeypatch.setattr(tpu_layout, "_auto_collective_ids", lambda: "yes")
    [kept] = protocols(call(kernel, collective_id=9), mesh((2,)))
    assert [d.collective_id for d in kept.semaphores if d.origin is ir.SemOrigin.BARRIER] == [9]


def test_default_device_barrier_comes_before_the_body_unless_skipped():
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 1)

    [with_barrier] = protocols(call(kernel, scratch=[REGULAR]), mesh((4,)))
    body = with_barrier.threads[2].body
    assert isinstance(body[0], ir.KernelEntry)
    assert body[1] == ir.Signal(body[1].loc, ir.SemRef(ARRIVE, 0, 0, 0), 1)
    assert body[2] == ir.Wait(body[2].loc, ir.SemRef(RELEASE), 1)
    leader = with_barrier.threads[0].body
    assert sum(isinstance(i, ir.Signal) and i.sem.alloc == RELEASE for i in leader) == 4
    [without] = protocols(call(kernel, scratch=[REGULAR], skip_barrier=True), mesh((4,)))
    assert not {ARRIVE, RELEASE} & {d.name for d in without.semaphores}


def test_a_trace_names_the_default_device_barrier_by_what_it_is_and_a_peers_by_its_device():
    """The barrier's counters are semcheck's (the kernel names no `device_barrier.arrive`): a
    trace step says what they stand for, and the device a signal goes to where it is not the
    step's own."""
    from semcheck import check_protocol

    def kernel(x_ref, o_ref, sem):
        pl.semaphore_wait(sem, 1)  # nothing signals it

    [p] = protocols(call(kernel, scratch=[REGULAR]), mesh((2,)))
    [v] = check_protocol(p).errors
    # which device signals first is the schedule's: the counts are left out
    said = {(step.device, re.sub(r" \(\d+ -> \d+\)$", "", step.text)) for step in v.trace if step.semaphore_shown_as}
    assert said == {
        (0, "signal the arrivals at XLA's device barrier before the kernel += 1"),
        (1, "signal the arrivals at XLA's device barrier before the kernel on device 0 += 1"),
        (0, "wait the arrivals at XLA's device barrier before the kernel >= 2"),
        (0, "signal the release from XLA's device barrier before the kernel += 1"),
        (0, "signal the release from XLA's device barrier before the kernel on device 1 += 1"),
        (0, "wait the release from XLA's device barrier before the kernel >= 1"),
        (1, "wait the release from XLA's device barrier before the kernel >= 1"),
    }
    # every device arrives at device 0's counter, which releases every device's own
    assert {step.semaphore for step in v.trace if step.semaphore_shown_as} == {
        f"{ARRIVE}@d0", f"{RELEASE}@d0", f"{RELEASE}@d1"}


# --- grid, cores, control flow ----------------------------------------------------------------


def test_grid_runs_in_row_major_order_on_one_core():
    def kernel(x_ref, o_ref, sem):
        step = pl.program_id(0) * pl.num_programs(1) + pl.program_id(1)
        pl.semaphore_signal(sem, step + 1)
        pl.semaphore_wait(sem, step + 1)

    [p] = protocols(call(kernel, scratch=[REGULAR], grid=(2, 3)), mesh((2,)))
    assert [s.inc for s in body_signals(p)] == [1, 2, 3, 4, 5, 6]


def test_parallel_grid_is_also_checked_split_across_two_cores():
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, pl.program_id(0) + 1)
        pl.semaphore_wait(sem, pl.program_id(0) + 1)

    one, two = protocols(call(kernel, scratch=[REGULAR], grid=(4,), semantics=("parallel",)), mesh((2,)))
    assert (one.cores, two.cores) == (1, 2) and "2 TensorCores" in two.name
    assert [s.inc for s in body_signals(one)] == [1, 2, 3, 4]
    assert [s.inc for s in body_signals(two, 0, 0)] == [1, 2]
    assert [s.inc for s in body_signals(two, 0, 1)] == [3, 4]
    [only_one] = protocols(call(kernel, scratch=[REGULAR], grid=(4,), semantics=("parallel",)), mesh((2,)),
                           tpu_cores=1)
    assert only_one.cores == 1


def test_loops_with_known_bounds_are_unrolled():
    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")

        @pl.loop(0, 3)
        def _(i):
            pl.semaphore_signal(sem, i + 1)

        lax.fori_loop(0, me + 1, lambda i, c: (pl.semaphore_wait(sem, 1), c)[1], 0)  # a while
        pl.semaphore_wait(sem, 6 - me - 1)

    [p] = protocols(call(kernel, scratch=[REGULAR]), mesh((2,)))
    for device in range(2):
        assert [s.inc for s in body_signals(p, device)] == [1, 2, 3]
        waits = [w.value for w in instrs(p, ir.Wait, device) if w.sem.alloc not in (ARRIVE, RELEASE)]
        assert waits == [1] * (device + 1) + [6 - device - 1]
        assert not instrs(p, ir.Branch, device) and not instrs(p, ir.Jump, device)


def test_cond_with_a_known_predicate_keeps_only_the_taken_branch():
    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")
        lax.cond(me == 0, lambda: pl.semaphore_signal(sem, 5), lambda: pl.semaphore_signal(sem, 7))
        pl.semaphore_wait(sem, jnp.where(me == 0, 5, 7))

    [p] = protocols(call(kernel, scratch=[REGULAR]), mesh((2,)))
    assert [s.inc for s in body_signals(p, 0)] == [5]
    assert [s.inc for s in body_signals(p, 1)] == [7]


def test_loop_on_a_semaphore_read_becomes_an_ir_loop():
    def kernel(x_ref, o_ref, flag):
        me = lax.axis_index("x")

        @pl.when(me == 1)
        def _():
            pl.semaphore_signal(flag, 1, device_id=(0,))

        @pl.when(me == 0)
        def _():
            # (an unused read has no effect, so JAX would drop the loop: use its result)
            seen = lax.while_loop(lambda seen: seen == 0, lambda _: pl.semaphore_read(flag), 0)
            pl.semaphore_wait(flag, seen)

    [p] = protocols(call(kernel, scratch=[REGULAR]), mesh((2,)))
    body = p.threads[0].body
    assert any(isinstance(i, ir.Jump) and i.target < pc for pc, i in enumerate(body))
    assert any("spin forever" in note for note in p.notes)
    from semcheck import check_protocol

    assert check_protocol(p).verdict.value == "safe"


def test_emit_pipeline_lowers_to_balanced_local_dmas():
    def inner(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    def kernel(x_hbm, o_hbm):
        pltpu.emit_pipeline(inner, grid=(4,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                            out_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))])(x_hbm, o_hbm)

    [p] = protocols(call(kernel), mesh((2,)), rows=32)
    starts, waits = instrs(p, ir.DmaStart), instrs(p, ir.DmaWait)
    assert len(starts) == len(waits) == 8  # 4 blocks in, 4 blocks out
    assert all(s.device is None and s.send_sem is None and s.nbytes == 4096 // 32 for s in starts)
    emit_line = line_of(HERE, "pltpu.emit_pipeline(inner, grid=(4,)")
    assert {s.loc.line for s in starts} == {emit_line}
    # its semaphores are JAX's, allocated for the kernel: a report says whose (its closure
    # is `_emit_pipeline`'s, which the kernel calls)
    assert {d.name: d.shown_as for d in p.semaphores if d.origin is ir.SemOrigin.SCOPED} == {
        name: f"`{name}` of `pltpu.emit_pipeline` at line {emit_line}"
        for name in ("allocations[0].sem_recvs", "allocations[1].sem_sends")}
    from semcheck import check_protocol

    assert check_protocol(p).verdict.value == "safe"


def test_every_instruction_points_at_the_users_line_even_inside_helpers():
    cores = pltpu.create_tensorcore_mesh("core", num_cores=2)

    def body(x_hbm, o_hbm, sem):
        pltpu.core_barrier(sem, core_axis_name="core")
        pltpu.sync_copy(x_hbm, o_hbm)

    def per_device(block):
        return pl.kernel(body, out_type=jax.ShapeDtypeStruct(block.shape, block.dtype), mesh=cores,
                         scratch_types=[REGULAR])(block)

    [p] = protocols(per_device, mesh((2,)))
    barrier_line = line_of(HERE, 'pltpu.core_barrier(sem, core_axis_name="core")')
    copy_line = line_of(HERE, "pltpu.sync_copy(x_hbm, o_hbm)")
    lines = {(type(i).__name__, i.loc.line) for i in p.threads[1].body if not isinstance(i, (ir.KernelEntry, ir.KernelExit))}
    assert {("Signal", barrier_line), ("Wait", barrier_line), ("DmaStart", copy_line), ("DmaWait", copy_line)} <= lines
    assert all(i.loc.file == HERE for t in p.threads for i in t.body)


# --- semaphores between kernels, data-dependent branches -------------------------------------


def test_semaphores_passed_between_kernels_are_arguments():
    def producer(x_ref, sem_out):
        pl.semaphore_signal(sem_out, 1)

    def consumer(x_ref, sem_in, o_ref):
        pl.semaphore_wait(sem_in, 1)

    def per_device(block):
        sem = pl.pallas_call(producer, out_shape=REGULAR(()), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                             out_specs=pl.BlockSpec(memory_space=pltpu.SEMAPHORE))(block)
        return pl.pallas_call(
            consumer, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.SEMAPHORE)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
        )(block, sem)

    from semcheck import check_protocol

    # One program (semcheck/passes/programs.py): the consumer's semaphore is the producer's, so its
    # wait is satisfied by the producer's signal, and the count is judged at the program's end.
    [program] = protocols(per_device, mesh((2,)))
    assert program.kernels == ("producer", "consumer")
    assert program.semaphore("producer.sem_out").origin is ir.SemOrigin.HANDED_ON
    assert not any(d.name.startswith("consumer.sem_in") for d in program.semaphores)
    assert check_protocol(program).verdict.value == "safe"
    assert not any("start at 0" in note for note in program.notes)
    assert not any("are not judged at its exit" in note for note in program.notes)


def test_a_kernel_returning_semaphores_alone_says_they_are_not_judged_at_its_exit():
    def producer(x_ref, sem_out):
        pl.semaphore_signal(sem_out, 1)

    def per_device(block):
        pl.pallas_call(producer, out_shape=REGULAR(()), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                       out_specs=pl.BlockSpec(memory_space=pltpu.SEMAPHORE))(block)
        return block

    from semcheck import check_protocol

    [kernel] = protocols(per_device, mesh((2,)))
    result = check_protocol(kernel)
    # The count it leaves is for whatever takes the semaphore next, which was not captured:
    # no leftover is reported, and the result says so.
    assert result.verdict.value == "safe"
    assert any("semaphores this kernel returns" in n and "not judged at its exit" in n for n in result.notes)


def _prefetch_call(kernel, space=pl.ANY):
    """`space`: of x and o (VMEM for a kernel that loads or stores them: Pallas TPU lowering
    refuses a load or store of an HBM ref)."""
    def per_device(block):
        flags = jnp.zeros((1,), jnp.int32)
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=space)],
                out_specs=pl.BlockSpec(memory_space=space), scratch_shapes=[REGULAR]),
        )(flags, block)

    return per_device


def test_a_synchronizing_branch_on_buffer_contents_explores_every_outcome():
    def kernel(flags_ref, x_ref, o_ref, sem):
        @pl.when(x_ref[0, 0] > 0)
        def _():
            pl.semaphore_wait(sem, 1)  # nobody signals: stuck whenever the flag is set

    [p] = protocols(_prefetch_call(kernel, pltpu.VMEM), mesh((2,)))
    assert [(i.lo, i.hi) for i in p.inputs] == [(0, 1), (0, 1)]  # one per device
    assert any("depends on the value loaded from x_ref" in note for note in p.notes)
    from semcheck import check_protocol

    result = check_protocol(p)
    assert {v.kind for v in result.errors} == {"unsatisfied_wait"}
    assert result.errors[0].location.line == line_of(HERE, "pl.semaphore_wait(sem, 1)  # nobody signals")


def test_a_branch_on_buffer_contents_without_synchronization_keeps_both_sides_accesses():
    def kernel(flags_ref, x_ref, o_ref, sem):
        @pl.when(x_ref[0, 0] > 0)
        def _():
            o_ref[...] = x_ref[...]

    [p] = protocols(_prefetch_call(kernel, pltpu.VMEM), mesh((2,)))
    assert not p.inputs
    assert len(instrs(p, ir.Store)) == 1 and not instrs(p, ir.Branch)


def test_a_scalar_prefetch_element_is_an_input_on_each_device():
    """A signal count read from a scalar-prefetch operand is the caller's value: one input
    per device, over the whole int32 range until the user bounds it by the element's name."""
    from semcheck import check_protocol
    from semcheck.passes.assumptions import Assumption, apply

    def kernel(flags_ref, x_ref, o_ref, sem):
        pl.semaphore_signal(sem, flags_ref[0])
        pl.semaphore_wait(sem, 2)  # balanced only when the caller passes 2

    [p] = protocols(_prefetch_call(kernel), mesh((2,)))
    assert [(i.name, i.lo, i.hi) for i in p.inputs] == [
        ("flags_ref[0]@d0", -2**31, 2**31 - 1), ("flags_ref[0]@d1", -2**31, 2**31 - 1)
    ]
    bounded = apply(p, [Assumption("flags_ref[0]", 1, 3)])
    assert [(i.lo, i.hi) for i in bounded.inputs] == [(1, 3), (1, 3)]
    result = check_protocol(bounded, exhaustive=True)
    by_kind = {v.kind: v for v in result.errors}
    assert set(by_kind) == {"unsatisfied_wait", "semaphore_leftover"}
    assert by_kind["unsatisfied_wait"].location.line == line_of(HERE, "pl.semaphore_wait(sem, 2)  # balanced")
    assert 1 in by_kind["unsatisfied_wait"].inputs.values()  # one device passed 1: stuck
    assert 3 in by_kind["semaphore_leftover"].inputs.values()  # one passed 3: 1 left over
    assert check_protocol(apply(p, [Assumption("flags_ref[0]", 2, 2)])).verdict.value == "safe"


def test_a_scalar_prefetch_element_the_kernel_overwrote_is_not_an_input():
    """After the kernel's own store the element holds what the kernel wrote (followed in
    program order, lower/data.py): the amount read back is that 2, not the caller's input,
    and the protocol says it was read back from flags_ref."""
    from semcheck.frontends.capture import capture_function, lower_captures
    from tests.tpu_kernels import instrs, sharded

    def kernel(flags_ref, x_ref, o_ref, sem):
        flags_ref[0] = 2
        pl.semaphore_signal(sem, flags_ref[0])  # reads back the kernel's own 2

    [p], errors = lower_captures(capture_function(*sharded(_prefetch_call(kernel), mesh((2,)))))
    assert not errors and not p.inputs
    assert [s.inc for s in instrs(p, ir.Signal, device=1) if s.sem.alloc == "sem"] == [2]
    line = line_of(HERE, "flags_ref[0])  # reads back")
    assert {(u.what, u.loc.line, u.device, u.value, u.script_inputs, u.buffers) for u in p.data_uses} == {
        ("the signal increment", line, d, 2, (), ("flags_ref",)) for d in (0, 1)
    }


def test_jit_checkpoint_and_custom_jvp_bodies_are_lowered_in_place():
    def kernel(x_ref, o_ref, sem):
        me = lax.axis_index("x")
        step = jax.checkpoint(lambda a: a + 1)(jax.nn.relu(me * 2 - 1))  # remat2, custom_jvp_call
        pl.semaphore_signal(sem, step)
        pl.semaphore_wait(sem, step)

    [p] = protocols(call(kernel, scratch=[REGULAR]), mesh((2,)))
    assert [body_signals(p, d)[0].inc for d in range(2)] == [1, 2]


def test_emit_pipeline_over_a_core_axis_splits_the_blocks_between_cores():
    cores = pltpu.create_tensorcore_mesh("core", num_cores=2)

    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    def body(x_hbm, o_hbm):
        pltpu.emit_pipeline(add_one, grid=(4,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                            out_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))], core_axis_name="core",
                            dimension_semantics=(pltpu.PARALLEL,))(x_hbm, o_hbm)

    def per_device(block):
        return pl.kernel(body, out_type=jax.ShapeDtypeStruct(block.shape, block.dtype), mesh=cores)(block)

    [p] = protocols(per_device, mesh((2,)), rows=32)
    for core, rows in ((0, {0, 8}), (1, {16, 24})):
        reads = [s.src.start[0] for s in instrs(p, ir.DmaStart, 1, core) if s.src.buffer == "x_hbm"]
        assert set(reads) == rows
    from semcheck import check_protocol

    assert check_protocol(p).verdict.value == "safe"


# --- what semcheck cannot model is an error naming the primitive and the line --------------


def _lowering_errors(kernel, scratch=()):
    from semcheck.frontends.capture import capture_function, lower_captures
    from tests.tpu_kernels import sharded

    found, errors = lower_captures(capture_function(*sharded(call(kernel, scratch=scratch), mesh((2,)))))
    assert not found
    return errors


def test_unmodelled_constructs_are_errors_with_primitive_line_and_hint():
    def accumulating_copy(x_ref, o_ref, sem):
        pltpu.async_copy(x_ref, o_ref, sem, add=True).wait()

    def collective_scope(x_ref, o_ref):
        pl.run_scoped(lambda s: pl.semaphore_signal(s, 1), REGULAR, collective_axes="x")

    for kernel, scratch, primitive in (
        (accumulating_copy, [DMA], "dma_start"),
        (collective_scope, [], "run_scoped"),
    ):
        [error] = _lowering_errors(kernel, scratch)
        assert error.kernel == kernel.__name__
        assert error.message.startswith(f"{primitive}: ")
        body_line = kernel.__code__.co_firstlineno + 1  # each kernel is one line long
        assert (error.file, error.line) == (HERE, body_line)
        assert error.hint


def test_auto_assigned_ids_share_a_barrier_only_between_calls_of_the_same_kernel(monkeypatch):
    """JAX 0.11 assigns one id per distinct kernel (jax/_src/tpu_custom_call.py, keyed by the
    lowered module's hash): two different kernels of one program have barrier semaphores of
    their own, so a signal of the second cannot satisfy a wait of the first (JAX's
    test_auto_assigned_barrier_semaphores_no_data_corruption gives both collective_id=0 under
    "override"); two calls of one kernel share theirs, and are checked as one program."""
    from semcheck.lower import tpu_kernel as tpu_layout

    def ring(x_ref, o_ref):
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(lax.rem(lax.axis_index("x") + 1, 2),))
        pl.semaphore_wait(barrier, 1)

    def ring_twice(x_ref, o_ref):
        barrier = pltpu.get_barrier_semaphore()
        for _ in range(2):
            pl.semaphore_signal(barrier, 1, device_id=(lax.rem(lax.axis_index("x") + 1, 2),))
        pl.semaphore_wait(barrier, 2)

    monkeypatch.setattr(tpu_layout, "_auto_collective_ids", lambda: "override")
    first, second = call(ring, collective_id=0), call(ring_twice, collective_id=0)
    different = protocols(lambda block: second(first(block)), mesh((2,)))
    assert len(different) == 2 and not any(p.kernels for p in different)  # each alone
    ids = [d.collective_id for p in different for d in p.semaphores if d.origin is ir.SemOrigin.BARRIER]
    assert len(set(ids)) == 2
    [same] = protocols(lambda block: first(first(block)), mesh((2,)))
    assert same.kernels and len(same.kernels) == 2  # one barrier semaphore: one program
    monkeypatch.setattr(tpu_layout, "_auto_collective_ids", lambda: "no")  # ids as given: shared
    [linked] = protocols(lambda block: second(first(block)), mesh((2,)))
    assert linked.kernels and len(linked.kernels) == 2
    # the note says the kernels share it, and that a wait passing on the other's signal is reported
    assert any("share its barrier semaphore" in n and "remote_before_entry at that wait" in n
               for n in linked.notes)
