"""Double buffering through a start-or-wait helper, reading the wrong slot: the matmul
reads the slot that this step's copy is still filling.

Same as double_buffer_via_helper.py, except that step i works on slot i % 2 (the slot its
own copy is filling, before the wait at the end of the step) instead of slot (i - 1) % 2:
from step 1 on, the read of `buf` races with the copy in flight (`data_race`). The read
comes after the previous step's wait on the same DMA semaphore, but that wait was for the
previous block's copy, in the other slot, and came before this copy even started: the
report must not blame it on a wait that took the wrong copy. Every copy starts and waits
on the one line inside the helper, so the report names those lines with the kernel line
that called the helper.
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
NUM_BLOCKS = 3


def start_or_wait(copy, wait):
    if wait:
        copy.wait()
    else:
        copy.start()


def pipelined_kernel(x_hbm, o_ref, buf, sem):
    i = pl.program_id(0)

    def copy_in(wait):
        block = x_hbm.at[pl.ds(i * BLOCK[0], BLOCK[0])]
        start_or_wait(pltpu.make_async_copy(block, buf.at[i % 2], sem), wait)

    @pl.when(i == 0)
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)

    @pl.when(i < NUM_BLOCKS)
    def _():
        copy_in(wait=False)

    @pl.when(i > 0)
    def _():
        o_ref[...] += buf[i % 2]  # <- data_race: slot i % 2 is this step's copy's

    @pl.when(i < NUM_BLOCKS)
    def _():
        copy_in(wait=True)


def block_sums(x, mesh):
    def per_device(blocks):
        return pl.pallas_call(
            pipelined_kernel,
            grid=(NUM_BLOCKS + 1,),
            out_shape=jax.ShapeDtypeStruct(BLOCK, blocks.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(BLOCK, lambda i: (0, 0)),
            scratch_shapes=[pltpu.VMEM((2, *BLOCK), jnp.float32), pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        )(blocks)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.ones((n * NUM_BLOCKS * BLOCK[0], BLOCK[1]), jnp.float32)
    out = block_sums(x, mesh)
    jax.block_until_ready(out)
    print("block sums:", out.shape, float(out.sum()))
