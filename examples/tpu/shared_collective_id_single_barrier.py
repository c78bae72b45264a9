"""Two different kernels sharing a collective_id, each behind one barrier: an early copy.

`shift_kernel` and `shift_marked_kernel` are two kernels (the second marks device 0's
output with ones instead of zeros), run one after the other in one jitted function, both
with `collective_id=0`, so they share one barrier semaphore. Each does the neighbour
barrier of JAX's distributed tutorial with `double_barrier=False` before sending its block
to the right neighbour. This is shift_single_barrier.py called twice, except that the two
calls are different kernels: device 0, which receives nothing, finishes the first kernel
as soon as its neighbours have entered and signals device 1's barrier again from the
second. Device 1, still in the first kernel, can pass its barrier on those signals before
device 2 has entered (`remote_before_entry` at the wait: it passed on a signal sent from the
second kernel), and its copy lands on device 2 before device 2 entered the kernel
(`remote_before_entry` at the copy, caused by the early pass). With 2 devices each device
has one neighbour: safe.

shared_collective_id_double_barrier.py is the fix: the tutorial's second barrier.
"""

# semcheck: expect remote_before_entry devices=4,8
# semcheck: expect safe devices=2

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
    pl.semaphore_wait(barrier, 2)  # <- remote_before_entry (passes on the other kernel's signal)


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


def shift_marked_kernel(x_ref, o_ref, send_sem, recv_sem):
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
