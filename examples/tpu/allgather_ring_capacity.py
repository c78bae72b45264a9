"""Ring all-gather with a capacity semaphore: a slot is overwritten only once it has been read.

Each device has one landing slot (a VMEM scratch block) that its left neighbour writes
into. For N-1 steps it sends the block it got last (its own at first) from its output
into its right neighbour's landing slot, waits for its own copy to leave and for the left
neighbour's copy to land (one receive semaphore per step, so no wait is satisfied by the
wrong copy), then reads the landing slot into its output.

After reading the landing slot, a device signals the REGULAR semaphore `capacity` of its
left neighbour ("my landing slot is free"), and before every copy but the first it waits
for that signal from its right neighbour. A copy into a landing slot therefore starts only
after the receiver has read what the previous copy brought. Each device signals and waits
N-2 times, so `capacity` ends at zero.

The fix of allgather_ring_overwrite.py.
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

BLOCK = (8, 128)


def all_gather_kernel(x_ref, o_ref, landing, send_sem, recv_sems, capacity):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)

    o_ref[my_id] = x_ref[...]

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    for step in range(num_devices - 1):
        if step:
            pl.semaphore_wait(capacity, 1)  # the right neighbour has read its landing slot
        last = lax.rem(my_id + num_devices - step, num_devices)
        copy = pltpu.make_async_remote_copy(
            o_ref.at[last], landing, send_sem, recv_sems.at[step], device_id=(right,)
        )
        copy.start()
        copy.wait()
        origin = lax.rem(my_id + num_devices - step - 1, num_devices)
        o_ref[origin] = landing[...]
        if step < num_devices - 2:
            pl.semaphore_signal(capacity, 1, device_id=(left,))


def all_gather(x, mesh):
    num_devices = mesh.size

    def per_device(block):
        return pl.pallas_call(
            all_gather_kernel,
            out_shape=jax.ShapeDtypeStruct((num_devices, *block.shape), block.dtype),
            scratch_shapes=[
                pltpu.VMEM(BLOCK, jnp.float32),  # landing
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA((max(num_devices - 1, 1),)),  # receive, one per step
                pltpu.SemaphoreType.REGULAR,  # capacity
            ],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P(None), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * BLOCK[0] * BLOCK[1], dtype=jnp.float32).reshape(n * BLOCK[0], BLOCK[1])
    out = all_gather(x, mesh)
    jax.block_until_ready(out)
    print("all-gather with a capacity semaphore:", out.shape)
