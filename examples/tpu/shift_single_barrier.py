"""Shift along a line of devices, behind one barrier: breaks when the kernel is called twice.

Every device but the last sends its block to its right neighbour (a `lax.ppermute` with
the pairs (i, i+1): no wrap-around; device 0 receives nothing and outputs zeros). Before
the copy, each device does the neighbour barrier of JAX's distributed tutorial, with
`double_barrier=False`: it signals the barrier semaphore of both ring neighbours and waits
for two signals. Called once, that is enough (`semcheck verify` says safe).

Called twice with the same collective_id (`semcheck verify --invocations 2`), it is not:
the barrier semaphore outlives the kernel, so the two signals a device waits for need not
be its two neighbours' signals of this call. Device 0 receives nothing, so it finishes its
first call as soon as its neighbours have entered, enters the second call and signals
device 1's barrier again. Device 1, still in its first call, can pass its barrier on
device 0's two signals before device 2 has entered: one of the two units it takes was
signalled for the second call (`remote_before_entry` at the wait: it passed early). Its
copy then lands on device 2 before device 2 entered the kernel (`remote_before_entry` at the
copy, caused by the early pass; `--exhaustive` shows both). Entering allocates device 2's
semaphores afresh, so the bytes that copy added to its receive semaphore are lost: device 2
waits for them forever, while device 1, in its second call, waits for device 2's barrier
signal: a deadlock, the consequence, which semcheck does not report again (one bug, one
report). That needs device 2 to be a third
device: with 2 devices each device has one neighbour, so this cannot happen.

shift_double_barrier.py is the fix: the tutorial's second barrier.

JAX's distributed tutorial uses this barrier helper in its ring all-reduce. There the
single barrier is enough even when the kernel is called twice: every step of that kernel
waits for its right neighbour's capacity signal, which the neighbour sends only after its
own barrier, so no device can finish a call (and signal again) before both its neighbours
have passed their barrier of that call. semcheck verifies that all-reduce, with a single
barrier and `--invocations 2`, as safe at 2 and 4 devices.
"""

# semcheck: expect safe
# semcheck: expect remote_before_entry invocations=2 devices=4,8

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
    pl.semaphore_wait(barrier, 2)  # <- remote_before_entry (passes on the next call's signal)


def shift_kernel(x_ref, o_ref, send_sem, recv_sem):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)

    neighbour_barrier(left, right)

    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,))

    @pl.when(my_id < num_devices - 1)
    def _send():
        copy.start()  # <- remote_before_entry
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
