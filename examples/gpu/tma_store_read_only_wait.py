"""A TMA store's output read back after a read-only wait (a data race).

`plgpu.wait_smem_to_gmem(0, wait_read_only=True)` only waits until the store has finished
reading its SMEM source; its writes to GMEM may still be landing. Loading the stored row
then may see the old contents. `wait_smem_to_gmem(0)` (tma_store_reuse.py) is the fix.
"""

# semcheck: expect data_race

import jax
import jax.numpy as jnp
import numpy as np

from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P


def store_kernel(x_ref, o_ref, check_ref, tile):
    tile[...] = x_ref[...] * 2.0
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(tile, o_ref)
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)
    check_ref[...] = o_ref[...]  # <- data_race: the store may still be writing o_ref


def tma_store(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            store_kernel,
            out_type=(jax.ShapeDtypeStruct(block.shape, block.dtype),
                      jax.ShapeDtypeStruct(block.shape, block.dtype)),
            grid=(1,),
            grid_names=("blocks",),
            scratch_types=[plgpu.SMEM(block.shape, block.dtype)],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x")), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * 64, 128), jnp.float32)
    out = tma_store(x, mesh)
    jax.block_until_ready(out)
    print("tma store:", out[0].shape)
