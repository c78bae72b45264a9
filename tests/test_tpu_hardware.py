"""Kernels get the verdict a real TPU gives them (../shared/reference/tpu-observations.md,
docs/semantics.md "What the hardware does"): a non-decrementing wait decrements, DMA
semaphores count 32-byte units, a leftover under disable_semaphore_checks=True carries into
the next kernel, and what JAX's own TPU lowering rejects is `not_lowerable`. The kernels are
written the way kernels outside this project write these patterns (a check-in counter
polled with decrement=False as JAX's distributed GPU test does, a peer table indexed by the
device id, a byte-count poll of a copy's semaphore), each at 2 and 4 devices."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from hypothesis import HealthCheck, assume
from hypothesis import strategies as st
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from semcheck import check_protocol, ir, tpu_facts
from semcheck.engines.budget import Budget
from semcheck.engines.explicit import search as explicit
from semcheck.passes.invocations import repeat
from semcheck.kinds import Kind
from semcheck.semantics import System
from semcheck.engines.options import ExplicitOptions
from tests.agreement import assert_engines_agree
from tests.strategies import control_flow_protocols
from tests.tiers import example_counts, run_examples
from tests.tpu_kernels import hbm_call, line_of, mesh, protocols

REGULAR, DMA = pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA
HERE = __file__
DEVICES = [2, 4]


def per_device(kernel, *, scratch=(), **params):
    """A pallas_call of `kernel(x_hbm, o_hbm, *scratch)` on the device's block, with the
    compiler params `params`."""
    return hbm_call(kernel, scratch=scratch, compiler_params=pltpu.CompilerParams(**params))


def checked(kernel, devices: int, **kw):
    [protocol] = protocols(per_device(kernel, **kw), mesh((devices,)))
    return protocol, check_protocol(protocol, exhaustive=True)


def errors(result) -> set[str]:
    return {v.kind for v in result.errors}


# --- semaphore_wait(decrement=False) decrements on TPU -------------------------------------------


def check_in_then(drain: bool):
    def kernel(x_hbm, o_hbm, arrived):
        n = lax.axis_size("x")
        pl.semaphore_signal(arrived, 1, device_id=(0,), device_id_type=pl.DeviceIdType.MESH)

        @pl.when(lax.axis_index("x") == 0)
        def _():
            pl.semaphore_wait(arrived, n, decrement=False)  # "everyone has checked in"
            if drain:
                pl.semaphore_wait(arrived, n)  # take the count back to 0

    return kernel


@pytest.mark.parametrize("devices", DEVICES)
def test_a_non_decrementing_poll_followed_by_a_drain_hangs_in_the_drain(devices):
    _, result = checked(check_in_then(drain=True), devices, scratch=[REGULAR])
    assert errors(result) == {"unsatisfied_wait"}
    [hang] = result.errors
    assert hang.location.line == line_of(HERE, "pl.semaphore_wait(arrived, n)  # take")
    [warning] = result.warnings
    assert warning.kind == Kind.LOWERED_AS_DECREMENTING.value
    assert warning.location.line == line_of(HERE, "pl.semaphore_wait(arrived, n, decrement=False)")
    assert "_semaphore_wait_lowering_rule" in warning.message and "observed on TPU v5e" in warning.message


@pytest.mark.parametrize("devices", DEVICES)
def test_a_non_decrementing_poll_without_a_drain_leaves_nothing(devices):
    protocol, result = checked(check_in_then(drain=False), devices, scratch=[REGULAR])
    assert result.verdict.value == "safe"
    assert [w.kind for w in result.warnings] == [Kind.LOWERED_AS_DECREMENTING.value]
    waits = [i for t in protocol.threads for i in t.body if isinstance(i, ir.Wait) and i.sem.alloc == "arrived"]
    assert waits and all(w.decrement for w in waits)


def test_a_jax_that_rejected_the_wait_would_make_it_not_lowerable(monkeypatch):
    """The rule is keyed on the JAX version (tpu_facts.NONDECREMENTING_WAIT_RULES): a row
    saying a version rejects the wait turns the warning into that version's error, and the
    wait is then checked as written."""
    monkeypatch.setattr(tpu_facts, "NONDECREMENTING_WAIT_RULES", (
        tpu_facts.VersionRule((0, 0), None, tpu_facts.NonDecrementingWait.REJECTED, "a row for this test"),
    ))
    protocol, result = checked(check_in_then(drain=True), 2, scratch=[REGULAR])
    assert errors(result) == {"not_lowerable"}  # the drain passes: the poll took nothing
    assert "Non-decrementing wait is not supported" in result.errors[0].message


def test_the_version_table_reads_this_jax_and_says_when_a_version_is_beyond_what_was_read():
    rule, caveat = tpu_facts.nondecrementing_wait_rule((0, 10, 2))
    assert rule.behaviour is tpu_facts.NonDecrementingWait.DECREMENTS and caveat is None
    rule, caveat = tpu_facts.nondecrementing_wait_rule((0, 12, 0))
    assert rule.behaviour is tpu_facts.NonDecrementingWait.DECREMENTS and "newer" in caveat
    assert tpu_facts.parse_version("0.11.1.dev20260801") == (0, 11, 1)


# --- DMA semaphores count 32-byte units -----------------------------------------------------------


def byte_count_poll(limit_of):
    """Copy the 8x128 f32 block (4 KiB) locally, spin on its semaphore until it reads
    `limit_of(nbytes)` (the whole copy has landed), then take the copy with its wait."""
    def kernel(x_hbm, o_hbm, sem):
        copy = pltpu.make_async_copy(x_hbm, o_hbm, sem)
        copy.start()
        limit = limit_of(x_hbm.shape[0] * x_hbm.shape[1] * 4)
        seen = lax.while_loop(lambda seen: seen < limit, lambda _: pl.semaphore_read(sem), 0)

        @pl.when(seen >= limit)
        def _():
            copy.wait()

    return kernel


@pytest.mark.parametrize("devices", DEVICES)
def test_a_byte_count_poll_of_a_dma_semaphore_never_ends(devices):
    _, result = checked(byte_count_poll(lambda nbytes: nbytes), devices, scratch=[DMA])
    assert errors(result) == {"unsatisfied_wait"}
    assert "loops for ever" in result.errors[0].message
    assert tpu_facts.DMA_UNIT_NOTE in result.notes


@pytest.mark.parametrize("devices", DEVICES)
def test_a_poll_in_32_byte_units_ends(devices):
    _, result = checked(byte_count_poll(lambda nbytes: nbytes // 32), devices, scratch=[DMA])
    assert result.verdict.value == "safe", [v.message for v in result.violations]
    assert tpu_facts.DMA_UNIT_NOTE in result.notes


def test_a_kernel_copying_a_partial_unit_counts_bytes_with_a_note():
    def kernel(x_hbm, o_hbm, sem, small, small_sem):
        big = pltpu.make_async_copy(x_hbm, o_hbm, sem)
        big.start()
        big.wait()
        part = pltpu.make_async_copy(x_hbm.at[0, pl.ds(0, 25)], small, small_sem)  # 100 bytes
        part.start()
        part.wait()

    [p] = protocols(per_device(kernel, scratch=[DMA, pltpu.VMEM((25,), jnp.float32), DMA]), mesh((2,)))
    starts = [i for i in p.threads[0].body if isinstance(i, ir.DmaStart)]
    waits = [i for i in p.threads[0].body if isinstance(i, ir.DmaWait)]
    assert [s.nbytes for s in starts] == [8 * 128 * 4, 100] == [w.nbytes for w in waits]
    assert p.dma_unit == 1
    [note] = [n for n in p.notes if "not a whole number of 32-byte units" in n]
    assert "(first at tests/test_tpu_hardware.py:" in note and "counts its DMA semaphores in bytes" in note
    assert check_protocol(p).verdict.value == "safe"


def test_one_wait_for_several_odd_sized_copies_balances():
    """Three copies of 48 bytes and one wait through a descriptor of 144 (the MoE metadata
    all-gather's pattern): rounded up copy by copy (2 units each) the wait would take 5 of 6
    units and leave one; counted in bytes they balance."""
    def kernel(x_hbm, o_hbm, rows, sem):
        for k in range(3):
            pltpu.make_async_copy(x_hbm.at[pl.ds(k, 1), pl.ds(0, 12)], rows.at[pl.ds(k, 1)], sem).start()
        pltpu.make_async_copy(rows, rows, sem).wait()

    [p] = protocols(per_device(kernel, scratch=[pltpu.VMEM((3, 12), jnp.float32), DMA]), mesh((2,)))
    assert p.dma_unit == 1
    assert check_protocol(p, exhaustive=True).verdict.value == "safe"


def test_whole_units_are_counted_in_the_chips_unit():
    def kernel(x_hbm, o_hbm, sem):
        copy = pltpu.make_async_copy(x_hbm, o_hbm, sem)
        copy.start()
        copy.wait()

    [p] = protocols(per_device(kernel, scratch=[DMA]), mesh((2,)))
    assert p.dma_unit == 32
    assert [i.nbytes for i in p.threads[0].body if isinstance(i, (ir.DmaStart, ir.DmaWait))] == [128, 128]
    assert not [n for n in p.notes if "32-byte units" in n]  # no by-hand use: nothing to say


# --- leftovers: disable_semaphore_checks, the barrier semaphore -----------------------------------


def leaky_ring(x_hbm, o_hbm, buf, send, recv, extra):
    """Pass the block to the right neighbour; the receive wait goes through a descriptor of
    half the rows, so half of what lands is left on `recv`."""
    me, n = lax.axis_index("x"), lax.axis_size("x")
    copy = pltpu.make_async_remote_copy(x_hbm, buf, send, recv, device_id=(lax.rem(me + 1, n),),
                                        device_id_type=pl.DeviceIdType.MESH)
    copy.start()
    copy.wait_send()
    half = buf.at[pl.ds(0, buf.shape[0] // 2)]
    pltpu.make_async_copy(half, half, recv).wait()  # BUG: waits for half of the copy
    pltpu.sync_copy(buf, o_hbm)  # races with the next call's copy when the half is carried
    pl.semaphore_signal(extra, 1)  # BUG: never waited for


LEAKY_SCRATCH = [pltpu.VMEM((8, 128), jnp.float32), DMA, DMA, REGULAR]


@pytest.mark.parametrize("devices", DEVICES)
def test_a_leftover_with_the_checks_off_is_reported_and_names_the_setting(devices):
    protocol, result = checked(leaky_ring, devices, scratch=LEAKY_SCRATCH, disable_semaphore_checks=True)
    assert errors(result) == {"semaphore_leftover"}
    messages = [v.message for v in result.errors]
    assert all("disable_semaphore_checks=True" in m and "carries into the next kernel" in m for m in messages)
    unchecked = {d.name for d in protocol.semaphores if not d.checked_at_exit}
    # the scratch semaphores, and the run_scoped one sync_copy allocates
    assert unchecked == {d.name for d in protocol.semaphores if d.origin in (ir.SemOrigin.SCRATCH, ir.SemOrigin.SCOPED)}
    assert {"send", "recv", "extra"} < unchecked


@pytest.mark.parametrize("devices", DEVICES)
def test_with_the_checks_on_a_leftover_halts_the_chip(devices):
    _, result = checked(leaky_ring, devices, scratch=LEAKY_SCRATCH)
    assert errors(result) == {"semaphore_leftover"}
    assert all("halts the core" in v.message for v in result.errors)


@pytest.mark.parametrize("devices", DEVICES)
def test_the_next_call_starts_with_the_leftover_and_its_wait_passes_early(devices):
    """--invocations 2: with the checks off the half left on `recv` lets the second call's
    wait pass before its own copy landed, so it reads the buffer the copy is writing."""
    unchecked, _ = checked(leaky_ring, devices, scratch=LEAKY_SCRATCH, disable_semaphore_checks=True)
    checked_on, _ = checked(leaky_ring, devices, scratch=LEAKY_SCRATCH)
    for engine in ("explicit", "z3"):
        assert errors(check_protocol(repeat(unchecked, 2), engine=engine, exhaustive=True)) == {"semaphore_leftover", "data_race"}
        assert errors(check_protocol(repeat(checked_on, 2), engine=engine, exhaustive=True)) == {"semaphore_leftover"}  # zeroed


@pytest.mark.parametrize("devices", DEVICES)
def test_two_calls_in_one_function_are_one_program_when_the_first_leaves_its_counts(devices):
    def twice(**params):
        call = per_device(leaky_ring, scratch=LEAKY_SCRATCH, **params)
        return lambda block: call(call(block))

    [program] = protocols(twice(disable_semaphore_checks=True), mesh((devices,)))
    assert program.kernels and len(program.kernels) == 2
    assert "disable_semaphore_checks=True" in " ".join(program.notes)
    assert errors(check_protocol(program, exhaustive=True)) == {"semaphore_leftover", "data_race"}
    alone = protocols(twice(), mesh((devices,)))  # checks on: each call checked alone
    assert len(alone) == 1 and not alone[0].kernels  # the two equal calls are one check


def test_a_program_keeps_what_its_kernels_lowering_found():
    call = per_device(check_in_then(drain=False), scratch=[REGULAR], disable_semaphore_checks=True)
    [program] = protocols(lambda block: call(call(block)), mesh((2,)))
    assert len(program.kernels) == 2 and program.dma_unit == tpu_facts.DMA_UNIT_BYTES
    result = check_protocol(program, exhaustive=True)
    assert [w.kind for w in result.warnings] == [Kind.LOWERED_AS_DECREMENTING.value]


@pytest.mark.parametrize("devices", DEVICES)
def test_a_barrier_semaphore_leftover_says_the_chip_carries_it_to_the_same_collective_id(devices):
    def kernel(x_hbm, o_hbm):
        me, n = lax.axis_index("x"), lax.axis_size("x")
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(lax.rem(me + 1, n),), device_id_type=pl.DeviceIdType.MESH)
        pl.semaphore_signal(barrier, 1, device_id=(lax.rem(me + 1, n),), device_id_type=pl.DeviceIdType.MESH)
        pl.semaphore_wait(barrier, 1)  # BUG: one of the two signals is left

    _, result = checked(kernel, devices, collective_id=3)
    assert errors(result) == {"semaphore_leftover"}
    [leftover] = result.errors
    assert "raises no error" in leftover.message and "same collective_id" in leftover.message
    assert "halts" not in leftover.message


# --- JAX's own TPU lowering -----------------------------------------------------------------------


def peer_table_kernel(x_hbm, o_hbm, buf, send, recv):
    """Send to the peer a table built in the kernel names, read at the device's own id."""
    me, n = lax.axis_index("x"), lax.axis_size("x")
    peers = (lax.iota(jnp.int32, n) + 1) % n
    peer = peers[me]  # an array value at a traced index: a dynamic_slice
    copy = pltpu.make_async_remote_copy(x_hbm, buf, send, recv, device_id=(peer,),
                                        device_id_type=pl.DeviceIdType.MESH)
    copy.start()
    copy.wait()
    pltpu.sync_copy(buf, o_hbm)


@pytest.mark.parametrize("devices", DEVICES)
def test_a_table_indexed_by_the_device_id_is_not_lowerable_with_jaxs_message(devices):
    scratch = [pltpu.VMEM((8, 128), jnp.float32), DMA, DMA]
    _, result = checked(peer_table_kernel, devices, scratch=scratch)
    assert result.verdict.value == "violation" and errors(result) == {"not_lowerable"}
    [error] = result.errors
    assert error.severity == "error"
    assert "Unimplemented primitive in Pallas TPU lowering for tc: dynamic_slice" in error.message
    assert error.location.line == line_of(HERE, "peer = peers[me]")
    assert "iota" in error.hint and "SMEM" in error.hint
    from semcheck.report.graph import graphs_for

    assert graphs_for([result]) == []  # no schedule shows it: nothing for --graph to draw


def test_a_kernel_run_in_interpret_mode_is_still_lowered_for_tpu():
    """interpret=True lowers through JAX's interpreter on any platform, which refuses
    nothing; the kernel is still meant for a TPU, so the check lowers it for one."""
    def call(block):
        return pl.pallas_call(
            peer_table_kernel, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), DMA, DMA], interpret=True,
        )(block)

    [protocol] = protocols(call, mesh((2,)))
    [found] = protocol.findings
    assert found.kind is Kind.NOT_LOWERABLE and "dynamic_slice" in found.message


