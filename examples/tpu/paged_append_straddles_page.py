"""A paged cache whose two new rows are written through the first row's page: on a device at
the last row of a page the second row lands past the page (`invalid_region`).

As paged_append.py, but the pair of rows goes through one call of `write_rows`, into the page
of the first position. On device 1 (position 7, the last row of logical page 0, physical page
2) the second row is row 8 of an 8-row page view: row 0 of physical page 3, which holds
logical page 2. That row stays inside the cache block, so nothing checks the block alone:
Mosaic indexes the page's memref (`tpu.memref_slice`), so a chip writes the next physical
page, and its bounds checks (`--xla_mosaic_on_device_checks=bounds`) assert against the page.
JAX's TPU interpreter checks only the block and writes the row there too, silently.
"""

# semcheck: expect invalid_region

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

PAGES = 4  # physical pages in each device's cache block
PAGE_ROWS = 8  # rows of a page
NEW = 2  # rows appended per step
TABLE = (2, 0, 3, 1)  # logical page -> physical page, on every device


def page_view(ref, page):
    """Rows of physical page `page` of the cache block."""
    return ref.at[pl.ds(pl.multiple_of(page * PAGE_ROWS, PAGE_ROWS), PAGE_ROWS)]


def write_rows(page_ref, first, rows):
    """Rows `first ..` of one page."""
    page_ref[pl.ds(first, rows.shape[0]), :] = rows  # <- invalid_region


def paged_append_straddles_page_kernel(pos_ref, table_ref, cache_ref, new_ref, o_ref):
    o_ref[...] = cache_ref[...]
    position = pos_ref[0]
    page = table_ref[lax.div(position, PAGE_ROWS)]
    # the bug: the second row may belong to the next logical page
    write_rows(page_view(o_ref, page), lax.rem(position, PAGE_ROWS), new_ref[...])


def paged_append_straddles_page(pos, table, cache, new, mesh):
    def per_device(pos, table, cache, new):
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(1,),
            in_specs=[pl.BlockSpec((PAGES * PAGE_ROWS, 128), lambda i, pos, table: (0, 0)),
                      pl.BlockSpec((NEW, 128), lambda i, pos, table: (0, 0))],
            out_specs=pl.BlockSpec((PAGES * PAGE_ROWS, 128), lambda i, pos, table: (0, 0)),
        )
        return pl.pallas_call(
            paged_append_straddles_page_kernel, grid_spec=spec,
            out_shape=jax.ShapeDtypeStruct(cache.shape, cache.dtype),
        )(pos, table, cache, new)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"),) * 4, out_specs=P("x"), check_vma=False)
    )(pos, table, cache, new)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    pos = 5 + 2 * jnp.arange(n, dtype=jnp.int32)  # device 1 is at the last row of a page
    table = jnp.tile(jnp.array(TABLE, jnp.int32), n)
    cache = jnp.zeros((n * PAGES * PAGE_ROWS, 128), jnp.float32)
    new = jnp.ones((n * NEW, 128), jnp.float32)
    out = paged_append_straddles_page(pos, table, cache, new, mesh)
    jax.block_until_ready(out)
    print("paged append, straddling a page:", out.shape)
