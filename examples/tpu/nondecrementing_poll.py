"""Check-in counter polled with a non-decrementing wait, then drained: hangs on a TPU.

Every device checks in by signalling the REGULAR `arrived` semaphore of device 0. Device 0
polls until every device has checked in with `pl.semaphore_wait(arrived, N,
decrement=False)`, meant to return once the count reaches N and leave it there, and then
drains the count with an ordinary decrementing wait, so that it is zero at exit.

That is what the wait does on Mosaic GPU, but not on a TPU: JAX's Pallas TPU lowering
ignores `decrement=False` (its guard tests an MLIR value, which is always true) and emits an
ordinary decrementing `tpu.sem_wait`, so the poll takes the N check-ins and the drain waits
for N more that never come (observed on TPU v5e with JAX 0.10.2: signal 4, wait 2 with
decrement=False, read 2). semcheck checks the kernel as the chip runs it: the poll is
`lowered_as_decrementing` (a warning) and the drain is an `unsatisfied_wait`. (Before the
chip was asked, this example was declared `not_lowerable` and checked with the GPU meaning,
which called it safe.) poll_arrivals.py is the TPU way: poll with `semaphore_read`, then
take what you saw with one wait.
"""

# semcheck: expect unsatisfied_wait, lowered_as_decrementing

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
        pl.semaphore_wait(arrived, num_devices, decrement=False)  # <- lowered_as_decrementing
        pl.semaphore_wait(arrived, num_devices)  # <- unsatisfied_wait


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
