"""A router's top-2 that forgets to mask its first pick: `data_race`.


As in `top2_routed_copies.py`, `top2_kernel` stores each token's two best experts and
`copy_experts_kernel` copies token 0's two picks' weights into their own rows of its output,
both copies in flight at once. Here the router does not mask the first pick's column before
the second max, so both picks are the same expert: the two copies write the same row at the
same time (on a chip, whichever lands last wins, and a reader after either wait may see a
half-written row).

semcheck proves `top2_kernel` exact (semcheck/lower/exact_outputs.py) and takes JAX's HLO
interpreter's picks as the script's, so it checks the copies for the picks the router
computes: the same expert twice, and the race between them.
"""

# semcheck: expect data_race kernel=copy_experts_kernel
# semcheck: expect safe kernel=top2_kernel

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

EXPERTS = 4
TOKENS = 16  # per device
BLOCK = 8  # tokens a grid step
NEG = -3.0e38  # below every score


def top2_kernel(scores_ref, picks_ref):
    scores = jnp.where(jnp.isnan(scores_ref[...]), NEG, scores_ref[...])
    column = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)
    for j in range(2):
        best = jnp.max(scores, axis=1, keepdims=True)
        pick = jnp.min(jnp.where(scores == best, column, EXPERTS - 1), axis=1)
        picks_ref[:, j] = pick  # <- no mask after it: the second pick is the first again


def copy_experts_kernel(picks_ref, w_ref, o_ref, sems):
    copies = [pltpu.make_async_copy(w_ref.at[picks_ref[j]], o_ref.at[picks_ref[j]], sems.at[j]) for j in range(2)]
    for copy in copies:
        copy.start()  # <- data_race: both copies write the same row
    for copy in copies:
        copy.wait()


def top2(scores):
    return pl.pallas_call(
        top2_kernel,
        out_shape=jax.ShapeDtypeStruct((scores.shape[0], 2), jnp.int32),
        grid=(scores.shape[0] // BLOCK,),
        in_specs=[pl.BlockSpec((BLOCK, EXPERTS), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((BLOCK, 2), lambda i: (i, 0)),
    )(scores)


def routed_copies(scores, w, mesh):
    def per_device(scores, w):
        picks = top2(scores)[0]
        return pl.pallas_call(
            copy_experts_kernel,
            out_shape=jax.ShapeDtypeStruct(w.shape, w.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY),
                scratch_shapes=[pltpu.SemaphoreType.DMA((2,))],
            ),
        )(picks, w)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)
    )(scores, w)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    scores = jax.random.uniform(jax.random.key(0), (n * TOKENS, EXPERTS), jnp.float32)
    w = jnp.ones((n * EXPERTS, 8, 128), jnp.float32)
    out = routed_copies(scores, w, mesh)
    jax.block_until_ready(out)
    print("routed copies:", out.shape)
