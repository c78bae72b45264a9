"""A rolling cache: each device writes its new row into the slot its decode position names.

The cache block holds ROWS rows; a device at decode position `pos` (scalar prefetch) writes
its new row at slot `pos % ROWS`, overwriting the oldest. The script's positions run past
ROWS on every device, so the wrap is what keeps the store inside the block.
rolling_cache_write_unwrapped.py stores at `pos` itself: `invalid_region`.
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

ROWS = 8  # slots in the cache block


def rolling_cache_write_kernel(pos_ref, cache_ref, row_ref, o_ref):
    o_ref[...] = cache_ref[...]
    slot = lax.rem(pos_ref[0], ROWS)  # the oldest slot
    o_ref[pl.ds(slot, 1), :] = row_ref[...]


def rolling_cache_write(pos, cache, row, mesh):
    def per_device(pos, cache, row):
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            grid=(1,),
            in_specs=[pl.BlockSpec((ROWS, 128), lambda i, pos: (0, 0)),
                      pl.BlockSpec((1, 128), lambda i, pos: (0, 0))],
            out_specs=pl.BlockSpec((ROWS, 128), lambda i, pos: (0, 0)),
        )
        return pl.pallas_call(
            rolling_cache_write_kernel, grid_spec=spec,
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
    out = rolling_cache_write(pos, cache, row, mesh)
    jax.block_until_ready(out)
    print("rolling cache write:", out.shape)
