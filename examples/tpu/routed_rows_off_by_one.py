"""Routed rows with an off-by-one clamp: `unsatisfied_wait`, for exactly one routed count.

The same kernel as routed_rows.py, except that the producer clamps the credits at
CAPACITY - 1, as if the buffer's last row were reserved, while the consumer waits for
min(routed, CAPACITY). For every count below CAPACITY both sides agree; when the router
sends exactly CAPACITY rows (the top of the assumed range 0..CAPACITY), the consumer waits
for one credit more than it gets and hangs.

`rows_ref[0]` is a protocol input on each device; the counterexample names the value that
hangs (`rows_ref[0]@dK = 64`).
"""

# semcheck: expect unsatisfied_wait

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
    pl.semaphore_signal(ready, jnp.minimum(routed, CAPACITY - 1))  # the bug: should be CAPACITY
    # Consumer side: one credit per row it will read.
    pl.semaphore_wait(ready, jnp.minimum(routed, CAPACITY))  # <- unsatisfied_wait


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
    print("routed rows (off by one):", out.shape)
