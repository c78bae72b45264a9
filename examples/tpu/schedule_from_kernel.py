"""A copy schedule computed by one kernel into part of its HBM outputs, run by the next: safe.

The program first runs `schedule_kernel`, which takes the script's count of copies as
scalar prefetch, stores one row offset per copy into an SMEM table at the loop's index (a
loop to that count), and writes the count and the table to its two HBM outputs by DMA: the
table's first MAX_COPIES elements only, of which the kernel stored COPIES (the rest of the
table is SMEM scratch it never stored, and the rest of the output is never written). The
second kernel, `copy_kernel`, takes both outputs as they are, copies them into SMEM, starts
one copy of ROWS rows per scheduled offset and then waits for all of them. The offsets are
ROWS apart, so no two copies in flight write the same rows.

semcheck's capture cannot run TPU kernels on a CPU, and this producer is no kernel whose
outputs it can prove exact (lower/exact_outputs.py: its outputs are in HBM, written by DMA).
Its own lowering computes them, though: it evaluates the kernel's data with the script's
count, so it knows the count and the COPIES offsets it wrote, and not the other elements
(lower/produced.py). The consumer starts with those elements known, so its loop bound and
its copy windows are concrete. Before, the operands were an earlier kernel's zeros, not
used, and the check stopped with an error at the consumer's loop. Its sibling
`schedule_from_kernel_overlap.py` puts the offsets half a window apart.
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

COPIES = 3  # the copies the script schedules
MAX_COPIES = 8  # the schedule table's length
ROWS = 8  # rows per copy
STRIDE = ROWS  # rows between two scheduled copies


def schedule_kernel(count_ref, steps_hbm, offsets_hbm, table, steps, sem):
    def schedule(i, carry):
        table[i] = i * STRIDE
        return carry

    jax.lax.fori_loop(0, count_ref[0], schedule, 0)
    steps[0] = count_ref[0]
    to_steps = pltpu.make_async_copy(steps, steps_hbm, sem.at[0])
    to_offsets = pltpu.make_async_copy(table, offsets_hbm.at[pl.ds(0, MAX_COPIES)], sem.at[0])
    to_steps.start()
    to_offsets.start()
    to_steps.wait()
    to_offsets.wait()


def copy_kernel(steps_hbm, offsets_hbm, x_hbm, o_hbm, steps, offsets, sems):
    read_steps = pltpu.make_async_copy(steps_hbm, steps, sems.at[0])
    read_steps.start()
    read_steps.wait()
    read_offsets = pltpu.make_async_copy(offsets_hbm.at[pl.ds(0, MAX_COPIES)], offsets, sems.at[0])
    read_offsets.start()
    read_offsets.wait()

    def start(i, carry):
        rows = pl.ds(offsets[i], ROWS)
        pltpu.make_async_copy(x_hbm.at[rows], o_hbm.at[rows], sems.at[1]).start()
        return carry

    def wait(i, carry):
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, ROWS)], o_hbm.at[pl.ds(0, ROWS)], sems.at[1]).wait()
        return carry

    jax.lax.fori_loop(0, steps[0], start, 0)
    jax.lax.fori_loop(0, steps[0], wait, 0)


def schedule_then_copy(count, x, mesh):
    def per_device(count, block):
        any_space = pl.BlockSpec(memory_space=pl.ANY)
        steps, offsets = pl.pallas_call(
            schedule_kernel,
            out_shape=(jax.ShapeDtypeStruct((1,), jnp.int32), jax.ShapeDtypeStruct((2 * MAX_COPIES,), jnp.int32)),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[], out_specs=(any_space, any_space),
                scratch_shapes=[pltpu.SMEM((MAX_COPIES,), jnp.int32), pltpu.SMEM((1,), jnp.int32),
                                pltpu.SemaphoreType.DMA((1,))]),
        )(count)
        return pl.pallas_call(
            copy_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[any_space, any_space, any_space],
            out_specs=any_space,
            scratch_shapes=[pltpu.SMEM((1,), jnp.int32), pltpu.SMEM((MAX_COPIES,), jnp.int32),
                            pltpu.SemaphoreType.DMA((2,))],
        )(steps, offsets, block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)
    )(count, x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    count = jnp.full((n,), COPIES, dtype=jnp.int32)
    x = jnp.arange(n * MAX_COPIES * ROWS * 128, dtype=jnp.float32).reshape(n * MAX_COPIES * ROWS, 128)
    out = schedule_then_copy(count, x, mesh)
    jax.block_until_ready(out)
    print("schedule then copy:", out.shape)
