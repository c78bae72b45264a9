"""Ring exchange through peer memory: each block stores its row into the right neighbour's
buffer, signals it, and reads what the left neighbour stored only after that signal.

A store through `plgpu.remote_ref` writes the peer's copy of a GMEM buffer (Mosaic GPU lowers
it to the symmetric address on that device). The signal that follows has release semantics,
so the row has landed when the neighbour's non-decrementing wait for `NUM_BLOCKS` signals
passes; only then does a block load the row its left neighbour stored.
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

NUM_BLOCKS = 2


def ring_kernel(x_ref, inbox_ref, o_ref):
    ready = pl.get_global(plgpu.SemaphoreType.REGULAR)
    block = lax.axis_index("blocks")
    me = lax.axis_index("x")
    right = lax.rem(me + 1, lax.axis_size("x"))
    plgpu.remote_ref(inbox_ref, right)[block] = x_ref[block]
    pl.semaphore_signal(ready, device_id=right)
    pl.semaphore_wait(ready, NUM_BLOCKS, decrement=False)
    o_ref[block] = inbox_ref[block] + 1.0


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
