"""Ring exchange by TMA store into peer memory: each device stores its tile into the right
neighbour's inbox with a TMA store, waits until the store has landed, signals the neighbour,
and reads its own inbox only after its left neighbour's signal.

`plgpu.copy_smem_to_gmem` to a `plgpu.remote_ref` writes the peer's copy of a GMEM buffer,
and only the issuing thread learns when it is done, through its bulk group:
`plgpu.wait_smem_to_gmem(0)` returns once the store has read its SMEM source and written
the peer's memory. The signal after it tells the neighbour that its inbox holds the tile.
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

WAIT_READ_ONLY = False


def ring_kernel(x_ref, inbox_ref, o_ref, tile):
    ready = pl.get_global(plgpu.SemaphoreType.REGULAR)
    right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
    tile[...] = x_ref[...] * 2.0
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(tile, plgpu.remote_ref(inbox_ref, right))
    plgpu.wait_smem_to_gmem(0, wait_read_only=WAIT_READ_ONLY)
    pl.semaphore_signal(ready, device_id=right)
    pl.semaphore_wait(ready, 1)
    o_ref[...] = inbox_ref[...] + 1.0


def tma_store_ring(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            ring_kernel,
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
    out = tma_store_ring(x, mesh)
    jax.block_until_ready(out)
    print("tma store ring:", out[1].shape)
