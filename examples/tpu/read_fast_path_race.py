"""Arrival check with semaphore_read whose slow path skips the handshake.

The same protocol as read_fast_path.py, but the slow path assumes that a left neighbour
that has not arrived yet is not taking part, and does nothing. Whether that is wrong depends
on the schedule: if the left neighbour's signal lands before the read, the device takes the
fast path and all is well; if the read comes first, the device never acknowledges, and its
left neighbour waits for the acknowledgement forever. Running the kernel (on hardware, or in
a simulator that picks one schedule) may well never show the hang; semcheck finds the
schedule that does.
"""

# semcheck: expect unsatisfied_wait

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P


def arrival_kernel(x_ref, o_ref, arrived, ack):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)

    pl.semaphore_signal(arrived, 1, device_id=(right,))
    o_ref[...] = x_ref[...]

    already_there = pl.semaphore_read(arrived)

    @pl.when(already_there > 0)
    def _fast_path():
        pl.semaphore_wait(arrived, 1)
        pl.semaphore_signal(ack, 1, device_id=(left,))

    # BUG: no slow path; a left neighbour that has not arrived yet is never acknowledged

    pl.semaphore_wait(ack, 1)  # <- unsatisfied_wait


def arrival(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            arrival_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.REGULAR],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.ones((n * 8, 128), jnp.float32)
    out = arrival(x, mesh)
    jax.block_until_ready(out)
    print("semaphore_read fast path only:", out.shape)
