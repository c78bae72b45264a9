"""Blocks of a cluster exchange rows through global memory, ordered by a cluster barrier.

Each of the two blocks of a cluster stores its row of a staging output with plain stores,
arrives at a `plgpu.ClusterBarrier` and waits for it: the barrier's phase completes only
once every block of the cluster has arrived, so after the wait every row is written. Then
each block loads the other block's row into its row of the result. Nothing writes the
staging rows after the barrier, so no load can meet a store.
"""

# semcheck: expect safe

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
        plgpu.barrier_wait(barrier)
        o_ref[block] = stage_ref[(block + 1) % CLUSTER]


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
