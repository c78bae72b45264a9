"""Neighbour handshake with remote semaphore signals.

Each device tells its right neighbour "I am ready" by signalling that neighbour's REGULAR
`ready` semaphore (a remote `pl.semaphore_signal` with a MESH device id), waits until its
left neighbour has told it the same, copies its block, and then does a second round on
`done` in the other direction. The kernel sets no collective_id, so XLA's default device
barrier runs before the body (semcheck models it): no signal can reach a device that has
not entered the kernel. Every device signals before it waits, so no schedule blocks.

JAX's `interpret=True` mode rejects this kernel ("Remote signal not implemented"); its TPU
interpreter (`interpret=pltpu.InterpretParams()`) runs it.
"""

# semcheck: expect safe

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

    pl.semaphore_signal(ready, 1, device_id=(right,))
    pl.semaphore_wait(ready, 1)

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
    print("remote handshake:", out.shape)
