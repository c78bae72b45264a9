"""Each grid step fills its output block by DMA, but waits for that copy only in the next step.

The same kernel as block_copy_in_step.py, except that step i starts the copy into its output
block and leaves it in flight: step i+1 waits for it (the last step waits for its own). The
Pallas pipeline writes output block i back to HBM after step i, since step i+1 moves to
another block, and it reads the VMEM block while the DMA may still be writing it: a race
between the kernel's copy and the pipeline's copy-out (the written-back block may hold stale
rows). JAX's TPU interpreter (`detect_races=True`) reports it against its `pallas_call` frame.
"""

# semcheck: expect data_race

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (8, 128)
NUM_BLOCKS = 4


def fill_block_kernel(x_hbm, o_ref, sem):  # <- data_race (the pipeline writes the block back)
    i = pl.program_id(0)
    n = pl.num_programs(0)

    def copy(block):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(block * BLOCK[0], BLOCK[0])], o_ref, sem)

    @pl.when(i > 0)
    def _():
        copy(i - 1).wait()  # BUG: the previous step's block was already written back

    copy(i).start()  # <- data_race (with the write-back of this block after the step)

    @pl.when(i == n - 1)
    def _():
        copy(i).wait()


def fill(x, mesh):
    def per_device(block):
        return pl.pallas_call(  # <- data_race (the pipeline's write-back, as JAX's interpreter names it)
            fill_block_kernel,
            grid=(NUM_BLOCKS,),
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(BLOCK, lambda i: (i, 0)),
            scratch_shapes=[pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.ones((n * NUM_BLOCKS * BLOCK[0], BLOCK[1]), jnp.float32)
    out = fill(x, mesh)
    jax.block_until_ready(out)
    print("block copy across steps:", out.shape, float(out.sum()))
