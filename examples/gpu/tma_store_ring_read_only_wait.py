"""Ring exchange by TMA store into peer memory, published after a read-only wait (the twin
of tma_store_ring.py).

`plgpu.wait_smem_to_gmem(0, wait_read_only=True)` returns once the TMA store has read its
SMEM source, which is what reusing the tile needs; its writes into the right neighbour's
inbox may still be landing. The signal after it tells the neighbour too early: the
neighbour's load of its inbox races with the store still writing it.
"""

# semcheck: expect data_race

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

WAIT_READ_ONLY = True  # BUG: publishes the inbox before the store has written it


def ring_kernel(x_ref, inbox_ref, o_ref, tile):
    ready = pl.get_global(plgpu.SemaphoreType.REGULAR)
    right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
    tile[...] = x_ref[...] * 2.0
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(tile, plgpu.remote_ref(inbox_ref, right))
    plgpu.wait_smem_to_gmem(0, wait_read_only=WAIT_READ_ONLY)
    pl.semaphore_signal(ready, device_id=right)
    pl.semaphore_wait(ready, 1)
    o_ref[...] = inbox_ref[...] + 1.0  # <- data_race: the left neighbour's store may still be landing


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