def test_a_kernel_jax_lowers_has_no_lowering_finding():
    _, result = checked(check_in_then(drain=False), 2, scratch=[REGULAR])
    assert Kind.NOT_LOWERABLE.value not in {v.kind for v in result.violations}


# --- the carried count in the semantics: reduction and engines on random protocols ---------------


def carried_and_repeated(draw_protocol):
    """A random TPU protocol whose scratch semaphores the chip may not check at exit
    (disable_semaphore_checks=True), called twice: the second entry keeps their counts."""

    @st.composite
    def build(draw):
        protocol = draw(draw_protocol)
        semaphores = tuple(
            dataclasses.replace(d, checked_at_exit=draw(st.booleans())) if d.origin is ir.SemOrigin.SCRATCH else d
            for d in protocol.semaphores
        )
        return repeat(dataclasses.replace(protocol, backend=ir.Backend.TPU, semaphores=semaphores), 2)

    return build()


def reduction_and_engines_agree_on_carried_counts(protocol):
    full = explicit.explore(System(protocol),
                            ExplicitOptions(reduce=False, silence_reported_races=False), budget=Budget(max_states=100_000))
    assume(full.exhausted is None)
    reduced = explicit.explore(System(protocol), ExplicitOptions(reduce=True, silence_reported_races=False))
    assert set(reduced.findings) == set(full.findings), protocol
    assert_engines_agree(protocol)


