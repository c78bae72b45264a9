"""TMA load from a peer's memory, started before the peer said its row is staged: the copy
reads the owner's GMEM while the owner may still be writing it.

Same as remote_tma_load.py, except that the reader starts the copy before its `ready` wait:
the copy reads the left neighbour's stage for as long as it is in flight, and nothing orders
the neighbour's store to that stage before it, so the tile can hold a half-written row. The
race is on the owner's buffer, reported at the copy's line.
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
    plgpu.copy_gmem_to_smem(plgpu.remote_ref(stage_ref, left), tile, barrier)  # <- data_race
    stage_ref[...] = x_ref[...] * 2.0  # <- data_race
    pl.semaphore_signal(ready, device_id=right)
    pl.semaphore_wait(ready)
    plgpu.barrier_wait(barrier)
    o_ref[...] = tile[...] + 1.0
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
    print("remote TMA load (before ready):", out[1].shape)
