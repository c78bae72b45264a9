"""Spinning on `semaphore_read` for two arrivals when only one comes: a hang with no blocked wait.

As in poll_arrivals.py, each device signals its right neighbour's `arrived` semaphore and
polls its own with `pl.semaphore_read` in a `lax.while_loop`, but it polls for two arrivals
while only its left neighbour signals it: once that one signal has landed, the read returns
1 on every turn and nothing left can change it. No wait is blocked (the device keeps
running), so this is no stuck state: semcheck's explicit engine finds the states from which
no schedule ends and reports the read as an unsatisfied wait, with a trace into the loop
and one turn of it. On hardware the core spins until the job is killed.
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

EXPECTED_ARRIVALS = 2  # but only the left neighbour signals


def poll_kernel(x_ref, o_ref, arrived):
    my_id = lax.axis_index("x")
    right = lax.rem(my_id + 1, lax.axis_size("x"))

    pl.semaphore_signal(arrived, 1, device_id=(right,))
    o_ref[...] = x_ref[...]
    seen = lax.while_loop(
        lambda seen: seen < EXPECTED_ARRIVALS, lambda _: pl.semaphore_read(arrived), 0)  # <- unsatisfied_wait
    pl.semaphore_wait(arrived, seen)


def poll_arrivals(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            poll_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * 8, 128), jnp.float32)
    jax.block_until_ready(poll_arrivals(x, mesh))
    print("poll arrivals (miscounted):", x.shape)
