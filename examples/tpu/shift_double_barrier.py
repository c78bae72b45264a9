"""Shift along a line of devices, behind the double barrier: safe when called twice.

The fix of shift_single_barrier.py, with the tutorial's `double_barrier=True`. After the
first barrier a device also signals a second, scoped REGULAR semaphore on both neighbours
and waits for two signals. A neighbour sends that second signal only after it passed its
own first barrier of this call, so no device can finish a call (and signal the barrier
semaphore again for the next one) before both its neighbours have passed their barrier of
this call: a device's barrier can no longer pass on a next-call signal, and every copy
lands on a device that is inside the same call. The second barrier's semaphore is
allocated per call, which is fine: it is signalled only by neighbours that passed the first
barrier, so they know this device has entered.
"""

# semcheck: expect safe
# semcheck: expect safe invocations=2

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P


def neighbour_barrier(left, right):
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    @functools.partial(pl.run_scoped, second_barrier=pltpu.SemaphoreType.REGULAR)
    def _second(second_barrier):
        pl.semaphore_signal(second_barrier, 1, device_id=(left,))
        pl.semaphore_signal(second_barrier, 1, device_id=(right,))
        pl.semaphore_wait(second_barrier, 2)


def shift_kernel(x_ref, o_ref, send_sem, recv_sem):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)

    neighbour_barrier(left, right)

    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,))

    @pl.when(my_id < num_devices - 1)
    def _send():
        copy.start()
        copy.wait_send()

    @pl.when(my_id > 0)
    def _receive():
        copy.wait_recv()

    @pl.when(my_id == 0)
    def _nothing_to_receive():
        o_ref[...] = jnp.zeros_like(o_ref)


def shift(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            shift_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    once = shift(x, mesh)
    twice = shift(once, mesh)  # the same collective_id again, right after
    jax.block_until_ready(twice)
    print("shift twice:", twice.shape)
