"""Neighbour sums by atomics, read too early: a device reads its total while its left
neighbour's atomic add may still be landing in it.

Same as remote_atomic_add.py, except that each device reads its accumulator before its
`done` wait. The two adds into an accumulator are atomic with respect to each other, but a
plain load of the same elements is not ordered after the neighbour's: it can see the sum
without the neighbour's row.
"""

# semcheck: expect data_race

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P


def neighbour_sum_kernel(x_ref, acc_ref, o_ref, ready, done):
    me = lax.axis_index("x")
    n = lax.axis_size("x")
    right = lax.rem(me + 1, n)
    left = lax.rem(me + n - 1, n)
    acc_ref[...] = jnp.zeros_like(acc_ref)
    pl.semaphore_signal(ready, device_id=left)
    pl.semaphore_wait(ready)  # the right neighbour's accumulator is zeroed
    row = x_ref[...]
    plgpu.atomic_add(acc_ref, row)
    plgpu.atomic_add(plgpu.remote_ref(acc_ref, right), row)  # <- data_race
    pl.semaphore_signal(done, device_id=right)
    o_ref[...] = acc_ref[...]  # <- data_race
    pl.semaphore_wait(done)


def neighbour_sum(x, mesh):
    def per_device(block):
        shape = jax.ShapeDtypeStruct(block.shape, block.dtype)
        return plgpu.kernel(
            neighbour_sum_kernel,
            out_type=(shape, shape),
            scratch_types=[plgpu.SemaphoreType.REGULAR, plgpu.SemaphoreType.REGULAR],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x")), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * 8, 128), jnp.float32)
    out = neighbour_sum(x, mesh)
    jax.block_until_ready(out)
    print("remote atomic add (early read):", out[1].shape)
