"""Bidirectional ring all-gather: half of every block travels right, half travels left.

Every device copies its own block into its slot of the output, does a barrier handshake
with both neighbours, and then for N-1 steps forwards the top half of the slot it received
last to its right neighbour and the bottom half to its left neighbour, as remote DMAs on two
DMA semaphores: one send semaphore per direction, and one receive semaphore per direction
and step (`recv_sems.at[d, step]`). Before reusing a direction it waits for that
direction's previous copy on both sides, and after the loop it waits for the last copy of
each direction. Bytes sent and bytes awaited match on every semaphore, in every schedule.

The receive semaphore per step is what makes the forwarding safe: with one per direction
(as the all_gather shipped in the jax wheel has), the left neighbour's next copy can land
first and satisfy the wait for the previous one, and this device would then forward a slot
that is still being written (`data_race`). Each wait here can only be satisfied by its own
step's copy.
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
RIGHT, LEFT = 0, 1  # semaphore index per direction


def all_gather_kernel(x_ref, o_ref, send_sems, recv_sems):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)
    half = BLOCK[0] // 2

    pltpu.sync_copy(x_ref, o_ref.at[my_id])

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    to_right = to_left = None
    for step in range(num_devices - 1):
        if step:
            to_right.wait()
            to_left.wait()
        right_slot = lax.rem(my_id - step + num_devices, num_devices)
        left_slot = lax.rem(my_id + step, num_devices)
        top = o_ref.at[right_slot, pl.ds(0, half)]
        bottom = o_ref.at[left_slot, pl.ds(half, half)]
        to_right = pltpu.make_async_remote_copy(
            top, top, send_sems.at[RIGHT], recv_sems.at[RIGHT, step], device_id=(right,)
        )
        to_left = pltpu.make_async_remote_copy(
            bottom, bottom, send_sems.at[LEFT], recv_sems.at[LEFT, step], device_id=(left,)
        )
        to_right.start()
        to_left.start()
    to_right.wait()
    to_left.wait()


def all_gather(x, mesh):
    num_devices = mesh.size

    def per_device(block):
        return pl.pallas_call(
            all_gather_kernel,
            out_shape=jax.ShapeDtypeStruct((num_devices, *block.shape), block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[
                pltpu.SemaphoreType.DMA((2,)),  # send, per direction
                pltpu.SemaphoreType.DMA((2, max(num_devices - 1, 1))),  # receive, per direction and step
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
    print("all-gather:", out.shape)
