"""A loop bound computed by a kernel with scalar prefetch, run by the next kernel: safe.

The program first runs `steps_kernel`, which takes the script's count of extra steps as
scalar prefetch and writes `count_ref[0] + 1` into every element of its output block. The
second kernel, `credits_kernel`, takes element 0 of that block as its own scalar prefetch,
signals one credit per step of a loop that runs to it, and then waits for EXPECTED
credits. The script passes EXPECTED - 1, so the loop runs EXPECTED times and every wait is
satisfied.

semcheck's capture cannot run TPU kernels on a CPU; it computes `steps_kernel`'s output with
JAX's HLO interpreter because it proves it exact (lower/exact_outputs.py): its scalar
prefetch is read at a static index, never stored to and read by no index map, and an integer
add of it writes the whole block. Before, a kernel with scalar prefetch kept zeros, the loop
bound of `credits_kernel` was withheld, and the check stopped with an error at its loop (as
tpu-inference's batched RPA kernel did at its step loop). Its sibling
`prefetch_steps_computed_short.py` forgets the `+ 1`.
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

EXPECTED = 3  # credits the consumer waits for


def steps_kernel(count_ref, o_ref):
    o_ref[...] = jnp.full(o_ref.shape, count_ref[0] + 1, jnp.int32)


def credits_kernel(steps_ref, x_ref, o_ref, credits):
    def step(i, carry):
        pl.semaphore_signal(credits, 1)
        return carry

    jax.lax.fori_loop(0, steps_ref[0], step, 0)
    pl.semaphore_wait(credits, EXPECTED)
    o_ref[...] = x_ref[...]


def steps_then_credits(count, x, mesh):
    def per_device(count, block):
        steps = pl.pallas_call(
            steps_kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM)),
        )(count)
        return pl.pallas_call(
            credits_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            ),
        )(steps[0, :1], block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)
    )(count, x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    count = jnp.full((n,), EXPECTED - 1, dtype=jnp.int32)
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    out = steps_then_credits(count, x, mesh)
    jax.block_until_ready(out)
    print("steps then credits:", out.shape)
