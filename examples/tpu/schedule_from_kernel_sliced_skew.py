"""A copy schedule packed by one kernel, sliced one element early into the next kernel's
offsets: a data race.

As `schedule_from_kernel_sliced.py`, but the script slices the offsets table as
`meta[:MAX_COPIES]`, forgetting the count packed at element 0: the consumer's offsets are the
count (3) and then the first offsets, 0 and 8. `copy_kernel` starts a copy into rows 3..10 of
its output and one into rows 0..7 while the first is still in flight on the same semaphore,
and nothing orders the two.

The offsets are slices of the producer's HBM output, which the capture cannot compute.
semcheck's own lowering of the producer computes what it wrote (lower/produced.py), and the
slices place those elements (frontends/placing.py), so the consumer's copy windows are
concrete and the race is reported at the copy; the producer itself is safe. Before, the
sliced operands were an earlier kernel's zeros, not used, and the check stopped with an
error at the consumer's loop.
"""

# semcheck: expect data_race kernel=copy_kernel
# semcheck: expect safe kernel=metadata_kernel

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

COPIES = 3  # the copies the script schedules
MAX_COPIES = 8  # the offsets table's length
ROWS = 8  # rows per copy
STRIDE = ROWS  # rows between two scheduled copies


def metadata_kernel(count_ref, meta_hbm, table, sem):
    table[0] = count_ref[0]

    def schedule(i, carry):
        table[1 + i] = i * STRIDE
        return carry

    jax.lax.fori_loop(0, count_ref[0], schedule, 0)
    to_meta = pltpu.make_async_copy(table, meta_hbm.at[pl.ds(0, 1 + MAX_COPIES)], sem.at[0])
    to_meta.start()
    to_meta.wait()


def copy_kernel(steps_hbm, offsets_hbm, x_hbm, o_hbm, steps, offsets, sems):
    read_steps = pltpu.make_async_copy(steps_hbm, steps, sems.at[0])
    read_steps.start()
    read_steps.wait()
    read_offsets = pltpu.make_async_copy(offsets_hbm, offsets, sems.at[0])
    read_offsets.start()
    read_offsets.wait()

    def start(i, carry):
        rows = pl.ds(offsets[i], ROWS)
        pltpu.make_async_copy(x_hbm.at[rows], o_hbm.at[rows], sems.at[1]).start()  # <- data_race
        return carry

    def wait(i, carry):
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, ROWS)], o_hbm.at[pl.ds(0, ROWS)], sems.at[1]).wait()
        return carry

    jax.lax.fori_loop(0, steps[0], start, 0)
    jax.lax.fori_loop(0, steps[0], wait, 0)


def tables(meta):
    """The count and the offsets, sliced out of the packed metadata."""
    return meta[:1], meta[:MAX_COPIES]  # BUG: the offsets start at element 1, after the count


def schedule_then_copy(count, x, mesh):
    def per_device(count, block):
        any_space = pl.BlockSpec(memory_space=pl.ANY)
        meta = pl.pallas_call(
            metadata_kernel,
            out_shape=jax.ShapeDtypeStruct((2 * MAX_COPIES,), jnp.int32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[], out_specs=any_space,
                scratch_shapes=[pltpu.SMEM((1 + MAX_COPIES,), jnp.int32), pltpu.SemaphoreType.DMA((1,))]),
        )(count)
        steps, offsets = tables(meta)
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
