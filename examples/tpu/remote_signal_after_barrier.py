"""A kernel with its own collective_id signals its neighbour only after a handshake.

The fix of remote_signal_before_entry.py. The kernel sets `collective_id`, so XLA inserts
no device barrier; it does its own handshake on the barrier semaphore instead: each device
signals the barrier semaphore of both neighbours and waits for two signals. Barrier
semaphores outlive kernels, so these signals may arrive before the neighbour entered; once
a device's wait returns, both its neighbours are inside the kernel, and the signal to the
right neighbour's scratch semaphore `ready` finds it there.
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


def ready_kernel(x_ref, o_ref, ready):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    pl.semaphore_signal(ready, 1, device_id=(right,))
    pl.semaphore_wait(ready, 1)

    o_ref[...] = x_ref[...]


def signal_ready(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            ready_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.ones((n * 8, 128), jnp.float32)
    out = signal_ready(x, mesh)
    jax.block_until_ready(out)
    print("ready signal after a handshake:", out.shape)
