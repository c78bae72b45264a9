"""A rolling cache written at the decode position itself, not wrapped: `invalid_region`.

As rolling_cache_write.py, but the new row is stored at row `pos`, which the script's
positions (ROWS + device index) put past the end of the ROWS-row block on every device.
Mosaic passes the index through to `vector.store` unclamped, so a chip would write whatever
VMEM lies past the block; JAX's TPU interpreter fails the store (`Out-of-bounds write`).
"""

# semcheck: expect invalid_region

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

ROWS = 8  # slots in the cache block


def rolling_cache_write_unwrapped_kernel(pos_ref, cache_ref, row_ref, o_ref):
    o_ref[...] = cache_ref[...]
    slot = pos_ref[0]  # the bug: should wrap, lax.rem(pos_ref[0], ROWS)
    o_ref[pl.ds(slot, 1), :] = row_ref[...]  # <- invalid_region


def rolling_cache_write_unwrapped(pos, cache, row, mesh):
    def per_device(pos, cache, row):
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(1,),
            in_specs=[pl.BlockSpec((ROWS, 128), lambda i, pos: (0, 0)),
                      pl.BlockSpec((1, 128), lambda i, pos: (0, 0))],
            out_specs=pl.BlockSpec((ROWS, 128), lambda i, pos: (0, 0)),
        )
        return pl.pallas_call(
            rolling_cache_write_unwrapped_kernel, grid_spec=spec,
            out_shape=jax.ShapeDtypeStruct(cache.shape, cache.dtype),
        )(pos, cache, row)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x"), P("x")), out_specs=P("x"),
                      check_vma=False)
    )(pos, cache, row)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    pos = jnp.arange(n, dtype=jnp.int32) + ROWS  # every device has gone past the block once
    cache = jnp.zeros((n * ROWS, 128), jnp.float32)
    row = jnp.ones((n, 128), jnp.float32)
    out = rolling_cache_write_unwrapped(pos, cache, row, mesh)
    jax.block_until_ready(out)
    print("rolling cache write, unwrapped:", out.shape)
