"""Group sizes counted by one kernel, summed by the script into each group's start row for the
next kernel: safe.

A mixture-of-experts layer routes rows to groups, and a metadata kernel counts each group's
rows; the script turns the sizes into offsets with an exclusive cumulative sum (each group
starts where the groups before it end), and the next kernel copies every group's rows at its
offset. Here `sizes_kernel` takes the script's number of groups as scalar prefetch and packs
one SMEM table: the count at element 0, then ROWS for each group (a loop to that count), and
writes it to its HBM output by DMA. The script slices the count and the sizes out of it and
takes `jnp.cumsum(sizes) - sizes` as the offsets: 0, 8, 16. `group_copy_kernel` starts one
copy of ROWS rows per group at its offset, into an output of GROUPS * ROWS rows, and then
waits for all of them: the copies write disjoint rows, inside the buffer.

semcheck's lowering of `sizes_kernel` computes what it wrote (lower/produced.py), and the
ops between the kernels (slices, the sum JAX computes as a `reduce_window` in a function of
its own, the subtraction) are followed on those values (frontends/placing.py): the consumer
starts with its count and offsets known. Its sibling `group_offsets_inclusive.py` takes the
inclusive sum as the offsets.
"""

# semcheck: expect safe

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
        pltpu.make_async_copy(x_hbm.at[rows], o_hbm.at[rows], sems.at[1]).start()
        return carry

    def wait(g, carry):
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, ROWS)], o_hbm.at[pl.ds(0, ROWS)], sems.at[1]).wait()
        return carry

    jax.lax.fori_loop(0, groups[0], start, 0)
    jax.lax.fori_loop(0, groups[0], wait, 0)


def offsets_of(sizes):
    """Where each group starts: after every group before it."""
    return jnp.cumsum(sizes) - sizes


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
