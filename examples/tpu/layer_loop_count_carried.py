"""A count a layer loop carries through its kernel, from the script's value: safe.

Each layer of a `fori_loop` calls `credits_kernel`, which takes a scalar-prefetch count of
credits and the layer's block: it signals `count_ref[0]` credits (clipped to 0..EXPECTED),
waits for EXPECTED of them, and passes the count on through its second output, which the
loop hands to the next layer. The script passes EXPECTED, so every layer's wait is
satisfied.

semcheck's capture replaces kernel outputs with zeros (TPU kernels cannot run on a CPU), so
from the second layer on the count the capture sees is the kernel's own zeros. semcheck
checks a kernel as its first call on each device received its operands, and the first call
here is the loop's first layer on every device (nothing decides per device or by data
whether a layer calls the kernel), before which no call of it can have produced a count:
that call received the script's count (frontends/provenance.py), and a note says that the
check covers it, not the later layers' calls. Before, the carried count was an input over
int32 and a count of -1 hung the wait. Its sibling `layer_loop_count_from_kernel.py` starts
the loop with a count another kernel computed.
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

EXPECTED = 4  # credits each layer waits for
LAYERS = 3


def credits_kernel(count_ref, x_ref, o_ref, count_out_ref, credits):
    pl.semaphore_signal(credits, jnp.clip(count_ref[0], 0, EXPECTED))
    pl.semaphore_wait(credits, EXPECTED)
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


def layers(count, x, mesh):
    def per_device(count, block):
        def one_layer(i, carried):
            count, block = carried
            block, count = layer(count, block)
            return count, block

        return jax.lax.fori_loop(0, LAYERS, one_layer, (count, block))[1]

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)
    )(count, x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    count = jnp.full((n,), EXPECTED, dtype=jnp.int32)
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    out = layers(count, x, mesh)
    jax.block_until_ready(out)
    print("layers:", out.shape)
