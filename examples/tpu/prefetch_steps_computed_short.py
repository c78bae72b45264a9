"""A loop bound computed by a kernel with scalar prefetch, one step short: a hang.

As `prefetch_steps_computed.py`, but `steps_kernel` writes the count itself where the
consumer's loop means count + 1 steps: the script passes EXPECTED - 1, the loop signals
EXPECTED - 1 credits, and the wait for EXPECTED is never satisfied (on every device).

semcheck computes `steps_kernel`'s output with JAX's HLO interpreter, having proved it exact
(lower/exact_outputs.py: its scalar prefetch is read at a static index, never stored to and
read by no index map), so the loop bound is the script's value and the hang is reported at
the wait. Before, the bound was withheld and the check stopped with an error at the loop.
"""

# semcheck: expect unsatisfied_wait kernel=credits_kernel
# semcheck: expect safe kernel=steps_kernel

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

EXPECTED = 3  # credits the consumer waits for


def steps_kernel(count_ref, o_ref):
    o_ref[...] = jnp.full(o_ref.shape, count_ref[0], jnp.int32)  # the steps it means are count + 1


def credits_kernel(steps_ref, x_ref, o_ref, credits):
    def step(i, carry):
        pl.semaphore_signal(credits, 1)
        return carry

    jax.lax.fori_loop(0, steps_ref[0], step, 0)
    pl.semaphore_wait(credits, EXPECTED)  # <- unsatisfied_wait  (BUG: the loop signalled one credit short)
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
