"""Routed rows: a kernel whose signal count and wait value come from a scalar-prefetch operand.

`rows_ref[0]` (a scalar-prefetch operand, one value per device) says how many rows the
router sent this device. The producer side releases one credit per routed row, clamped to
the receive buffer's CAPACITY; the consumer side waits for the same clamped count. The two
agree for every value, so the wait always passes and the semaphore ends at zero.

semcheck cannot know the router's count when it traces the kernel: the element is a
protocol input on each device (`rows_ref[0]@d0`, ...), bounded here by
`semcheck.assume("rows_ref[0]", 0, CAPACITY)` (the router never sends more), and every
value in that range is checked on every device. Past a few devices that is more start
states than enumeration can take; `--engine auto` gives it to the z3 engine, which covers
the whole range in one query per question.
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

import semcheck

CAPACITY = 64  # rows in the receive buffer
semcheck.assume("rows_ref[0]", 0, CAPACITY)


def routed_kernel(rows_ref, x_ref, o_ref, ready):
    routed = rows_ref[0]
    # Producer side: one credit per routed row the buffer can take.
    pl.semaphore_signal(ready, jnp.minimum(routed, CAPACITY))
    # Consumer side: one credit per row it will read.
    pl.semaphore_wait(ready, jnp.minimum(routed, CAPACITY))


def routed_rows(rows, x, mesh):
    def per_device(rows, block):
        return pl.pallas_call(
            routed_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY),
                scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            ),
        )(rows, block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)
    )(rows, x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    rows = jnp.full((n,), CAPACITY, dtype=jnp.int32)  # a full buffer on every device
    x = jnp.arange(n * CAPACITY * 128, dtype=jnp.float32).reshape(n * CAPACITY, 128)
    out = routed_rows(rows, x, mesh)
    jax.block_until_ready(out)
    print("routed rows:", out.shape)
