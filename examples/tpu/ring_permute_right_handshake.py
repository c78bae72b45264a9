"""Ring permute whose handshake covers one neighbour only: the left neighbour writes early.

Each device sends its block to its right neighbour, as in ring_permute.py, but its
handshake on the barrier semaphore only tells its right neighbour "I have entered" and
waits for one signal. The signal a device receives comes from its LEFT neighbour, so it
learns that the device it receives from has entered, not the device it writes to: the copy
to the right neighbour can land before that neighbour entered the kernel
(`remote_before_entry`). Entering allocates the neighbour's semaphores afresh, so the bytes
the early copy added to its receive semaphore are lost and its `wait_recv` never returns
(the consequence, which semcheck does not report again: one bug, one report).

With 2 devices the left and the right neighbour are the same device, so the one signal
does show that the target has entered: the kernel is safe there, and the bug shows from 3
devices on. ring_permute.py is the fix: signal both neighbours and wait for two signals.
"""

# semcheck: expect remote_before_entry
# semcheck: expect safe devices=2

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P


def permute_kernel(x_ref, o_ref, send_sem, recv_sem):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)

    barrier = pltpu.get_barrier_semaphore()
    # BUG: a handshake with the right neighbour only
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 1)

    copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,))
    copy.start()  # <- remote_before_entry
    copy.wait()  # hangs when the copy landed early (the consequence)


def ring_permute(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            permute_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    out = ring_permute(x, mesh)
    jax.block_until_ready(out)
    print("ring permute, one-sided handshake:", out.shape)
