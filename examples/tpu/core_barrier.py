"""Two TensorCores per device exchange halves through a core barrier (pl.kernel + core_map).

The kernel runs once on each of the two TensorCores of every device (a TensorCoreMesh). Each
core copies its half of the input into the output, then both meet at `pltpu.core_barrier`:
each core signals the barrier semaphore of the *other* core (`core_index=`) and waits for one
signal on its own. Only then does each core read back the half the other core wrote. Both
cores signal once and wait once, in every schedule.
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

HALF = (8, 128)
CORES = 2


def swap_halves_body(x_hbm, o_hbm, scratch, barrier_sem):
    core = lax.axis_index("core")
    other = 1 - core
    pltpu.sync_copy(x_hbm.at[pl.ds(core * HALF[0], HALF[0])], o_hbm.at[pl.ds(core * HALF[0], HALF[0])])
    pltpu.core_barrier(barrier_sem, core_axis_name="core")
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
    print("core barrier:", out.shape)
