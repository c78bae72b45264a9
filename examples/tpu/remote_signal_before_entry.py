"""A kernel with its own collective_id signals a neighbour that may not have entered yet.

Each device tells its right neighbour "my block is ready" by signalling the neighbour's
REGULAR scratch semaphore `ready`, then waits until its left neighbour has told it the same
and copies its block. Because the kernel sets `collective_id`, XLA inserts no device barrier
before the body, and the kernel does no handshake of its own on the barrier semaphore: the
signal can reach a device that has not entered the kernel yet (`remote_before_entry`).
Scratch semaphores are allocated when a device enters the kernel, so such an early signal
is lost, and that device's wait for it never returns: the consequence, which semcheck does
not report again (a schedule stops being judged at its first error: one bug, one report).

remote_signal_after_barrier.py is the fix: a handshake with both neighbours on the barrier
semaphore (which outlives kernels, so signalling it early is fine) before the remote signal.

JAX's TPU interpreter cannot show this bug: it creates every device's semaphores before any
device runs.
"""

# semcheck: expect remote_before_entry

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

    # BUG: nothing shows that the right neighbour has entered the kernel
    pl.semaphore_signal(ready, 1, device_id=(right,))  # <- remote_before_entry
    pl.semaphore_wait(ready, 1)  # hangs when the signal came early (the consequence)

    o_ref[...] = x_ref[...]


def signal_ready(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            ready_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            # Without this flag, lowering rejects a collective_id whose barrier semaphore is unused.
            compiler_params=pltpu.CompilerParams(
                collective_id=0, allow_collective_id_without_custom_barrier=True
            ),
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
    print("ready signal without a handshake:", out.shape)
