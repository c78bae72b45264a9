"""A layer loop whose carried count starts as another kernel's output: `unsatisfied_wait`.

As in `layer_loop_count_carried.py`, each layer of a `fori_loop` calls `credits_kernel`,
which signals `count_ref[0]` credits (clipped to 0..EXPECTED), waits for EXPECTED of them
and passes the count on to the next layer. Here the loop's first count is not the
script's: `route_kernel` counts the rows of the block that are routed here (positive)
before the loop. The script's first block has one positive element, so device 0's first
layer waits for EXPECTED credits having signalled one, and hangs on a chip (and in JAX's
TPU interpreter).

semcheck's capture replaces `route_kernel`'s output with zeros, and the count's backward
slice through the program reaches it through the loop's initial value
(frontends/provenance.py): even at `credits_kernel`'s first call its value is not the
script's, so `count_ref[0]` is an input per device over int32, a note says why, and the
counterexample names a count below EXPECTED.
"""

# semcheck: expect unsatisfied_wait kernel=credits_kernel
# semcheck: expect safe kernel=route_kernel

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

EXPECTED = 4  # credits each layer waits for
LAYERS = 3


def route_kernel(x_ref, count_ref):
    count_ref[0] = jnp.sum((x_ref[...] > 0).astype(jnp.int32))


def credits_kernel(count_ref, x_ref, o_ref, count_out_ref, credits):
    pl.semaphore_signal(credits, jnp.clip(count_ref[0], 0, EXPECTED))
    pl.semaphore_wait(credits, EXPECTED)  # <- unsatisfied_wait
    o_ref[...] = x_ref[...] + 1
    count_out_ref[0] = count_ref[0]  # the next layer's count


def layer(count, block):
    return pl.pallas_call(
        credits_kernel,
        out_shape=(jax.ShapeDtypeStruct(block.shape, block.dtype), jax.ShapeDtypeStruct((1,), jnp.int32)),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1,
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pltpu.SMEM)],
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        ),
    )(count, block)


def route_then_layers(x, mesh):
    def per_device(block):
        count = pl.pallas_call(
            route_kernel,
            out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        )(block)

        def one_layer(i, carried):
            count, block = carried
            block, count = layer(count, block)
            return count, block

        return jax.lax.fori_loop(0, LAYERS, one_layer, (count, block))[1]

    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128) - (8 * 128 - 2)
    out = route_then_layers(x, mesh)
    jax.block_until_ready(out)
    print("route then layers:", out.shape)
