"""A count the kernel loads from an SMEM operand (not scalar prefetch) and signals; it then
waits for 3. The script passes 3, so with the script's data the kernel is safe; `--assume
count_ref[0]=0..8` on the command line asks for every count in 0..8, and a count below 3
leaves the wait unsatisfied (a count above it leaves the semaphore nonzero).

Expected verdict: safe
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P


def kernel(count_ref, o_ref, sem):
    pl.semaphore_signal(sem, count_ref[0])
    pl.semaphore_wait(sem, 3)


if __name__ == "__main__":
    devices = jax.device_count()
    mesh = Mesh(np.array(jax.devices()), ("x",))

    def per_device(block):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        )(block)

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    fn(jnp.full((devices,), 3, jnp.int32))
