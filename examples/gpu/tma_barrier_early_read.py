"""TMA copy read before its barrier wait: the block reads the tile while the copy may still
be writing it.

Same as tma_barrier.py, except that the second tile is read *before* waiting for the
barrier's phase 1: nothing orders the read after the TMA copy's write, so the block can
read a half-written tile.
"""

# semcheck: expect data_race

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P


def tma_kernel(x_ref, o_ref, tile, barrier):
    plgpu.copy_gmem_to_smem(x_ref.at[0], tile, barrier)
    plgpu.barrier_wait(barrier)
    o_ref[0] = tile[...] * 2.0
    plgpu.copy_gmem_to_smem(x_ref.at[1], tile, barrier)
    o_ref[1] = tile[...] * 2.0  # <- data_race
    plgpu.barrier_wait(barrier)


def tma_scale(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            tma_kernel,
            out_type=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid=(1,),
            grid_names=("blocks",),
            scratch_types=[
                plgpu.SMEM(block.shape[1:], block.dtype),
                plgpu.Barrier(num_arrivals=1),
            ],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * 2, 64, 128), jnp.float32)
    out = tma_scale(x, mesh)
    jax.block_until_ready(out)
    print("tma scale:", out.shape)
