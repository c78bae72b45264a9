"""The Pallas threads of a block take turns with one shared-memory tile, handed over by the
barrier that begins every thread-collective `run_scoped`.

The kernel runs two Pallas threads per block. A loop enters a `run_scoped` with
`collective_axes="t"` once per step, and that scope's SMEM tile is the same memory at every
entry. At step `s`, thread `s` alone fills the tile and TMA-stores it to row `s` of the
output, then waits until the store has read the tile. Nothing in the kernel orders thread 1's
fill at step 1 after thread 0's store at step 0, except what Mosaic GPU adds: entering a
thread-collective scope is a barrier of all the block's threads (the lowering emits
`gpu.barrier` there so that no thread reuses a scope's memory while another is still in it).
Thread 1 can enter step 1's scope only once thread 0 has left step 0's, by which time its
store has read the tile. This is the hand-over JAX's collective matmul relies on between the
pipelines of its device steps.
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


def handoff_kernel(x_ref, o_ref):
    @pl.loop(0, THREADS)
    def _step(step):
        @functools.partial(pl.run_scoped, tile=plgpu.SMEM(x_ref.shape[1:], x_ref.dtype), collective_axes="t")
        def _(tile):
            @pl.when(lax.axis_index("t") == step)
            def _mine():
                tile[...] = x_ref[step] * 2.0
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(tile, o_ref.at[step])
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the store has read the tile

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
    print("scoped tile handoff:", out.shape)
