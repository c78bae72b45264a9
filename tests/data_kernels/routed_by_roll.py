"""A routing value computed with pltpu.roll, which JAX cannot evaluate on CPU: an error
naming the primitive and its line (exit 2), never a guess."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P


def kernel(table_ref, o_ref, sem):
    rolled = pltpu.roll(table_ref[...], 1, 1)  # no CPU evaluation rule in JAX 0.10.2
    target = rolled[0, 0]
    pl.semaphore_signal(sem, 1, device_id=(target,), device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(sem, 1)


if __name__ == "__main__":
    devices = jax.device_count()
    mesh = Mesh(np.array(jax.devices()), ("x",))
    table = jnp.tile((jnp.arange(128, dtype=jnp.int32) % devices)[None, :], (devices * 8, 1))

    def per_device(block):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        )(block)

    jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(table)
