"""Warp-specialized producer/consumer whose producer warp reuses a slot without waiting for
the consumer to release it.

Same as warp_producer_consumer.py, except that warp 0 never waits on `consumed[slot]`: its
third copy overwrites slot 0 while warp 1 may still be reading the first tile (a data race),
and `loaded[0]` can complete its second phase before warp 1 waited for its first (a phase
overrun: the parity-based wait can no longer tell them apart).

Warp 0 copies tile `i` into slot `i % 2`, the copy arriving on `loaded[slot]`; before
reusing a slot it waits on `consumed[slot]`. Warp 1 waits on `loaded[slot]`, reads the
tile's first element (warp-level code loads and stores scalars only), stores it, and arrives
on `consumed[slot]`. An arrival from a warp counts as one, as from a warpgroup (Mosaic GPU
arrives four times per lane of a warp on a barrier that expects 128 per arrival).
"""

# semcheck: expect data_race, barrier_phase_overrun

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


def warp_kernel(x_ref, o_ref):
    @functools.partial(
        pl.run_scoped,
        tiles=plgpu.SMEM((SLOTS, *x_ref.shape[1:]), x_ref.dtype),
        loaded=plgpu.Barrier(num_arrivals=1, num_barriers=SLOTS),
        consumed=plgpu.Barrier(num_arrivals=1, num_barriers=SLOTS),
    )
    def _scope(tiles, loaded, consumed):
        @pl.core_map(plgpu.WarpMesh(axis_name="warp"))
        def _per_warp():
            warp = lax.axis_index("warp")

            @pl.when(warp == 0)
            def _producer():
                for step in range(STEPS):
                    slot = step % SLOTS
                    plgpu.copy_gmem_to_smem(x_ref.at[step], tiles.at[slot], loaded.at[slot])  # <- data_race

            @pl.when(warp == 1)
            def _consumer():
                for step in range(STEPS):
                    slot = step % SLOTS
                    plgpu.barrier_wait(loaded.at[slot])  # <- barrier_phase_overrun
                    o_ref[step] = tiles[slot, 0, 0] * 2.0  # <- data_race
                    plgpu.barrier_arrive(consumed.at[slot])


def warp_scale(x, mesh):
    def per_device(block):
        return plgpu.kernel(
            warp_kernel,
            out_type=jax.ShapeDtypeStruct((STEPS,), block.dtype),
            grid=(1,),
            grid_names=("blocks",),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * STEPS, 64, 128), jnp.float32)
    out = warp_scale(x, mesh)
    jax.block_until_ready(out)
    print("warp scale:", out.shape)
