"""The ring all-gather of allgather_ring_grid.py with one line dropped: `hop.wait()`.

Each grid step still starts the copy of the row it got last into its right neighbour's
output, but nothing waits for it: not for the row to leave (`send_sem`) and not for the
left neighbour's row to land (`recv_sems.at[step]`). Both hold the copy's bytes when the
kernel exits, on every device (`semaphore_leftover`), and the next step forwards a row
that may still be landing (`data_race`). One line is missing, so semcheck reports one
problem: the copy started at the `hop.start()` line is never waited for, and the fix is
its `.wait()` after that line. allgather_ring_grid.py is the fix.
"""

# semcheck: expect data_race, semaphore_leftover
# semcheck: expect semaphore_leftover devices=2

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
    hop.start()  # <- data_race, semaphore_leftover


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
