"""Spin on `semaphore_read` until the left neighbour has arrived, then consume the arrival.

Each device signals its right neighbour's `arrived` semaphore, then polls its own with
`pl.semaphore_read` in a `lax.while_loop` until the count is at least 1, and takes that one
arrival with a decrementing wait, so every semaphore is back to 0 at exit.

Every device signals before it polls, so each poll can always end: the schedules in which a
device keeps spinning are only those in which its left neighbour never runs. JAX's TPU
interpreter cannot run `semaphore_read`; semcheck's explicit engine decides the loop (z3
cannot bound it, and `--engine auto` says which engine decided).
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

EXPECTED_ARRIVALS = 1


def poll_kernel(x_ref, o_ref, arrived):
    my_id = lax.axis_index("x")
    right = lax.rem(my_id + 1, lax.axis_size("x"))

    pl.semaphore_signal(arrived, 1, device_id=(right,))
    o_ref[...] = x_ref[...]
    seen = lax.while_loop(lambda seen: seen < EXPECTED_ARRIVALS, lambda _: pl.semaphore_read(arrived), 0)
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
    print("poll arrivals:", x.shape)
