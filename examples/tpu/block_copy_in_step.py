"""Each grid step fills its own output block by DMA, and waits for that copy in the same step.

A pallas_call over a grid of blocks, whose output is BlockSpec'd: the kernel sees one VMEM
block per step, and the Pallas pipeline writes that block back to the HBM output after the
step (when the next step moves to another block). Step i copies block i of the HBM input
straight into its output block and waits for the copy before the step ends, so the copy has
landed before the pipeline reads the block to write it back.
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


def fill_block_kernel(x_hbm, o_ref, sem):
    i = pl.program_id(0)
    copy = pltpu.make_async_copy(x_hbm.at[pl.ds(i * BLOCK[0], BLOCK[0])], o_ref, sem)
    copy.start()
    copy.wait()


def fill(x, mesh):
    def per_device(block):
        return pl.pallas_call(
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
    print("block copy in step:", out.shape, float(out.sum()))
