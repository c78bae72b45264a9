"""Double buffering over a grid whose extent is a run-time value, as the script passes it.

Ragged kernels size their grid by data: tpu-inference's ragged paged attention (head_dim 64)
runs one grid step per sequence, `grid=(distribution[2],)`, a traced value. JAX passes such
an extent to the pallas_call as a leading operand, so semcheck checks the kernel for the
extent the script passed, here 3 of at most MAX_BLOCKS = 4 blocks (a note says so).

Each step prefetches the next block into the other slot while the current one is worked on,
and stops prefetching at the last step, `pl.num_programs(0)`, which is the run-time extent:
every copy started is waited for, and no slot is refilled while it is read.

dynamic_grid_double_buffer_fixed_bound.py is the buggy twin, which stops prefetching at the
static bound MAX_BLOCKS instead.
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
MAX_BLOCKS = 4  # the buffers' capacity, in blocks
BLOCKS_PASSED = 3  # the grid's extent: how many blocks hold data this call
LAST_PREFETCH_BOUND = "num_programs"  # prefetch while i + 1 < the grid's run-time extent


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
        copy(i + 1, 1 - slot).start()

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
    print("dynamic grid double buffer:", out.shape)
