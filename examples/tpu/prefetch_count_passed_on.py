"""A count the script passes, given to the second of two kernels in one jitted program: safe.

The program first runs `scale_kernel` and then `credits_kernel`, which takes the scaled
block and a scalar-prefetch count of credits: it signals `count_ref[0]` credits (clipped
to 0..EXPECTED) and waits for EXPECTED of them. The script passes EXPECTED, so every wait
is satisfied.

semcheck's capture cannot run TPU kernels on a CPU, so it replaces `scale_kernel`'s output
with zeros. The count does not come from there: it is an argument of the jitted program,
and no kernel ran before the program's run began, so its value is the script's own
(frontends/provenance.py). The block `credits_kernel` receives is `scale_kernel`'s output:
its values are not used, and a note says so. Its sibling
`prefetch_count_from_kernel.py` takes the count from the first kernel instead.
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

EXPECTED = 4  # credits the consumer waits for


def scale_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def credits_kernel(count_ref, x_ref, o_ref, credits):
    pl.semaphore_signal(credits, jnp.clip(count_ref[0], 0, EXPECTED))
    pl.semaphore_wait(credits, EXPECTED)
    o_ref[...] = x_ref[...]


def scale_then_credit(count, x, mesh):
    def per_device(count, block):
        scaled = pl.pallas_call(scale_kernel, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype))(block)
        return pl.pallas_call(
            credits_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1,
                in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            ),
        )(count, scaled)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)
    )(count, x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    count = jnp.full((n,), EXPECTED, dtype=jnp.int32)
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    out = scale_then_credit(count, x, mesh)
    jax.block_until_ready(out)
    print("scale then credit:", out.shape)
