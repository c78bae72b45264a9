"""Neighbour handshake that waits before it signals: a circular wait.

The same handshake as remote_handshake.py, but each device first waits for its left
neighbour's "ready" and only then tells its right neighbour. Every device waits for its left
neighbour, which waits for its own left neighbour, all the way around the ring: a deadlock
in every schedule. JAX's TPU interpreter hangs on it (and `interpret=True` rejects the
remote signal before it gets that far).
"""

# semcheck: expect deadlock

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P


def handshake_kernel(x_ref, o_ref, ready, done):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)

    pl.semaphore_wait(ready, 1)  # <- deadlock  (BUG: waits before it signals)
    pl.semaphore_signal(ready, 1, device_id=(right,))

    o_ref[...] = x_ref[...]

    pl.semaphore_signal(done, 1, device_id=(left,))
    pl.semaphore_wait(done, 1)


def handshake(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            handshake_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.REGULAR],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.ones((n * 8, 128), jnp.float32)
    out = handshake(x, mesh)
    jax.block_until_ready(out)
    print("remote handshake (wait first):", out.shape)
