"""Row sums of a wide matrix whose reduction dimension is marked "parallel".

One row block, accumulated over column blocks: each step adds one (8, 128) block of x into
the output block, whose index map ignores the grid. The column dimension is the reduction,
yet it is declared "parallel". On a chip with one TensorCore per device nothing goes wrong:
the steps run in order. On a megacore chip (v4, v5p) the grid is split between the two
cores: each accumulates half of the columns into its own copy of the output block and
writes it back to the same HBM block, so the two write-backs race and one core's partial
sum is lost. JAX's TPU interpreter with two cores per device and detect_races=True reports
the race.
"""

# semcheck: expect safe cores=1
# semcheck: expect data_race cores=2

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (8, 128)
COL_BLOCKS = 4
DIMENSION_SEMANTICS = ("parallel",)  # BUG: the column steps accumulate into one output block


def row_sums_kernel(x_ref, o_ref):
    @pl.when(pl.program_id(0) == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    o_ref[...] += x_ref[...]


def row_sums(x, mesh):
    def per_device(block):
        return pl.pallas_call(  # <- data_race
            row_sums_kernel,
            grid=(COL_BLOCKS,),
            out_shape=jax.ShapeDtypeStruct(BLOCK, block.dtype),
            in_specs=[pl.BlockSpec(BLOCK, lambda j: (0, j))],
            out_specs=pl.BlockSpec(BLOCK, lambda j: (0, 0)),
            compiler_params=pltpu.CompilerParams(dimension_semantics=DIMENSION_SEMANTICS),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * BLOCK[0], COL_BLOCKS * BLOCK[1]), jnp.float32)
    out = jax.block_until_ready(row_sums(x, mesh))
    print("row sums:", out.shape, float(out.sum()))
