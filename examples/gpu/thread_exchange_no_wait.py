"""The Pallas threads of one block exchange rows through SMEM, but skip the barrier wait.

As `thread_exchange.py`, but each thread only arrives at the shared mbarrier and never waits
for its phase: arriving says "my row is written" to whoever waits, and nobody does. A thread
can therefore load the other thread's staging row while that thread is still storing it: the
plain store into SMEM and the plain load from it are unordered. Every device has the race,
in its own block; JAX's GPU interpreter with race detection reports it on the same two lines.
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
        stage[t] = x_ref[t] * 2.0  # <- data_race
        plgpu.barrier_arrive(written)
        # (no barrier_wait: the arrival alone orders nothing)
        o_ref[t] = stage[(t + 1) % THREADS]  # <- data_race


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
