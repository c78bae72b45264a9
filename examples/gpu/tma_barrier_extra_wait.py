"""A barrier wait for a phase that never completes.

One TMA copy completes phase 0 of the barrier, and the block waits for it. A second
`barrier_wait` on the same barrier waits for phase 1, but nothing arrives on the barrier
again: the block hangs (completions and waits of an mbarrier must match).
"""

# semcheck: expect unsatisfied_wait

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P


def tma_kernel(x_ref, o_ref, tile, barrier):
    plgpu.copy_gmem_to_smem(x_ref, tile, barrier)
    plgpu.barrier_wait(barrier)
    o_ref[...] = tile[...] * 2.0
    plgpu.barrier_wait(barrier)  # <- unsatisfied_wait


def tma_scale(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            tma_kernel,
            out_type=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid=(1,),
            grid_names=("blocks",),
            scratch_types=[
                plgpu.SMEM(block.shape, block.dtype),
                plgpu.Barrier(num_arrivals=1),
            ],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * 64, 128), jnp.float32)
    out = tma_scale(x, mesh)
    jax.block_until_ready(out)
    print("tma scale:", out.shape)
