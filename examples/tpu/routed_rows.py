"""Routed rows: a kernel sized by a scalar-prefetch operand, one local DMA per routed row.

`rows_ref[0]` (a scalar-prefetch operand, one value per device) says how many rows the
router sent this device. The kernel copies that many rows, clamped to the buffer's
CAPACITY, with one DMA each on one DMA semaphore, then waits for each of them. The start
loop and the wait loop run the same number of times for every value, so every wait is
satisfied and the semaphore ends at zero.

semcheck cannot know the router's count when it traces the kernel: the element is a
protocol input on each device (`rows_ref[0]@d0`, ...), bounded here by
`semcheck.assume("rows_ref[0]", 0, CAPACITY)` (the router never sends more), and every
value in that range is checked.

Expected verdict: safe
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

import semcheck

CAPACITY = 2  # rows in the receive buffer
semcheck.assume("rows_ref[0]", 0, CAPACITY)


def routed_kernel(rows_ref, x_ref, o_ref, sem):
    routed = rows_ref[0]
    starts = jnp.minimum(routed, CAPACITY)
    waits = jnp.minimum(routed, CAPACITY)

    def copy(i):
        return pltpu.make_async_copy(x_ref.at[pl.ds(i, 1)], o_ref.at[pl.ds(i, 1)], sem)

    @pl.loop(0, starts)
    def _(i):
        copy(i).start()

    @pl.loop(0, waits)
    def _(i):
        copy(i).wait()


def routed_rows(rows, x, mesh):
    def per_device(rows, block):
        return pl.pallas_call(
            routed_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY),
                scratch_shapes=[pltpu.SemaphoreType.DMA],
            ),
        )(rows, block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)
    )(rows, x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    rows = jnp.full((n,), 3, dtype=jnp.int32)
    x = jnp.arange(n * CAPACITY * 128, dtype=jnp.float32).reshape(n * CAPACITY, 128)
    out = routed_rows(rows, x, mesh)
    jax.block_until_ready(out)
    print("routed rows:", out.shape)
