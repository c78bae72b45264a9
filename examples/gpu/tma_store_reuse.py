"""TMA stores from one shared-memory tile: the tile is refilled only once the store before it
has read it.

`plgpu.copy_smem_to_gmem` starts an asynchronous TMA store and commits it to the thread's
bulk group; the store goes on reading the SMEM tile after it is issued.
`plgpu.wait_smem_to_gmem(0, wait_read_only=True)` waits until every committed store has
finished reading its source (its writes to GMEM may still be landing), which is all a refill
of the tile needs. Reading the output back needs the full wait.
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

STEPS = 2


def store_kernel(x_ref, o_ref, check_ref, tile):
    for step in range(STEPS):
        tile[...] = x_ref[step] * 2.0
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(tile, o_ref.at[step])
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the tile may be refilled
    plgpu.wait_smem_to_gmem(0)  # every row of o_ref is written
    check_ref[...] = o_ref[0]


def tma_store(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            store_kernel,
            out_type=(jax.ShapeDtypeStruct(block.shape, block.dtype),
                      jax.ShapeDtypeStruct(block.shape[1:], block.dtype)),
            grid=(1,),
            grid_names=("blocks",),
            scratch_types=[plgpu.SMEM(block.shape[1:], block.dtype)],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x")), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * STEPS, 64, 128), jnp.float32)
    out = tma_store(x, mesh)
    jax.block_until_ready(out)
    print("tma store:", out[0].shape)
