"""tcgen05 (Blackwell tensor core) operations on Mosaic GPU (semcheck/lower/gpu_tcgen05.py):
an MMA reads its SMEM operands until it completes, and its commit arrives on an mbarrier
once every earlier operation of the thread has completed; and the GPU constructs semcheck
does not model are errors naming them at the kernel's line (gpu_unsupported.py)."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from semcheck import ir
from semcheck.api import check_protocol
from tests.test_gpu_lowering import body, error, gpu_call, protocol
from tests.tpu_kernels import line_of

HERE = __file__

OPERANDS = dict(
    a=plgpu.SMEM((128, 128), jnp.float16),
    b=plgpu.SMEM((128, 128), jnp.float16),
    acc=plgpu.TMEM((128, 128), jnp.float32),
    done=plgpu.Barrier(orders_tensor_core=True),
)


def _kinds(instrs) -> list[str]:
    return [type(i).__name__ for i in instrs]


def _mma_kernel(store_before_wait: bool, separate_commit: bool):
    def kernel(x_ref, o_ref):
        @functools.partial(pl.run_scoped, **OPERANDS)
        def _(a, b, acc, done):
            if separate_commit:
                plgpu.tcgen05_mma(acc, a, b, accumulate=False)
                plgpu.tcgen05_commit_arrive(done)
            else:
                plgpu.tcgen05_mma(acc, a, b, done, accumulate=False)
            if store_before_wait:
                b[0, 0] = jnp.float16(1)  # the MMA may still be reading b
            plgpu.barrier_wait(done)
            a[0, 0] = jnp.float16(2)  # after the wait: the MMA is done with a

    return kernel


@pytest.mark.parametrize("separate_commit", [False, True])
def test_the_mma_reads_its_smem_operands_until_its_barrier_arrival(separate_commit):
    p = protocol(gpu_call(_mma_kernel(False, separate_commit), grid=(1,)), devices=1)
    # the issuing thread: one read in flight per SMEM operand, the commit, the wait, the store
    assert _kinds(body(p)) == ["DmaStart", "DmaStart", "Signal", "Wait", "Store"]
    # its tensor core (thread 4 * num_threads): the commit, both completions, the arrival
    tensor_core = body(p, sub=4)
    assert _kinds(tensor_core) == ["Wait", "Wait", "Signal"]
    assert tensor_core[1].value == 2 and tensor_core[2].sem.alloc == "done"
    result = check_protocol(p)
    assert result.verdict.value == "safe", [v.message for v in result.violations]
    assert result.stats.states == 11
    assert any("tcgen05" in n for n in result.notes)


@pytest.mark.parametrize("separate_commit", [False, True])
def test_a_store_into_an_mma_operand_before_the_barrier_wait_is_a_race(separate_commit):
    p = protocol(gpu_call(_mma_kernel(True, separate_commit), grid=(1,)), devices=1)
    result = check_protocol(p, exhaustive=True)  # every state: the count below is the whole search's
    [race] = result.errors
    assert race.kind == "data_race"
    assert race.location.line == line_of(HERE, "b[0, 0] = jnp.float16(1)  # the MMA may still be reading b")
    assert result.stats.states == 13


def test_a_commit_waits_for_every_earlier_mma_of_the_thread():
    def kernel(x_ref, o_ref):
        @functools.partial(pl.run_scoped, **OPERANDS)
        def _(a, b, acc, done):
            plgpu.tcgen05_mma(acc, a, b, accumulate=False)
            plgpu.tcgen05_mma(acc, a, b)
            plgpu.tcgen05_commit_arrive(done)
            plgpu.barrier_wait(done)
            a[...] = jnp.zeros_like(a)

    p = protocol(gpu_call(kernel, grid=(1,)), devices=1)
    [_, wait_all, _] = body(p, sub=4)
    assert wait_all.value == 4  # two operand reads of each MMA
    assert check_protocol(p).verdict.value == "safe"


def test_a_collective_mma_is_refused():
    def kernel(x_ref, o_ref):
        @functools.partial(pl.run_scoped, **OPERANDS)
        def _(a, b, acc, done):
            plgpu.tcgen05_commit_arrive(done, collective_axis="c")

    e = error(gpu_call(kernel, grid=(1,), cluster=(2,), cluster_names=("c",)))
    assert "collective tcgen05_commit_arrive" in e.message


# --- what semcheck refuses ---------------------------------------------------------------------


def test_inline_mgpu_is_refused_at_its_line():
    def kernel(x_ref, o_ref):
        @plgpu.inline_mgpu()
        def _named_barrier(ctx):
            pass

        _named_barrier()  # the inline Mosaic GPU call

    e = error(gpu_call(kernel, grid=(1,)))
    assert "plgpu.inline_mgpu runs Mosaic GPU code that semcheck cannot see" in e.message
    assert e.message.startswith("inline_mgpu_p:")
    assert e.line == line_of(HERE, "_named_barrier()  # the inline Mosaic GPU call")
    assert e.file == HERE


def test_dynamic_scheduling_is_refused_at_its_line_by_name():
    # JAX's blackwell_matmul_mgpu.py (sweep 6) loops with plgpu.dynamic_scheduling_loop, which
    # binds try_cluster_cancel first: the error said only "semcheck has no model of this
    # primitive ... please report it", though the table meant to refuse it by name.
    def kernel(x_ref, o_ref):
        @plgpu.dynamic_scheduling_loop(grid_names=("g0",))  # the scheduling loop
        def _(info):
            pass

    e = error(gpu_call(kernel, grid=(2,)))
    assert e.message.startswith("try_cluster_cancel: plgpu.try_cluster_cancel (dynamic block scheduling")
    assert "(the kernel cannot be checked)" in e.message
    assert e.line == line_of(HERE, "@plgpu.dynamic_scheduling_loop(grid_names=(\"g0\",))  # the scheduling loop")


def test_atomics_lower_to_atomic_stores_at_their_line():
    """Once refused (issue 19); modelled since issue 26 (tests/test_gpu_remote_atomics.py)."""
    def kernel(x_ref, o_ref):
        plgpu.atomic_add(o_ref.at[0, 0], jnp.float32(1))  # an atomic

    p = protocol(gpu_call(kernel, grid=(1,)))
    [store] = [i for i in body(p) if isinstance(i, ir.Store)]
    assert store.atomic
    assert store.loc.line == line_of(HERE, "plgpu.atomic_add(o_ref.at[0, 0], jnp.float32(1))  # an atomic")


def test_a_store_through_cluster_ref_is_refused():
    def kernel(x_ref, o_ref):
        @functools.partial(pl.run_scoped, buf=plgpu.SMEM((8, 128), jnp.float32))
        def _(buf):
            peer = plgpu.cluster_ref(buf, {"c": 1})
            peer[0, 0] = jnp.float32(1)  # into the other block's SMEM

    e = error(gpu_call(kernel, grid=(1,), cluster=(2,), cluster_names=("c",)))
    assert "plgpu.cluster_ref" in e.message
    assert e.line == line_of(HERE, "peer[0, 0] = jnp.float32(1)  # into the other block's SMEM")


def test_wait_gmem_to_smem_does_not_exist_in_this_jax():
    """Issue 15 asked for `wait_gmem_to_smem`; JAX 0.10.2's plgpu has no such function (TMA
    loads are waited for on their mbarrier), which docs/semantics.md says."""
    assert not hasattr(plgpu, "wait_gmem_to_smem")
