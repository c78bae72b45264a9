"""Blackwell MMA over two K tiles: TMA loads the operands into SMEM, the tensor core
multiplies them asynchronously, and the MMA's barrier says when it is done with them.

For each K tile, the block copies it into `a` and `b` (the copy arrives on `loaded`), waits
for it, and issues `plgpu.tcgen05_mma(..., barrier=mma_done)`, which arrives on `mma_done`
once the MMA has completed: until then the tensor core may still read `a` and `b`. The
block waits for that arrival before copying the next tile over them.
"""

# semcheck: expect safe

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

K_TILES = 2
TILE = 128


def mma_kernel(x_ref, o_ref):
    @functools.partial(
        pl.run_scoped,
        a=plgpu.SMEM((TILE, TILE), jnp.float16),
        b=plgpu.SMEM((TILE, TILE), jnp.float16),
        acc=plgpu.TMEM((TILE, TILE), jnp.float32),
        loaded=plgpu.Barrier(num_arrivals=2),
        mma_done=plgpu.Barrier(orders_tensor_core=True),
    )
    def _scope(a, b, acc, loaded, mma_done):
        for k in range(K_TILES):
            plgpu.copy_gmem_to_smem(x_ref.at[k], a, loaded)
            plgpu.copy_gmem_to_smem(x_ref.at[k], b, loaded)
            plgpu.barrier_wait(loaded)
            plgpu.tcgen05_mma(acc, a, b, mma_done, accumulate=k > 0)
            plgpu.barrier_wait(mma_done)
        o_ref[...] = plgpu.async_load_tmem(acc)


def mma(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            mma_kernel,
            out_type=jax.ShapeDtypeStruct((TILE, TILE), jnp.float32),
            grid=(1,),
            grid_names=("blocks",),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * K_TILES, TILE, TILE), jnp.float16)
    out = mma(x, mesh)
    jax.block_until_ready(out)
    print("mma:", out.shape)