@pytest.mark.parametrize("examples", example_counts(fast=8, slow=60))
def test_carried_counts_keep_the_reduction_exact_and_the_engines_agreeing(examples):
    run_examples(reduction_and_engines_agree_on_carried_counts,
                 carried_and_repeated(control_flow_protocols(max_devices=2, max_cores=1, max_blocks=2)),
                 examples=examples, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def test_a_program_of_kernels_counting_different_units_counts_the_smaller():
    """Two kernels run one after another, the first counting 32-byte units, the second bytes
    (it copies 100 bytes): composed, the first's amounts are scaled to bytes, so a semaphore
    carried from one to the next counts one unit."""
    from semcheck.passes.programs import compose

    def whole(x_hbm, o_hbm, sem):
        copy = pltpu.make_async_copy(x_hbm, o_hbm, sem)
        copy.start()
        copy.wait()

    def odd(x_hbm, o_hbm, small, sem):
        copy = pltpu.make_async_copy(x_hbm.at[0, pl.ds(0, 25)], small, sem)
        copy.start()
        copy.wait()

    [first] = protocols(per_device(whole, scratch=[DMA]), mesh((2,)))
    [second] = protocols(per_device(odd, scratch=[pltpu.VMEM((25,), jnp.float32), DMA]), mesh((2,)))
    assert (first.dma_unit, second.dma_unit) == (32, 1)
    program = compose([first, second], [])
    assert program.dma_unit == 1
    amounts = [i.nbytes for i in program.threads[0].body if isinstance(i, (ir.DmaStart, ir.DmaWait))]
    assert amounts == [8 * 128 * 4, 8 * 128 * 4, 100, 100]
    assert check_protocol(program, exhaustive=True).verdict.value == "safe"
