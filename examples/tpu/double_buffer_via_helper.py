"""Double buffering with every copy started and waited through one helper: the matmul
reads the slot filled one grid step earlier.

Real kernels often route each local copy through a small helper that either starts or
waits a copy descriptor (`start_or_wait(copy, wait)`), called twice per copy: once to
start it and once, later in the step, to wait for it. The kernel walks NUM_BLOCKS blocks
with one grid step more than blocks. Step i starts the copy of block i into VMEM slot
i % 2, then works on slot (i - 1) % 2, the block the previous step copied and waited for,
and at the end of the step waits for its own copy. Every copy uses the one DMA semaphore
and is waited for in the step that started it, before the next copy starts, so the work
never reads a slot a copy is still writing.
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
        o_ref[...] += buf[(i - 1) % 2]

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
