"""Double buffering started by a scalar-prefetch flag that the kernel clears.

The caller passes `init_ref = [1]` as a scalar-prefetch operand: "nothing is in flight
yet". The grid step that sees the flag set starts the copy of block 0 and clears the flag
(`init_ref[0] = 0`), as paged-attention kernels do with their init flag; every step then
starts the copy of the next block into the spare slot and waits for its own. Only the
first step sees the flag set, since the kernel's own store defines what its later loads of
the element return: block 0 is copied exactly once and every copy is waited for.

Read as a fresh input at every step instead, the flag could be set again at a later step,
and the schedules that follow (a second copy of block 0 nobody waits for) are schedules
this program cannot run. The flag's initial value is the one the script passes (1: a fresh
pipeline); `--assume 'init_ref[0]=0..1'` checks every value instead, and then reports the
hang of a call that passes 0 (nothing starts block 0, and the first step waits for ever).
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
NUM_BLOCKS = 4


def init_flag_kernel(init_ref, x_hbm, o_ref, buf, sems):
    i = pl.program_id(0)
    n = pl.num_programs(0)
    slot = i % 2

    def copy(block, into):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(block * BLOCK[0], BLOCK[0])], buf.at[into], sems.at[into])

    @pl.when(init_ref[0] == 1)
    def _():
        copy(0, 0).start()
        init_ref[0] = 0  # block 0 is on its way: later steps must not start it again

    @pl.when(i + 1 < n)
    def _():
        copy(i + 1, 1 - slot).start()

    copy(i, slot).wait()
    o_ref[...] = buf[slot] * 2.0


def scale(x, mesh):
    def per_device(init, block):
        return pl.pallas_call(
            init_flag_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                grid=(NUM_BLOCKS,),
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(BLOCK, lambda i, init: (i, 0)),
                scratch_shapes=[pltpu.VMEM((2, *BLOCK), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
            ),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        )(init, block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)
    )(jnp.ones((mesh.size,), jnp.int32), x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * NUM_BLOCKS * BLOCK[0] * BLOCK[1], dtype=jnp.float32).reshape(n * NUM_BLOCKS * BLOCK[0], BLOCK[1])
    out = scale(x, mesh)
    jax.block_until_ready(out)
    print("prefetch init flag:", out.shape, bool(jnp.array_equal(out, x * 2.0)))
