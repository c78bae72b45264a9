"""A router's top-2 picks the experts whose weights a second kernel copies: safe.

`top2_kernel` takes each token's scores over EXPERTS experts and stores, for each token, the
two best experts by repeated max and mask (as tpu-inference's fused MoE v2 router does):
the first pick's column is masked before the second max, so the two picks differ.
`copy_experts_kernel` takes token 0's two picks as a scalar-prefetch operand and copies
those two experts' weights, both copies in flight at once, into the two experts' own rows
of its output, then waits for both. The rows differ, so the copies never write the same
memory, and every pick is a real expert, so every window is inside the weights.

semcheck's capture cannot run a TPU kernel, but it proves from `top2_kernel`'s body that
every grid step writes every element of its output block from its input block with
comparisons, selects, max and min only (semcheck/lower/exact_outputs.py), so it takes JAX's
HLO interpreter's outputs of it as the script's; a note says so. Without that, the picks
were inputs over int32 and the check reported a copy of expert 2**31 - 1 (`invalid_region`).
Its sibling `top2_routed_copies_unmasked.py` forgets the mask.
"""

# semcheck: expect safe kernel=copy_experts_kernel
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
        picks_ref[:, j] = pick
        scores = jnp.where(column == pick[:, None], NEG, scores)  # the next pick is another expert


def copy_experts_kernel(picks_ref, w_ref, o_ref, sems):
    copies = [pltpu.make_async_copy(w_ref.at[picks_ref[j]], o_ref.at[picks_ref[j]], sems.at[j]) for j in range(2)]
    for copy in copies:
        copy.start()
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
