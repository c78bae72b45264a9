"""The Pallas threads of one block exchange rows through SMEM, ordered by an mbarrier.

The kernel runs two Pallas threads per block (`num_threads=2`, one warpgroup each). Both
share one SMEM staging buffer and one `plgpu.Barrier(num_arrivals=2)`: `run_scoped` with
`collective_axes="t"` allocates them once for the block instead of once per thread. Each
thread stores its row of the staging buffer with plain stores, arrives at the barrier and
waits for it: phase 0 completes only once both threads have arrived, so after the wait both
rows are written. Then each thread loads the other thread's row into its row of the result.
Nothing writes the staging rows after the barrier, so no load can meet a store. (The block
version of `cluster_exchange.py`: the same exchange, between the threads of one block, over
shared memory instead of between the blocks of a cluster over global memory.)
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

THREADS = 2


def exchange_kernel(x_ref, o_ref):
    @functools.partial(
        pl.run_scoped,
        stage=plgpu.SMEM((THREADS, *x_ref.shape[1:]), x_ref.dtype),
        written=plgpu.Barrier(num_arrivals=THREADS),
        collective_axes="t",
    )
    def _(stage, written):
        t = lax.axis_index("t")
        stage[t] = x_ref[t] * 2.0
        plgpu.barrier_arrive(written)
        plgpu.barrier_wait(written)
        o_ref[t] = stage[(t + 1) % THREADS]


def thread_exchange(x, mesh):
    def per_device(rows):
        return plgpu.kernel(
            exchange_kernel,
            out_type=jax.ShapeDtypeStruct(rows.shape, rows.dtype),
            grid=(1,),
            grid_names=("g",),
            num_threads=THREADS,
            thread_name="t",
        )(rows)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * THREADS, 128), jnp.float32)
    out = thread_exchange(x, mesh)
    jax.block_until_ready(out)
    print("thread exchange:", out.shape)
