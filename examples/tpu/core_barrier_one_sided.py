"""Two TensorCores per device with a one-sided hand-written barrier.

The same kernel as core_barrier.py, but the barrier is written by hand and only core 0
signals: core 0 tells core 1 that its half is ready, and then both cores wait for a signal.
Core 1 gets one; core 0 waits for a signal that nobody sends, on every device, in every
schedule. JAX's TPU interpreter hangs on it.
"""

# semcheck: expect unsatisfied_wait

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

HALF = (8, 128)
CORES = 2


def swap_halves_body(x_hbm, o_hbm, scratch, barrier_sem):
    core = lax.axis_index("core")
    other = 1 - core
    pltpu.sync_copy(x_hbm.at[pl.ds(core * HALF[0], HALF[0])], o_hbm.at[pl.ds(core * HALF[0], HALF[0])])

    @pl.when(core == 0)
    def _():
        pl.semaphore_signal(barrier_sem, 1, core_index=1)

    pl.semaphore_wait(barrier_sem, 1)  # <- unsatisfied_wait  (BUG: core 1 never signals core 0)
    pltpu.sync_copy(o_hbm.at[pl.ds(other * HALF[0], HALF[0])], scratch)


def swap_halves(x, mesh):
    cores = pltpu.create_tensorcore_mesh("core", num_cores=CORES)

    def per_device(block):
        return pl.kernel(
            swap_halves_body,
            out_type=jax.ShapeDtypeStruct(block.shape, block.dtype),
            mesh=cores,
            scratch_types=[pltpu.VMEM(HALF, jnp.float32), pltpu.SemaphoreType.REGULAR],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.ones((n * CORES * HALF[0], HALF[1]), jnp.float32)
    out = swap_halves(x, mesh)
    jax.block_until_ready(out)
    print("core barrier (one-sided):", out.shape)
