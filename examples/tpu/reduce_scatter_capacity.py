"""Ring reduce-scatter with a capacity semaphore guarding a double-buffered receive slot.

Device d ends with the sum over all devices of chunk d. For N-1 steps every device sends its
running partial sum to its right neighbour, into one of two receive slots there, and adds
the partial sum it received from its left neighbour to its own chunk. A sender may overwrite
a receive slot only once the receiver has consumed what was in it: after consuming a slot
the receiver signals the REGULAR `capacity` semaphore of its left neighbour (the sender), and
the sender waits for one unit of capacity before every send from the third step on (the two
slots start out free). At the end every device drains the capacity it was given but did not
use, so every semaphore is zero at exit. Which copy lands first, and how far a sender runs
ahead, varies between schedules; none blocks for good.
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

CHUNK = (8, 128)
SLOTS = 2


def reduce_scatter_kernel(x_ref, o_ref, acc_ref, recv_buf, send_sems, recv_sems, capacity):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)

    def chunk(c):
        return x_ref[pl.ds(c * CHUNK[0], CHUNK[0]), :]

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    acc_ref[...] = chunk(lax.rem(my_id + num_devices - 1, num_devices))

    def step(s, carry):
        slot = lax.rem(s, SLOTS)

        @pl.when(s >= SLOTS)
        def _():
            pl.semaphore_wait(capacity, 1)  # the right neighbour has freed this slot

        copy = pltpu.make_async_remote_copy(
            acc_ref, recv_buf.at[slot], send_sems.at[slot], recv_sems.at[slot], device_id=(right,)
        )
        copy.start()
        copy.wait_send()
        copy.wait_recv()  # the partial sum from the left neighbour is in recv_buf[slot]
        incoming = lax.rem(my_id - s - 2 + 2 * num_devices, num_devices)
        acc_ref[...] = recv_buf[slot] + chunk(incoming)
        pl.semaphore_signal(capacity, 1, device_id=(left,))  # slot consumed: it is free again
        return carry

    lax.fori_loop(0, num_devices - 1, step, 0)
    pl.semaphore_wait(capacity, min(SLOTS, num_devices - 1))  # drain the unused capacity
    o_ref[...] = acc_ref[...]


def reduce_scatter(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            reduce_scatter_kernel,
            out_shape=jax.ShapeDtypeStruct(CHUNK, block.dtype),
            scratch_shapes=[
                pltpu.VMEM(CHUNK, jnp.float32),
                pltpu.VMEM((SLOTS, *CHUNK), jnp.float32),
                pltpu.SemaphoreType.DMA((SLOTS,)),
                pltpu.SemaphoreType.DMA((SLOTS,)),
                pltpu.SemaphoreType.REGULAR,
            ],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.ones((n * n * CHUNK[0], CHUNK[1]), jnp.float32)
    out = reduce_scatter(x, mesh)
    jax.block_until_ready(out)
    print("reduce-scatter:", out.shape, float(out[0, 0]))
