"""TMA load from a peer's memory, read before the barrier wait: the tile is used while the
copy from the peer may still be writing it.

Same as remote_tma_load.py, except that the block reads the tile before waiting on the
copy's barrier: nothing orders that read after the copy lands, so it can see a half-copied
row (the copy's source being a peer's GMEM changes nothing about when its destination is
written).
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


def load_kernel(x_ref, stage_ref, o_ref, ready, done, tile, barrier):
    me = lax.axis_index("x")
    n = lax.axis_size("x")
    right = lax.rem(me + 1, n)
    left = lax.rem(me + n - 1, n)
    stage_ref[...] = x_ref[...] * 2.0
    pl.semaphore_signal(ready, device_id=right)
    pl.semaphore_wait(ready)
    plgpu.copy_gmem_to_smem(plgpu.remote_ref(stage_ref, left), tile, barrier)
    o_ref[...] = tile[...] + 1.0  # <- data_race
    plgpu.barrier_wait(barrier)
    pl.semaphore_signal(done, device_id=left)
    pl.semaphore_wait(done)


def remote_tma_load(x, mesh):
    def per_device(block):
        shape = jax.ShapeDtypeStruct(block.shape, block.dtype)
        return plgpu.kernel(
            load_kernel,
            out_type=(shape, shape),
            scratch_types=[
                plgpu.SemaphoreType.REGULAR,
                plgpu.SemaphoreType.REGULAR,
                plgpu.SMEM(block.shape, block.dtype),
                plgpu.Barrier(num_arrivals=1),
            ],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x")), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * 8, 128), jnp.float32)
    out = remote_tma_load(x, mesh)
    jax.block_until_ready(out)
    print("remote TMA load (early read):", out[1].shape)
