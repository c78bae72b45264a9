"""Grid-pipelined double buffering on DMA semaphores, by hand.

The kernel walks a grid of blocks. Step i copies block i+1 from HBM into the spare one of
two VMEM slots while it works on block i: the first step also starts the copy of block 0,
every step starts the copy of the next block (if there is one) and then waits for the copy
of its own block on that slot's DMA semaphore. The copies cross grid steps, so the grid must
run in order on one core: its dimension is "arbitrary". Every copy started is waited for
exactly once.
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (8, 128)
NUM_BLOCKS = 4
DIMENSION_SEMANTICS = ("arbitrary",)


def double_buffer_kernel(x_hbm, o_ref, buf, sems):
    i = pl.program_id(0)
    n = pl.num_programs(0)
    slot = i % 2

    def copy(block, into):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(block * BLOCK[0], BLOCK[0])], buf.at[into], sems.at[into])

    @pl.when(i == 0)
    def _():
        copy(0, 0).start()

    @pl.when(i + 1 < n)
    def _():
        copy(i + 1, 1 - slot).start()

    copy(i, slot).wait()
    o_ref[...] = buf[slot] * 2.0


def scale(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            double_buffer_kernel,
            grid=(NUM_BLOCKS,),
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(BLOCK, lambda i: (i, 0)),
            scratch_shapes=[pltpu.VMEM((2, *BLOCK), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
            compiler_params=pltpu.CompilerParams(dimension_semantics=DIMENSION_SEMANTICS),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.ones((n * NUM_BLOCKS * BLOCK[0], BLOCK[1]), jnp.float32)
    out = scale(x, mesh)
    jax.block_until_ready(out)
    print("double buffer:", out.shape, float(out.sum()))
