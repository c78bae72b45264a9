"""Ring shift in two chunks that share one receive semaphore.

Each device sends its block to its right neighbour as two remote DMAs, one per half
(chunk), so that the receiver can start on the first half while the second is still on its
way: after waiting for a chunk's bytes it doubles that chunk into its output. Both copies
land on the same receive semaphore `recv_sem`, and DMAs need not complete in the order they
were issued: if the second chunk lands first, its bytes satisfy the wait for the first
chunk, and the receiver reads the first chunk's landing slot while that copy is still
writing it (`data_race`, between the read and the copy's start).

chunked_shift.py is the fix: one receive semaphore per chunk, so each wait can only be
satisfied by its own copy.
"""

# semcheck: expect data_race

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

CHUNKS = 2


def shift_kernel(x_ref, o_ref, landing, send_sem, recv_sem):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    copies = []
    for chunk in range(CHUNKS):
        # BUG: every chunk's copy lands on the one recv_sem
        copy = pltpu.make_async_remote_copy(
            x_ref.at[chunk], landing.at[chunk], send_sem, recv_sem, device_id=(right,)
        )
        copy.start()  # <- data_race
        copies.append(copy)
    for chunk, copy in enumerate(copies):
        copy.wait_recv()
        o_ref[chunk] = landing[chunk] * 2  # <- data_race
    for copy in copies:
        copy.wait_send()


def chunked_shift(x, mesh):
    def per_device(block):
        chunks = block.reshape(CHUNKS, block.shape[0] // CHUNKS, block.shape[1])
        out = pl.pallas_call(
            shift_kernel,
            out_shape=jax.ShapeDtypeStruct(chunks.shape, chunks.dtype),
            scratch_shapes=[
                pltpu.VMEM(chunks.shape, chunks.dtype),  # landing slots, one per chunk
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA,
            ],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(chunks)
        return out.reshape(block.shape)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * 16 * 128, dtype=jnp.float32).reshape(n * 16, 128)
    out = chunked_shift(x, mesh)
    jax.block_until_ready(out)
    print("chunked shift, one receive semaphore:", out.shape)
