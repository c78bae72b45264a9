"""Check-in counter polled with a non-decrementing wait and never drained: safe on a TPU.

The same check-in as nondecrementing_poll.py, but device 0 only polls. Read as written (the
Mosaic GPU meaning), the non-decrementing wait leaves the count at N and nothing takes it
back to zero, so on a TPU, where every scratch semaphore must be zero when the kernel ends,
`arrived` would be left over on device 0.

On the chip it is not: JAX's Pallas TPU lowering makes `decrement=False` an ordinary
decrementing wait (its guard tests an MLIR value, which is always true; observed on TPU
v5e with JAX 0.10.2), so the poll takes the N check-ins and `arrived` ends at zero. semcheck
checks the kernel as the chip runs it: no leftover, and the wait is reported as
`lowered_as_decrementing` (a warning). (Before the chip was asked, this example was declared
`semaphore_leftover, not_lowerable`.) The file keeps its name; the kernel is correct on a
TPU only by accident of that lowering, and nondecrementing_poll.py shows how the same
reading hangs once a drain follows.
"""

# semcheck: expect lowered_as_decrementing

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
        # no drain: on a TPU the wait above already took the count


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
    print("non-decrementing poll (never drained):", out.shape)
