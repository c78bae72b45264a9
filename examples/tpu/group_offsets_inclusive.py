"""Group sizes counted by one kernel, summed by the script into start rows with the inclusive
cumulative sum: the last group's copy reaches past the output (invalid_region).

As `group_offsets_from_sizes.py`, but the script takes `jnp.cumsum(sizes)` as the offsets,
where each group starts after the groups before it and its own: 8, 16, 24, the end of each
group rather than its start. `group_copy_kernel`'s last copy writes rows 24..31 of an output
of 24 rows (and reads them from its input of 24): on a TPU, Mosaic's bounds check halts the
core at that copy. The first group's rows are never copied at all.

The offsets are computed by the script from the producer's HBM output, which the capture
cannot compute; semcheck's lowering of the producer computes what it wrote
(lower/produced.py) and follows the slice and the sum on those values
(frontends/placing.py), so the copy's window is concrete and its reach past the buffer is
reported at the copy. Before, the offsets were an earlier kernel's zeros, not used, and the
check stopped with an error at the consumer's loop.
"""

# semcheck: expect invalid_region kernel=group_copy_kernel
# semcheck: expect safe kernel=sizes_kernel

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

GROUPS = 3  # the groups the script routes rows to
MAX_GROUPS = 8  # the sizes table's length
ROWS = 8  # rows per group


def sizes_kernel(groups_ref, meta_hbm, table, sem):
    table[0] = groups_ref[0]

    def size(g, carry):
        table[1 + g] = ROWS
        return carry

    jax.lax.fori_loop(0, groups_ref[0], size, 0)
    to_meta = pltpu.make_async_copy(table, meta_hbm.at[pl.ds(0, 1 + MAX_GROUPS)], sem.at[0])
    to_meta.start()
    to_meta.wait()


def group_copy_kernel(groups_hbm, offsets_hbm, x_hbm, o_hbm, groups, offsets, sems):
    read_groups = pltpu.make_async_copy(groups_hbm, groups, sems.at[0])
    read_groups.start()
    read_groups.wait()
    read_offsets = pltpu.make_async_copy(offsets_hbm, offsets, sems.at[0])
    read_offsets.start()
    read_offsets.wait()

    def start(g, carry):
        rows = pl.ds(offsets[g], ROWS)
        pltpu.make_async_copy(x_hbm.at[rows], o_hbm.at[rows], sems.at[1]).start()  # <- invalid_region
        return carry

    def wait(g, carry):
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, ROWS)], o_hbm.at[pl.ds(0, ROWS)], sems.at[1]).wait()
        return carry

    jax.lax.fori_loop(0, groups[0], start, 0)
    jax.lax.fori_loop(0, groups[0], wait, 0)


def offsets_of(sizes):
    """Where each group starts (meant: after every group before it; this is after its own)."""
    return jnp.cumsum(sizes)


def count_then_copy(groups, x, mesh):
    def per_device(groups, block):
        any_space = pl.BlockSpec(memory_space=pl.ANY)
        meta = pl.pallas_call(
            sizes_kernel,
            out_shape=jax.ShapeDtypeStruct((2 * MAX_GROUPS,), jnp.int32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[], out_specs=any_space,
                scratch_shapes=[pltpu.SMEM((1 + MAX_GROUPS,), jnp.int32), pltpu.SemaphoreType.DMA((1,))]),
        )(groups)
        count, offsets = meta[:1], offsets_of(meta[1:1 + MAX_GROUPS])
        return pl.pallas_call(
            group_copy_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[any_space, any_space, any_space],
            out_specs=any_space,
            scratch_shapes=[pltpu.SMEM((1,), jnp.int32), pltpu.SMEM((MAX_GROUPS,), jnp.int32),
                            pltpu.SemaphoreType.DMA((2,))],
        )(count, offsets, block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)
    )(groups, x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    groups = jnp.full((n,), GROUPS, dtype=jnp.int32)
    x = jnp.arange(n * GROUPS * ROWS * 128, dtype=jnp.float32).reshape(n * GROUPS * ROWS, 128)
    out = count_then_copy(groups, x, mesh)
    jax.block_until_ready(out)
