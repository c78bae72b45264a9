"""Double buffering with an SMEM slot index written back too soon: `data_race`.

The same kernel as smem_slot_double_buffer.py, except that the step writes the spare slot
back to `slot_ref` before it works on its block, and then reads the slot from `slot_ref`
again: it works on the spare slot, which the copy of the next block is landing in. The
read races with that copy at every step but the last.

smem_slot_double_buffer.py is the fix: read the slot once, write it back at the end.
"""

# semcheck: expect data_race

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (8, 128)
NUM_BLOCKS = 4


def slot_kernel(x_hbm, o_ref, buf, sems, slot_ref):
    i = pl.program_id(0)
    n = pl.num_programs(0)

    def copy(block, into):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(block * BLOCK[0], BLOCK[0])], buf.at[into], sems.at[into])

    @pl.when(i == 0)
    def _():
        slot_ref[0] = 0
        copy(0, 0).start()

    current = slot_ref[0]
    spare = 1 - current

    @pl.when(i + 1 < n)
    def _():
        copy(i + 1, spare).start()  # <- data_race

    copy(i, current).wait()
    slot_ref[0] = spare  # BUG: advanced before this step's work is done
    o_ref[...] = buf[slot_ref[0]] * 2.0  # <- data_race


def scale(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            slot_kernel,
            grid=(NUM_BLOCKS,),
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(BLOCK, lambda i: (i, 0)),
            scratch_shapes=[
                pltpu.VMEM((2, *BLOCK), jnp.float32),
                pltpu.SemaphoreType.DMA((2,)),
                pltpu.SMEM((1,), jnp.int32),  # slot_ref: the slot of the block this step works on
            ],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * NUM_BLOCKS * BLOCK[0] * BLOCK[1], dtype=jnp.float32).reshape(n * NUM_BLOCKS * BLOCK[0], BLOCK[1])
    out = scale(x, mesh)
    jax.block_until_ready(out)
    print("SMEM slot advanced early:", out.shape, bool(jnp.array_equal(out, x * 2.0)))
