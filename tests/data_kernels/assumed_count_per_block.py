"""A count the kernel loads from a blocked SMEM operand: each device passes 2 counts, and
the BlockSpec hands grid step i the (1,) block i. Step 0 signals its count and step 1 waits
for its own, so the kernel hangs when the two blocks hold different counts (3 at step 0 and
4 at step 1: the wait is never satisfied). The script passes 3 everywhere, but
`semcheck.assume("count_ref[0]", 0, 8)` asks for every count in 0..8, and `count_ref[0]` is a
different array element at each step: one input per device and block, not one per device.

Expected verdict: unsatisfied_wait
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import semcheck

semcheck.assume("count_ref[0]", 0, 8)


def kernel(count_ref, o_ref, sem):
    count = count_ref[0]  # block i of the device's counts at grid step i
    step = pl.program_id(0)

    @pl.when(step == 0)
    def _():
        pl.semaphore_signal(sem, count)

    @pl.when(step == 1)
    def _():
        pl.semaphore_wait(sem, count)  # hangs when block 1's count exceeds block 0's


if __name__ == "__main__":
    devices = jax.device_count()
    mesh = Mesh(np.array(jax.devices()), ("x",))

    def per_device(counts):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(counts.shape, counts.dtype),
            grid=(2,),
            in_specs=[pl.BlockSpec((1,), lambda i: (i,), memory_space=pltpu.SMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        )(counts)

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    fn(jnp.full((2 * devices,), 3, jnp.int32))
