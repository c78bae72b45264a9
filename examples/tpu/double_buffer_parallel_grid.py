"""Grid-pipelined double buffering whose grid is marked "parallel".

The same kernel as double_buffer.py, but its grid dimension is declared "parallel". On a
chip with one TensorCore per device nothing changes: the steps still run in order. On a
megacore chip (v4, v5p: two TensorCores per device) the grid is split between the cores,
and each core has its own semaphores: the second core starts in the middle of the grid and
waits for a copy of its first block that only the first core's previous step would have
started (on the first core's semaphore), so it hangs. (The first core's last step also
prefetches a block it never waits for; semcheck reports the hang, which comes first.) JAX's
TPU interpreter with two cores per device hangs on it.
"""

# semcheck: expect safe cores=1
# semcheck: expect unsatisfied_wait cores=2

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (8, 128)
NUM_BLOCKS = 4
DIMENSION_SEMANTICS = ("parallel",)  # BUG: the copies cross grid steps


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

    copy(i, slot).wait()  # <- unsatisfied_wait
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
    print("double buffer (parallel grid):", out.shape, float(out.sum()))
