"""Check-in counter polled with a non-decrementing wait and never drained.

The same check-in as nondecrementing_poll.py, but device 0 only polls: its non-decrementing
wait leaves the count at N, and nothing takes it back to zero. On a TPU every scratch
semaphore must be zero when the kernel ends (the runtime fails the kernel otherwise), so
this leaves `arrived` at N on device 0. (On Mosaic GPU, where GMEM semaphores are
zero-filled per launch, the same pattern would be fine.) The non-decrementing wait itself is
also reported as not lowerable on TPU.
"""

# semcheck: expect semaphore_leftover, not_lowerable

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

    pl.semaphore_signal(arrived, 1, device_id=(0,))  # <- semaphore_leftover
    o_ref[...] = x_ref[...]

    @pl.when(my_id == 0)
    def _():
        pl.semaphore_wait(arrived, num_devices, decrement=False)  # <- not_lowerable
        # BUG: the count is never drained


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
