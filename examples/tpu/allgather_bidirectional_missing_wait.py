"""Bidirectional ring all-gather that forgets the last left-going copy.

The same all-gather as allgather_bidirectional.py, but after the loop it waits only for the
last right-going copy. The last left-going copy is never waited for: when the kernel exits,
its bytes are still counted on the issuer's send semaphore and on the receiver's receive
semaphore. On a TPU the runtime's semaphore check fails at kernel exit; JAX's TPU
interpreter (dma_execution_mode="on_wait") never even runs that copy, and reports nothing.
"""

# semcheck: expect semaphore_leftover

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (8, 128)
RIGHT, LEFT = 0, 1  # semaphore index per direction


def all_gather_kernel(x_ref, o_ref, send_sems, recv_sems):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)
    half = BLOCK[0] // 2

    pltpu.sync_copy(x_ref, o_ref.at[my_id])

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    to_right = to_left = None
    for step in range(num_devices - 1):
        if step:
            to_right.wait()
            to_left.wait()
        right_slot = lax.rem(my_id - step + num_devices, num_devices)
        left_slot = lax.rem(my_id + step, num_devices)
        top = o_ref.at[right_slot, pl.ds(0, half)]
        bottom = o_ref.at[left_slot, pl.ds(half, half)]
        to_right = pltpu.make_async_remote_copy(
            top, top, send_sems.at[RIGHT], recv_sems.at[RIGHT, step], device_id=(right,)
        )
        to_left = pltpu.make_async_remote_copy(
            bottom, bottom, send_sems.at[LEFT], recv_sems.at[LEFT, step], device_id=(left,)
        )
        to_right.start()
        to_left.start()  # <- semaphore_leftover
    to_right.wait()
    # BUG: to_left.wait() is missing


def all_gather(x, mesh):
    num_devices = mesh.size

    def per_device(block):
        return pl.pallas_call(
            all_gather_kernel,
            out_shape=jax.ShapeDtypeStruct((num_devices, *block.shape), block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[
                pltpu.SemaphoreType.DMA((2,)),  # send, per direction
                pltpu.SemaphoreType.DMA((2, max(num_devices - 1, 1))),  # receive, per direction and step
            ],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P(None), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * BLOCK[0] * BLOCK[1], dtype=jnp.float32).reshape(n * BLOCK[0], BLOCK[1])
    out = all_gather(x, mesh)
    jax.block_until_ready(out)
    print("all-gather (missing wait):", out.shape)
