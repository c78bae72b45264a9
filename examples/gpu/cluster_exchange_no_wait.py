"""Blocks of a cluster exchange rows through global memory, but skip the barrier wait.

As `cluster_exchange.py`, but each block only arrives at the cluster barrier and never waits
for its phase: arriving says "my row is written" to whoever waits, and nobody does. A block
can therefore load the other block's staging row while that block is still storing it:
the plain load and the plain store are unordered. (JAX's own GPU interpreter tests assert a
race for this pattern; semcheck compares the plain loads and stores of different blocks.)
"""

# semcheck: expect data_race

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

CLUSTER = 2


def exchange_kernel(x_ref, stage_ref, o_ref):
    block = lax.axis_index("c")

    @functools.partial(pl.run_scoped, barrier=plgpu.ClusterBarrier(collective_axes=("c",), num_arrivals=1))
    def _(barrier):
        stage_ref[block] = x_ref[block] * 2.0
        plgpu.barrier_arrive(barrier)
        # (no barrier_wait: the arrival alone orders nothing)
        o_ref[block] = stage_ref[(block + 1) % CLUSTER]  # <- data_race


def cluster_exchange(x, mesh):
    def per_device(rows):
        return plgpu.kernel(
            exchange_kernel,
            out_type=(jax.ShapeDtypeStruct(rows.shape, rows.dtype),) * 2,
            grid=(1,),
            grid_names=("g",),
            cluster=(CLUSTER,),
            cluster_names=("c",),
        )(rows)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x")), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * CLUSTER, 128), jnp.float32)
    _, out = cluster_exchange(x, mesh)
    jax.block_until_ready(out)
    print("cluster exchange:", out.shape)
