"""The Pallas threads of a block take turns with one shared-memory tile, but a thread leaves
its turn with its TMA store still reading the tile (the twin of `scoped_tile_handoff.py`).

The barrier that begins every thread-collective `run_scoped` orders the threads, not their
copies: thread 0 leaves step 0's scope as soon as its store is issued, thread 1 enters step
1's scope and refills the tile while the store may still be reading it. The wait for the
store's read has to come before the scope ends; waiting at the end of the kernel is too late.
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


def handoff_kernel(x_ref, o_ref):
    @pl.loop(0, THREADS)
    def _step(step):
        @functools.partial(pl.run_scoped, tile=plgpu.SMEM(x_ref.shape[1:], x_ref.dtype), collective_axes="t")
        def _(tile):
            @pl.when(lax.axis_index("t") == step)
            def _mine():
                tile[...] = x_ref[step] * 2.0  # <- data_race: the other thread's store may still read it
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(tile, o_ref.at[step])  # BUG: still reading the tile

    plgpu.wait_smem_to_gmem(0)  # every row this thread stored is written


def scoped_tile_handoff(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            handoff_kernel,
            out_type=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid=(1,),
            grid_names=("blocks",),
            num_threads=THREADS,
            thread_name="t",
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * THREADS, 64, 128), jnp.float32)
    out = scoped_tile_handoff(x, mesh)
    jax.block_until_ready(out)
    print("scoped tile handoff, no read wait:", out.shape)
