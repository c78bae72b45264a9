"""Arrival check with semaphore_read, and an acknowledgement, around the ring.

Each device announces itself to its right neighbour (a remote signal on that neighbour's
`arrived` semaphore), then serves its left neighbour: it reads its own `arrived` count with
`pl.semaphore_read` to choose between a fast path (the left neighbour has already arrived:
consume the arrival, which cannot block) and a slow path (not yet: block until it arrives).
Either way it consumes exactly one arrival and acknowledges it with a remote signal on the
left neighbour's `ack`; finally it waits for the acknowledgement from its right neighbour.
The value the read returns depends on the schedule, and semcheck explores both branches
wherever each can happen; in every schedule each semaphore gets one signal and one wait.

JAX's TPU interpreter cannot run `semaphore_read`; semcheck analyzes it.
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P


def arrival_kernel(x_ref, o_ref, arrived, ack):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)

    pl.semaphore_signal(arrived, 1, device_id=(right,))
    o_ref[...] = x_ref[...]

    already_there = pl.semaphore_read(arrived)

    @pl.when(already_there > 0)
    def _fast_path():
        pl.semaphore_wait(arrived, 1)
        pl.semaphore_signal(ack, 1, device_id=(left,))

    @pl.when(already_there == 0)
    def _slow_path():
        pl.semaphore_wait(arrived, 1)
        pl.semaphore_signal(ack, 1, device_id=(left,))

    pl.semaphore_wait(ack, 1)


def arrival(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            arrival_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            scratch_shapes=[pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.REGULAR],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.ones((n * 8, 128), jnp.float32)
    out = arrival(x, mesh)
    jax.block_until_ready(out)
    print("semaphore_read fast path:", out.shape)
