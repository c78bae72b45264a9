"""Check-in counter polled with a non-decrementing wait, then drained.

Every device checks in by signalling the REGULAR `arrived` semaphore of device 0. Device 0
polls until every device has checked in with `pl.semaphore_wait(arrived, N,
decrement=False)`, which returns once the count reaches N and leaves it there, and then
drains the count with an ordinary decrementing wait, so it is zero at exit.

Mosaic TPU cannot lower a non-decrementing wait, and JAX's TPU interpreter rejects it
("Non-decrementing wait is not supported"). semcheck reports that as a `not_lowerable`
warning and still checks the protocol, with the wait's Mosaic GPU meaning (block until the
count reaches the value, take nothing).
"""

# semcheck: expect not_lowerable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P


def check_in_kernel(x_ref, o_ref, arrived):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")

    pl.semaphore_signal(arrived, 1, device_id=(0,))
    o_ref[...] = x_ref[...]

    @pl.when(my_id == 0)
    def _():
        pl.semaphore_wait(arrived, num_devices, decrement=False)  # <- not_lowerable
        pl.semaphore_wait(arrived, num_devices)


def check_in(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            check_in_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.ones((n * 8, 128), jnp.float32)
    out = check_in(x, mesh)
    jax.block_until_ready(out)
    print("non-decrementing poll:", out.shape)
