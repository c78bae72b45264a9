"""Neighbour sums by atomics: every device adds its row into its own accumulator and, through
`plgpu.remote_ref`, into its right neighbour's, with `plgpu.atomic_add`; then it reads its
total (its own row plus its left neighbour's).

Each device zeroes its accumulator before it signals `ready` to its left neighbour (the one
that adds into it), and adds into its right neighbour only after that neighbour's `ready`
has come, so no add lands before the zero fill. A device's own add and its left
neighbour's add into the same accumulator run at the same time: they are atomic
read-modify-writes, which never race with each other. A device reads its total only after
the left neighbour's `done`, signalled after its add, so no add is still landing then.
"""

# semcheck: expect safe

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
    plgpu.atomic_add(plgpu.remote_ref(acc_ref, right), row)
    pl.semaphore_signal(done, device_id=right)
    pl.semaphore_wait(done)  # the left neighbour's add has landed here
    o_ref[...] = acc_ref[...]


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
    print("remote atomic add:", out[1].shape)
