"""Ring all-gather without a capacity semaphore: the sender overwrites a slot still being read.

Each device has one landing slot (a VMEM scratch block) that its left neighbour writes
into. For N-1 steps it sends the block it got last (its own at first) from its output
into its right neighbour's landing slot, waits for its own copy to leave and for the left
neighbour's copy to land (one receive semaphore per step, so no wait is satisfied by the
wrong copy), then reads the landing slot into its output.

Nothing tells the left neighbour when the landing slot has been read. A left neighbour
that runs one step ahead (it only needs its own left neighbour's data) starts the next
copy into the landing slot while this device is still reading it (`data_race`, between
the read of the slot and the left neighbour's copy start).

With 2 devices the all-gather is a single exchange, each landing slot is written once, and
the kernel is safe; the bug shows from 3 devices on. allgather_ring_capacity.py is the fix:
a capacity semaphore on which each device tells its left neighbour the slot is free again.
"""

# semcheck: expect data_race
# semcheck: expect safe devices=2

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (8, 128)


def all_gather_kernel(x_ref, o_ref, landing, send_sem, recv_sems):
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
        # BUG: no word from the right neighbour that its landing slot is free
        last = lax.rem(my_id + num_devices - step, num_devices)
        copy = pltpu.make_async_remote_copy(
            o_ref.at[last], landing, send_sem, recv_sems.at[step], device_id=(right,)
        )
        copy.start()  # <- data_race
        copy.wait()
        origin = lax.rem(my_id + num_devices - step - 1, num_devices)
        o_ref[origin] = landing[...]  # <- data_race


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
    print("all-gather, no capacity semaphore:", out.shape)
