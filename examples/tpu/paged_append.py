"""A paged cache: each device appends two new rows at its decode position, one row at a time
through a helper that writes into one page (`cache.at[page]`).

Each device's cache block holds PAGES pages of PAGE_ROWS rows; a block table (scalar
prefetch) maps the logical page of a position to its physical page. The helper `write_rows`
takes the view of one physical page and a row inside it. Each new row is written through the
page its own position names, so a pair of rows that crosses a page boundary is split over two
pages. paged_append_straddles_page.py writes the pair through the first row's page:
`invalid_region`.
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

PAGES = 4  # physical pages in each device's cache block
PAGE_ROWS = 8  # rows of a page
NEW = 2  # rows appended per step
TABLE = (2, 0, 3, 1)  # logical page -> physical page, on every device


def page_view(ref, page):
    """Rows of physical page `page` of the cache block."""
    return ref.at[pl.ds(pl.multiple_of(page * PAGE_ROWS, PAGE_ROWS), PAGE_ROWS)]


def write_rows(page_ref, first, rows):
    """Rows `first ..` of one page."""
    page_ref[pl.ds(first, rows.shape[0]), :] = rows


def paged_append_kernel(pos_ref, table_ref, cache_ref, new_ref, o_ref):
    o_ref[...] = cache_ref[...]
    for j in range(NEW):
        position = pos_ref[0] + j
        page = table_ref[lax.div(position, PAGE_ROWS)]
        write_rows(page_view(o_ref, page), lax.rem(position, PAGE_ROWS), new_ref[pl.ds(j, 1), :])


def paged_append(pos, table, cache, new, mesh):
    def per_device(pos, table, cache, new):
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2,
            grid=(1,),
            in_specs=[pl.BlockSpec((PAGES * PAGE_ROWS, 128), lambda i, pos, table: (0, 0)),
                      pl.BlockSpec((NEW, 128), lambda i, pos, table: (0, 0))],
            out_specs=pl.BlockSpec((PAGES * PAGE_ROWS, 128), lambda i, pos, table: (0, 0)),
        )
        return pl.pallas_call(
            paged_append_kernel, grid_spec=spec,
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
    out = paged_append(pos, table, cache, new, mesh)
    jax.block_until_ready(out)
    print("paged append:", out.shape)
