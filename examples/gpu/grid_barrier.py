"""Grid-wide barrier: every block of the launch waits until all blocks have arrived.

`pl.get_global` gives one GMEM semaphore for the whole launch, shared by every block. Each
block writes its row of a staging output, adds 1 to the semaphore and then waits, without
decrementing, until it holds `num_blocks`: a wait that leaves the count alone lets every
block see the same total. Only then does each block read its neighbour's staged row, into
a second output. The semaphore ends the kernel holding `num_blocks`, which is fine on GPU
(it is zero-filled at every launch).

(An earlier version of this example wrote the neighbour's row back into the staging output
after the barrier, so a block could overwrite its row while its other neighbour was still
reading it: a data race that semcheck reports since it compares the plain loads and stores
of different blocks.)
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

NUM_BLOCKS = 4


def barrier_kernel(x_ref, stage_ref, o_ref):
    arrived = pl.get_global(plgpu.SemaphoreType.REGULAR)
    block = lax.axis_index("blocks")
    stage_ref[block] = x_ref[block] + 1.0
    pl.semaphore_signal(arrived)
    pl.semaphore_wait(arrived, NUM_BLOCKS, decrement=False)
    # Every block's row is staged by now, and nobody writes the staging rows again.
    o_ref[block] = stage_ref[(block + 1) % NUM_BLOCKS]


def grid_barrier(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            barrier_kernel,
            out_type=(jax.ShapeDtypeStruct(block.shape, block.dtype),) * 2,
            grid=(NUM_BLOCKS,),
            grid_names=("blocks",),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x")), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.zeros((mesh.size * NUM_BLOCKS, 128), jnp.float32)
    _, out = grid_barrier(x, mesh)
    jax.block_until_ready(out)
    print("grid barrier:", out.shape)
