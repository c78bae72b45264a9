"""A count one kernel computes, given to the next as scalar prefetch: `unsatisfied_wait`.

`route_kernel` counts the rows of its block that are routed here (positive) and hands the
count to `credits_kernel` as its scalar-prefetch operand; `credits_kernel` signals that
many credits (clipped to 0..EXPECTED) but always waits for EXPECTED, as if every block
routed EXPECTED rows. A block with fewer routed rows hangs the wait: the script's first
block has one positive element, so device 0 hangs on a chip (and in JAX's TPU interpreter).

semcheck's capture replaces `route_kernel`'s output with zeros (TPU kernels cannot run on
a CPU), so the count `credits_kernel` receives in the capture is not the one a chip would
compute. The count's backward slice through the jitted program reaches those zeros
(frontends/provenance.py): its value is not used, a note says so, and `count_ref[0]` is an
input per device over int32. The counterexample names a count below EXPECTED. Compare
`prefetch_count_passed_on.py`, where the count is the script's own. To check only counts
the router can produce, bound it: `semcheck.assume("count_ref[0]", 0, 8)` still reports the
hang, since any count below EXPECTED is one.
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

EXPECTED = 4  # credits the consumer waits for


def route_kernel(x_ref, count_ref):
    count_ref[0] = jnp.sum((x_ref[...] > 0).astype(jnp.int32))


def credits_kernel(count_ref, x_ref, o_ref, credits):
    pl.semaphore_signal(credits, jnp.clip(count_ref[0], 0, EXPECTED))
    pl.semaphore_wait(credits, EXPECTED)  # <- unsatisfied_wait
    o_ref[...] = x_ref[...]


def route_then_credit(x, mesh):
    def per_device(block):
        count = pl.pallas_call(
            route_kernel,
            out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
        )(block)
        return pl.pallas_call(
            credits_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            ),
        )(count, block)

    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128) - (8 * 128 - 2)
    out = route_then_credit(x, mesh)
    jax.block_until_ready(out)
    print("route then credit:", out.shape)
