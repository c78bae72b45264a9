"""The buggy twin of writeback_drained_in_epilogue.py: the last step drains only its own slot.

The pipeline is the same: every step starts a local write-back of its slot to HBM, records
its row count in `pending_ref[slot]`, and waits for the slot's previous write-back before
refilling it. But the last step drains only `(n - 1) % 2`, the slot it just wrote. The
write-back started one step earlier from the other slot is never waited for: its DMA
semaphore is still raised when the kernel ends (a leftover), and its copy may still be
reading VMEM and writing HBM after the kernel returned. The fix is the `.wait()` of that
copy, rebuilt from `pending_ref`, as the correct twin does for both slots.
"""

# semcheck: expect semaphore_leftover

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

ROWS, COLS = 8, 128
NUM_BLOCKS = 4
DRAINED_SLOTS = ((NUM_BLOCKS - 1) % 2,)  # only the slot the last step wrote: a bug


def writeback_kernel(x_ref, o_hbm, buf, sems, pending_ref, block_ref):
    i = pl.program_id(0)
    n = pl.num_programs(0)

    def writeback(slot, block, rows):
        return pltpu.make_async_copy(buf.at[slot, pl.ds(0, rows)], o_hbm.at[pl.ds(block * ROWS, rows)], sems.at[slot])

    def drain(slot):
        rows = pending_ref[slot]

        @pl.when(rows > 0)
        def _():
            writeback(slot, block_ref[slot], rows).wait()
            pending_ref[slot] = 0

    @pl.when(i == 0)
    def _():
        pending_ref[0] = 0
        pending_ref[1] = 0

    slot = i % 2
    drain(slot)  # the write-back of two steps back still reads this slot
    buf[slot] = x_ref[...] + 1.0
    writeback(slot, i, ROWS).start()  # <- semaphore_leftover
    pending_ref[slot] = ROWS
    block_ref[slot] = i

    @pl.when(i == n - 1)
    def _():
        for s in DRAINED_SLOTS:
            drain(s)


def add_one(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            writeback_kernel,
            grid=(NUM_BLOCKS,),
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec((ROWS, COLS), lambda i: (i, 0))],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[
                pltpu.VMEM((2, ROWS, COLS), jnp.float32),
                pltpu.SemaphoreType.DMA((2,)),
                pltpu.SMEM((2,), jnp.int32),  # pending_ref: rows in flight out of each slot (0: none)
                pltpu.SMEM((2,), jnp.int32),  # block_ref: the block each slot's write-back goes to
            ],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * NUM_BLOCKS * ROWS * COLS, dtype=jnp.float32).reshape(n * NUM_BLOCKS * ROWS, COLS)
    out = add_one(x, mesh)
    jax.block_until_ready(out)
    print("write-back drained in epilogue, one slot:", out.shape, bool(jnp.array_equal(out, x + 1.0)))
