"""Row sums of a wide matrix, accumulated over column blocks, on a megacore chip.

The grid is (row blocks, column blocks). Each step adds one (8, 128) block of x into the
output block of its rows, which stays resident across the column steps and is written back
to HBM once its rows are done. The row dimension is "parallel" and the column dimension,
the reduction, is "arbitrary": on a chip with two TensorCores per device (v4, v5p) each
core takes its own row blocks, so no two cores ever write back the same output block.
"""

# semcheck: expect safe cores=1
# semcheck: expect safe cores=2

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (8, 128)
ROW_BLOCKS, COL_BLOCKS = 2, 4


def row_sums_kernel(x_ref, o_ref):
    @pl.when(pl.program_id(1) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += x_ref[...]


def row_sums(x, mesh):
    def per_device(block):
        return pl.pallas_call(row_sums_kernel,
            grid=(ROW_BLOCKS, COL_BLOCKS),
            out_shape=jax.ShapeDtypeStruct((ROW_BLOCKS * BLOCK[0], BLOCK[1]), block.dtype),
            in_specs=[pl.BlockSpec(BLOCK, lambda i, j: (i, j))],
            out_specs=pl.BlockSpec(BLOCK, lambda i, j: (i, 0)),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * ROW_BLOCKS * BLOCK[0], COL_BLOCKS * BLOCK[1]), jnp.float32)
    out = jax.block_until_ready(row_sums(x, mesh))
    print("row sums:", out.shape, float(out.sum()))
