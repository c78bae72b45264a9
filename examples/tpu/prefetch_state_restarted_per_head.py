"""Scalar-prefetch pipeline state with every head restarted: `data_race`, `semaphore_leftover`.

The same kernel as prefetch_state_across_heads.py, except that it starts the first block of
every head itself (`j == 0`) instead of only when the init flag in `state_ref[1]` says
nothing is in flight. The last step of head 0 has already started the copy of block 3
(head 1's first) into the slot it wrote back to `state_ref[0]`, so step (1, 0) starts a
second copy of block 3 into the same slot while the first is still landing (`data_race` at
that start). From then on that slot's semaphore holds one completion too many: step (1, 1)
starts block 5's copy into the slot while the extra one may still be landing (`data_race`
at the next block's start), step (1, 2) can pass its wait on the stale completion and read
the slot while block 5 lands (`data_race` at the read: block 3's rows taken for block 5's),
and the kernel exits with a copy's bytes left on the semaphore (`semaphore_leftover`; JAX's
TPU interpreter prints "non-zero count ... at kernel exit").

Only a check that follows `state_ref` from step to step sees that the two copies go into
the same slot: the slot at step (1, 0) is the one step (0, 2) wrote, not the script's 0.
"""

# semcheck: expect data_race, semaphore_leftover

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (8, 128)
HEADS, BLOCKS = 2, 3


def heads_kernel(state_ref, x_hbm, o_ref, buf, sems):
    h, j = pl.program_id(0), pl.program_id(1)
    step = h * BLOCKS + j
    slot = state_ref[0]  # read once: the slot this step's block lands in

    def copy(block, into):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(block * BLOCK[0], BLOCK[0])], buf.at[into], sems.at[into])

    @pl.when(j == 0)  # BUG: the previous head's last step already started this block
    def _():
        copy(step, slot).start()  # <- data_race
        state_ref[1] = 0

    @pl.when(step + 1 < HEADS * BLOCKS)
    def _():
        copy(step + 1, 1 - slot).start()  # <- data_race  # <- semaphore_leftover
        state_ref[0] = 1 - slot

    copy(step, slot).wait()
    o_ref[...] = buf[slot] * 2.0  # <- data_race


def scale(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            heads_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                grid=(HEADS, BLOCKS),
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(BLOCK, lambda h, j, state: (h * BLOCKS + j, 0)),
                scratch_shapes=[pltpu.VMEM((2, *BLOCK), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
            ),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary", "arbitrary")),
        )(jnp.array((0, 1), jnp.int32), block)  # slot 0, nothing in flight yet

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    rows = n * HEADS * BLOCKS * BLOCK[0]
    x = jnp.arange(rows * BLOCK[1], dtype=jnp.float32).reshape(rows, BLOCK[1])
    out = scale(x, mesh)
    jax.block_until_ready(out)
    print("prefetch state restarted per head:", out.shape, bool(jnp.array_equal(out, x * 2.0)))
