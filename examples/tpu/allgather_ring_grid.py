"""Ring all-gather over the grid: one grid step per hop, one receive semaphore per step.

Every device ends with every device's block, in device order, in its output. In grid
step 0 a device first copies its own block into its row of the output (a local DMA that
it waits for). Then, in every step, it forwards the row it got last (its own in step 0)
to the same row of its right neighbour's output and waits for both sides of that copy:
its row has left, and the row from its left neighbour has landed. After N-1 steps every
row has gone round the ring.

A sender and its receiver never touch the same row in one step, and each step's copy
lands on a receive semaphore of its own (`recv_sems.at[step]`), so a receiver's wait can
only be satisfied by the copy of its own step. No barrier semaphore is used and no
`collective_id` is set, so the default device barrier runs before the body: no copy can
land on a device that has not entered the kernel. allgather_ring_grid_no_wait.py drops
the wait.
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


def all_gather_kernel(x_ref, o_ref, own_sem, send_sem, recv_sems):
    step = pl.program_id(0)
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    row = lax.rem(my_id - step + num_devices, num_devices)  # the row I got last

    @pl.when(step == 0)
    def _():
        own = pltpu.make_async_copy(x_ref, o_ref.at[my_id], own_sem)
        own.start()
        own.wait()

    hop = pltpu.make_async_remote_copy(
        o_ref.at[row], o_ref.at[row], send_sem, recv_sems.at[step], device_id=(right,)
    )
    hop.start()
    hop.wait()  # my row has left, and my left neighbour's row has landed


def all_gather(x, mesh):
    num_devices = mesh.size

    def per_device(block):
        return pl.pallas_call(
            all_gather_kernel,
            grid=(num_devices - 1,),
            out_shape=jax.ShapeDtypeStruct((num_devices, *BLOCK), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[
                pltpu.SemaphoreType.DMA,  # own_sem
                pltpu.SemaphoreType.DMA,  # send_sem
                pltpu.SemaphoreType.DMA((num_devices - 1,)),  # recv_sems, one per step
            ],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * BLOCK[0] * BLOCK[1], dtype=jnp.float32).reshape(n * BLOCK[0], BLOCK[1])
    out = all_gather(x, mesh)
    jax.block_until_ready(out)
    print("all-gather:", out.shape)
