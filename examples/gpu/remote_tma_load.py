"""TMA load from a peer's memory: each device stages a row in GMEM, tells its right
neighbour, and the neighbour copies the row into its shared memory straight from the
owner's GMEM (`plgpu.copy_gmem_to_smem` from a `plgpu.remote_ref`, as JAX's own Mosaic GPU
distributed tests do).

The owner writes its stage before it signals `ready`, and the reader starts the copy only
after its `ready` wait, so the copy never reads a row still being written. The reader uses
the tile only after the copy's barrier says it has landed, then tells the owner with
`done`, which the owner waits for before it leaves (so its stage is not freed while a peer
still reads it).
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


def load_kernel(x_ref, stage_ref, o_ref, ready, done, tile, barrier):
    me = lax.axis_index("x")
    n = lax.axis_size("x")
    right = lax.rem(me + 1, n)
    left = lax.rem(me + n - 1, n)
    stage_ref[...] = x_ref[...] * 2.0
    pl.semaphore_signal(ready, device_id=right)
    pl.semaphore_wait(ready)  # the left neighbour's stage is written
    plgpu.copy_gmem_to_smem(plgpu.remote_ref(stage_ref, left), tile, barrier)
    plgpu.barrier_wait(barrier)
    o_ref[...] = tile[...] + 1.0
    pl.semaphore_signal(done, device_id=left)
    pl.semaphore_wait(done)  # the right neighbour has finished reading this stage


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
    print("remote TMA load:", out[1].shape)
