"""Per-device counts all-gathered by remote DMA, then summed into a wait amount.

Device d holds count c_d (the script passes c_d = d + 1). It stores it at counts_ref[d] in
SMEM, copies that element to every peer's counts_ref[d], and waits for the peers' copies.
Then every device signals its own count to device 0, which waits for the sum of the
gathered counts: a wait amount computed from data that arrived by remote DMA.

READ_EARLY (gathered_counts_read_early.py) zeroes the slots and sums the counts before
waiting for the copies: data races on counts_ref; in semcheck's canonical schedule device 0
sums zeros for its peers, so its wait is also too small (a leftover), and the result says
the values that fed it may differ between schedules.

Expected verdict: safe
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

READ_EARLY = False


def kernel(mine_ref, o_ref, counts_ref, recv_sem, send_sem, done_sem):
    me = lax.axis_index("x")
    n = lax.axis_size("x")
    if READ_EARLY:  # zeroing the peers' slots races with their copies too (they may have landed)
        for j in range(n):
            counts_ref[j] = 0
    counts_ref[me] = mine_ref[0]

    def copy_to(peer):
        return pltpu.make_async_remote_copy(
            counts_ref.at[pl.ds(me, 1)], counts_ref.at[pl.ds(me, 1)], send_sem, recv_sem,
            device_id=(peer,), device_id_type=pl.DeviceIdType.MESH)

    for k in range(1, n):
        copy_to((me + k) % n).start()

    def total():
        return sum(counts_ref[j] for j in range(n))

    early = total() if READ_EARLY else None
    for k in range(1, n):
        copy_to((me + k) % n).wait_recv()
        copy_to((me + k) % n).wait_send()
    pl.semaphore_signal(done_sem, counts_ref[me], device_id=(0,), device_id_type=pl.DeviceIdType.MESH)

    @pl.when(me == 0)
    def _():
        pl.semaphore_wait(done_sem, early if READ_EARLY else total())


def run(devices: int):
    mesh = Mesh(np.array(jax.devices()[:devices]), ("x",))
    mine = jnp.arange(1, devices + 1, dtype=jnp.int32)

    def per_device(block):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            scratch_shapes=[pltpu.SMEM((devices,), jnp.int32), pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR],
        )(block)

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    return fn(mine)


if __name__ == "__main__":
    run(jax.device_count())
