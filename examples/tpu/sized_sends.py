"""Sends sized per device: a remote copy and a local copy whose row counts differ by device.

Device d keeps `local = 2 - d % 3` of its rows (a local copy into rows 0:local of its output)
and sends the next `d % 3` rows to its right neighbour, which lands them at rows 4:4+count
of its output. Every size is a traced `pl.ds` size that folds per device, so each copy moves
exactly its own bytes; on some devices one of the two copies has 0 rows (it completes as it
starts, and its 0-byte wait passes). The receiver waits for the bytes its left neighbour
sends through a descriptor sized the same way. Before sending, each device does a barrier
handshake with both neighbours, so no copy lands on a device that has not entered yet.
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

LANDING = 4  # the row where a neighbour's rows land


def sized_sends_kernel(x_ref, o_ref, local_sem, send_sem, recv_sem):
    me = lax.axis_index("x")
    n = lax.axis_size("x")
    right, left = lax.rem(me + 1, n), lax.rem(me + n - 1, n)
    sent = lax.rem(me, 3)  # rows this device sends: 0, 1 or 2
    kept = 2 - sent  # rows it keeps: 2, 1 or 0
    received = lax.rem(left, 3)  # rows its left neighbour sends it

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    keep = pltpu.make_async_copy(x_ref.at[pl.ds(0, kept)], o_ref.at[pl.ds(0, kept)], local_sem)
    send = pltpu.make_async_remote_copy(
        x_ref.at[pl.ds(kept, sent)], o_ref.at[pl.ds(LANDING, sent)], send_sem, recv_sem,
        device_id=(right,),
    )
    keep.start()
    send.start()
    keep.wait()
    send.wait_send()
    arriving = pltpu.make_async_remote_copy(
        x_ref.at[pl.ds(0, received)], o_ref.at[pl.ds(LANDING, received)], send_sem, recv_sem,
        device_id=(left,),
    )
    arriving.wait_recv()


def sized_sends(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            sized_sends_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 3,
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    out = sized_sends(x, mesh)
    jax.block_until_ready(out)
    print("sized sends:", out.shape)
