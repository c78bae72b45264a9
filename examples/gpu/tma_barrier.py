"""TMA copy with a barrier wait: a block loads a tile into shared memory, then reads it.

`plgpu.copy_gmem_to_smem` starts an asynchronous TMA copy that arrives on the mbarrier
once its bytes have landed; `plgpu.barrier_wait` waits for that phase (phase 0) to
complete. Only then does the block read the tile. The second copy into the same buffer is
issued after the first tile has been read, and its phase (phase 1) is waited for the same
way.
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P


def tma_kernel(x_ref, o_ref, tile, barrier):
    for step in range(2):
        plgpu.copy_gmem_to_smem(x_ref.at[step], tile, barrier)
        plgpu.barrier_wait(barrier)
        o_ref[step] = tile[...] * 2.0


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
