"""Warp-specialized pipeline whose producer does not wait for the consumer: it overwrites a
slot the consumer may still be reading, and runs its barrier two phases ahead of it.

The kernel runs two Pallas threads per block (`num_threads=2`). Thread 1 (the producer)
copies tile `i` into slot `i % 2` and the copy arrives on `loaded[slot]`; before reusing a
slot it waits on `consumed[slot]`. Thread 0 (the consumer) waits on `loaded[slot]`, reads
the tile, and arrives on `consumed[slot]`. Each barrier's phases alternate between the two
threads, so neither can lap the other.

Here the producer skips the wait on `consumed[slot]`. Its next copy into a slot can land
while the previous tile there is still being written or read (a data race), and both copies
into `loaded[slot]` can complete before the consumer waits for the first: the consumer's
parity-based wait then cannot see phase 0 (a barrier phase overrun).
"""

# semcheck: expect barrier_phase_overrun, data_race

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

STEPS = 3
SLOTS = 2


def pipeline_kernel(x_ref, o_ref):
    @functools.partial(
        pl.run_scoped,
        tiles=plgpu.SMEM((SLOTS, *x_ref.shape[1:]), x_ref.dtype),
        loaded=plgpu.Barrier(num_arrivals=1, num_barriers=SLOTS),
        consumed=plgpu.Barrier(num_arrivals=1, num_barriers=SLOTS),
        collective_axes="wg",
    )
    def _scope(tiles, loaded, consumed):
        wg = lax.axis_index("wg")

        @pl.when(wg == 1)
        def _producer():
            for step in range(STEPS):
                slot = step % SLOTS
                if step >= SLOTS and False:  # the producer no longer waits for the slot
                    plgpu.barrier_wait(consumed.at[slot])
                plgpu.copy_gmem_to_smem(x_ref.at[step], tiles.at[slot], loaded.at[slot])  # <- data_race

        @pl.when(wg == 0)
        def _consumer():
            for step in range(STEPS):
                slot = step % SLOTS
                plgpu.barrier_wait(loaded.at[slot])  # <- barrier_phase_overrun
                o_ref[step] = tiles[slot] * 2.0  # <- data_race
                plgpu.barrier_arrive(consumed.at[slot])


def pipelined_scale(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            pipeline_kernel,
            out_type=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid=(1,),
            grid_names=("blocks",),
            num_threads=2,
            thread_name="wg",
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * STEPS, 64, 128), jnp.float32)
    out = pipelined_scale(x, mesh)
    jax.block_until_ready(out)
    print("pipelined scale:", out.shape)
