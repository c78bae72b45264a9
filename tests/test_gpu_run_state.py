"""`pl.run_state` in a Mosaic GPU kernel: JAX's attention_mgpu.py computes PV as
`pl.run_state(compute_pv)(plgpu.ACC.init(acc))`, and `compute_pv` waits on the barrier of
the next K slot, indexed by a value it closes over (JAX hoists such values into refs). The
check stopped at "run_state: semcheck has no model of this primitive" (sweep 6). Now its
refs are the thread's own and hold their initial values, and what the body does with the
kernel's barriers and memory is lowered as anywhere else."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from semcheck import ir
from semcheck.api import check_protocol
from tests.test_gpu_lowering import body, gpu_call, protocol
from tests.tpu_kernels import line_of

HERE = __file__


def two_slot_kernel(wait_inside: bool):
    def kernel(x_ref, o_ref, tiles, barriers):
        plgpu.copy_gmem_to_smem(x_ref, tiles.at[0], barriers.at[0])
        plgpu.barrier_wait(barriers.at[0])

        def step(i, acc):
            nxt = lax.rem(i + 1, 2)
            plgpu.copy_gmem_to_smem(x_ref, tiles.at[nxt], barriers.at[nxt])

            def accumulate(acc_ref):
                acc_ref[...] += tiles[lax.rem(i, 2)]  # read the slot waited for
                if wait_inside:
                    plgpu.barrier_wait(barriers.at[nxt])  # the next slot's copy, inside

            return pl.run_state(accumulate)(plgpu.ACC.init(acc))

        lax.fori_loop(0, 2, step, jnp.zeros((8, 128), jnp.float32))

    scratch = [plgpu.SMEM((2, 8, 128), jnp.float32), plgpu.Barrier(num_barriers=2)]
    return gpu_call(kernel, grid=(1,), scratch=scratch)


def test_a_barrier_wait_inside_run_state_is_lowered_with_the_slot_it_closes_over():
    p = protocol(two_slot_kernel(wait_inside=True), devices=1)
    waits = [i for i in body(p) if isinstance(i, ir.Wait)]
    inside = line_of(HERE, "plgpu.barrier_wait(barriers.at[nxt])  # the next slot's copy, inside")
    # slot 0 before the loop, then slot 1 and slot 0 again from inside the run_state body
    assert [(w.sem.index, w.value, w.loc.line) for w in waits][1:] == [(1, 1, inside), (0, 2, inside)]
    result = check_protocol(p, exhaustive=True)
    assert (result.verdict.value, result.stats.states) == ("safe", 16)


def test_a_read_of_a_slot_whose_copy_nobody_waited_for_inside_run_state_is_a_race():
    # without the wait, step 1 reads slot 1 while its copy may still be landing
    p = protocol(two_slot_kernel(wait_inside=False), devices=1)
    result = check_protocol(p, exhaustive=True)
    assert result.verdict.value == "violation"
    assert {v.kind for v in result.violations} == {"data_race"}
    assert {v.location.line for v in result.violations} == {line_of(HERE, "# read the slot waited for")}

