"""Two different kernels sharing a collective_id, each behind the double barrier: safe.

The fix of shared_collective_id_single_barrier.py: each kernel does the tutorial's
`double_barrier=True` (a second, scoped REGULAR semaphore signalled only by neighbours that
passed their first barrier of this kernel), so no device can leave the first kernel and
signal the shared barrier semaphore from the second before both its neighbours passed
their barrier of the first.
"""

# semcheck: expect safe

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


def shift_marked_kernel(x_ref, o_ref, send_sem, recv_sem):
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
        o_ref[...] = jnp.ones_like(o_ref)


def call(kernel, block):
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(block)


def shift_then_shift_marked(block):
    # Two different kernels, one jitted function, one collective_id.
    return call(shift_marked_kernel, call(shift_kernel, block))


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    f = jax.jit(jax.shard_map(shift_then_shift_marked, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    print("shifted twice:", jax.block_until_ready(f(x)).shape)
