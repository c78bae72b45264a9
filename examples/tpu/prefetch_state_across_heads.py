"""Double buffering across a 2-D grid, driven by scalar-prefetch state the kernel overwrites.

The kernel walks a (HEADS, BLOCKS) grid and copies block `h * BLOCKS + j` of `x_hbm` into
one of two VMEM slots. Like JAX's paged-attention kernels, it keeps its pipeline state in
a scalar-prefetch operand, which the wrapper passes as the constant `(0, 1)` (as ragged
paged attention passes `(0, 0)`): `state_ref[0]` is the slot the current block lands in,
`state_ref[1]` is "nothing is in flight yet". The step that sees the flag starts the first
copy and clears the flag; every step but the last starts the next block's copy into the
other slot (across a head boundary too) and writes that slot back to `state_ref[0]`; each
step then waits for its own block and reads it.

The verdict is safe because semcheck checks the values the script passes, and follows the
kernel's own stores to `state_ref` from grid step to grid step: only step (0, 0) sees the
flag set, and each step's slot is the one the previous step started its copy into. Read
as any int32 at every step instead (semcheck's rule before issue 26), the slot could be -1
(`invalid_semaphore_index`) and the flag could be set again at a later step (a second copy
nobody waits for). `--assume 'state_ref[0]=0..1'` checks both starting slots at once.

prefetch_state_restarted_per_head.py is the buggy twin, which restarts every head.
"""

# semcheck: expect safe

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

    @pl.when(state_ref[1] == 1)
    def _():
        copy(step, slot).start()
        state_ref[1] = 0  # the pipeline is running: no later step starts its own block

    @pl.when(step + 1 < HEADS * BLOCKS)
    def _():
        copy(step + 1, 1 - slot).start()  # the next block, in the next head too
        state_ref[0] = 1 - slot

    copy(step, slot).wait()
    o_ref[...] = buf[slot] * 2.0


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
    print("prefetch state across heads:", out.shape, bool(jnp.array_equal(out, x * 2.0)))
