"""Grid-wide barrier with decrementing waits: the first block through strands the others.

As in grid_barrier.py, every block adds 1 to one `pl.get_global` semaphore, but then waits
for `num_blocks` with the default `decrement=True`. The waits compete for one count: the
first block to see `num_blocks` takes all of it, and every other block waits forever for
arrivals that have all been consumed (on GPU a decrementing wait is a CAS loop that only
returns after taking `value` from a count of at least `value`).
"""

# semcheck: expect unsatisfied_wait

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

NUM_BLOCKS = 4


def barrier_kernel(x_ref, o_ref):
    arrived = pl.get_global(plgpu.SemaphoreType.REGULAR)
    block = lax.axis_index("blocks")
    o_ref[block] = x_ref[block] + 1.0
    pl.semaphore_signal(arrived)
    pl.semaphore_wait(arrived, NUM_BLOCKS)  # <- unsatisfied_wait
    o_ref[block] = o_ref[(block + 1) % NUM_BLOCKS]


def grid_barrier(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            barrier_kernel,
            out_type=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid=(NUM_BLOCKS,),
            grid_names=("blocks",),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.zeros((mesh.size * NUM_BLOCKS, 128), jnp.float32)
    out = grid_barrier(x, mesh)
    jax.block_until_ready(out)
    print("grid barrier:", out.shape)
