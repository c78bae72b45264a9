"""Ring exchange through peer memory without the wait (the twin of remote_store_ring.py).

Each block still stores its row into the right neighbour's buffer and signals it, but loads
the row its left neighbour stores before waiting for that neighbour's signal: nothing orders
the load after the left neighbour's remote store, so it may read the old contents.
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

NUM_BLOCKS = 2


def ring_kernel(x_ref, inbox_ref, o_ref):
    ready = pl.get_global(plgpu.SemaphoreType.REGULAR)
    block = lax.axis_index("blocks")
    me = lax.axis_index("x")
    right = lax.rem(me + 1, lax.axis_size("x"))
    plgpu.remote_ref(inbox_ref, right)[block] = x_ref[block]  # <- data_race (the other side)
    pl.semaphore_signal(ready, device_id=right)
    o_ref[block] = inbox_ref[block] + 1.0  # <- data_race: the left neighbour may still be storing
    pl.semaphore_wait(ready, NUM_BLOCKS, decrement=False)


def remote_store_ring(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            ring_kernel,
            out_type=(jax.ShapeDtypeStruct(block.shape, block.dtype),
                      jax.ShapeDtypeStruct(block.shape, block.dtype)),
            grid=(NUM_BLOCKS,),
            grid_names=("blocks",),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x")), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.zeros((mesh.size * NUM_BLOCKS, 128), jnp.float32)
    out = remote_store_ring(x, mesh)
    jax.block_until_ready(out)
    print("remote store ring:", out[1].shape)
