"""The buggy twin of dynamic_grid_double_buffer.py: it stops prefetching at the static bound.

The grid's extent is a run-time value, and the script passes 3 of at most MAX_BLOCKS = 4
blocks. The kernel prefetches the next block while `i + 1 < MAX_BLOCKS` rather than while
`i + 1 < pl.num_programs(0)`, so its last step (i = 2) starts the copy of block 3 into the
other slot, and no later step waits for it: that copy's DMA semaphore is still raised when
the kernel ends. With the grid's extent equal to MAX_BLOCKS the kernel would be correct,
so the verdict rests on the extent the script passed, which a note states.
"""

# semcheck: expect semaphore_leftover

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (8, 128)
MAX_BLOCKS = 4  # the buffers' capacity, in blocks
BLOCKS_PASSED = 3  # the grid's extent: how many blocks hold data this call
LAST_PREFETCH_BOUND = "static"  # prefetch while i + 1 < MAX_BLOCKS: a bug when fewer blocks are passed


def double_buffer_kernel(x_hbm, o_ref, buf, sems):
    i = pl.program_id(0)
    n = pl.num_programs(0) if LAST_PREFETCH_BOUND == "num_programs" else MAX_BLOCKS
    slot = i % 2

    def copy(block, into):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(block * BLOCK[0], BLOCK[0])], buf.at[into], sems.at[into])

    @pl.when(i == 0)
    def _():
        copy(0, 0).start()

    @pl.when(i + 1 < n)
    def _():
        copy(i + 1, 1 - slot).start()  # <- semaphore_leftover

    copy(i, slot).wait()
    o_ref[...] = buf[slot] * 2.0


def scale(x, blocks, mesh):
    def per_device(block, blocks):
        return pl.pallas_call(
            double_buffer_kernel,
            grid=(blocks[0],),  # known only at run time
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(BLOCK, lambda i: (i, 0)),
            scratch_shapes=[pltpu.VMEM((2, *BLOCK), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"), check_vma=False)
    )(x, blocks)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.ones((n * MAX_BLOCKS * BLOCK[0], BLOCK[1]), jnp.float32)
    out = scale(x, jnp.array([BLOCKS_PASSED], jnp.int32), mesh)
    jax.block_until_ready(out)
    print("dynamic grid double buffer, fixed bound:", out.shape)
