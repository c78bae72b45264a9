"""Cross-device ready ring whose device id does not wrap: the last device signals a device
that does not exist.

Every block of every device writes its row into the right neighbour's output through
`plgpu.remote_ref`, then signals the neighbour's `pl.get_global` semaphore (a signal has
release semantics: the writes land before it does). Each device's blocks wait, without
decrementing, until all `num_blocks` blocks of the left neighbour have signalled. The
device id is `me + 1`, so the last device names device `num_devices`, outside the mesh: its
remote store is the first thing that faults.
"""

# semcheck: expect invalid_device_id

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

NUM_BLOCKS = 2


def ring_kernel(x_ref, o_ref):
    ready = pl.get_global(plgpu.SemaphoreType.REGULAR)
    block = lax.axis_index("blocks")
    me = lax.axis_index("x")
    right = me + 1  # should wrap: lax.rem(me + 1, lax.axis_size("x"))
    plgpu.remote_ref(o_ref, right)[block] = x_ref[block]  # <- invalid_device_id
    pl.semaphore_signal(ready, device_id=right)
    pl.semaphore_wait(ready, NUM_BLOCKS, decrement=False)


def ready_ring(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            ring_kernel,
            out_type=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid=(NUM_BLOCKS,),
            grid_names=("blocks",),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.zeros((mesh.size * NUM_BLOCKS, 128), jnp.float32)
    out = ready_ring(x, mesh)
    jax.block_until_ready(out)
    print("ready ring:", out.shape)
