"""Per-device counts all-gathered around a ring by forwarding, then summed into a wait amount.

Device d holds count c_d (the script passes c_d = d + 1) at counts_ref[d]. At step s it
copies row (d - s) mod n, its own at step 0 and the one its left neighbour sent at step
s - 1 after that, to its right neighbour, each step on its own receive semaphore (as
ring all-reduces of per-expert counts in fused MoE kernels do). What a device forwards
from step 1 on is data that arrived by remote DMA, known to semcheck only once the copy
that brought it has landed in the canonical run (lower/schedule.py). Then every device
signals its count to device 0, which waits for the sum of the gathered counts (safe).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P


def kernel(mine_ref, o_ref, counts_ref, recv_sems, send_sem, done_sem):
    me = lax.axis_index("x")
    n = lax.axis_size("x")
    counts_ref[me] = mine_ref[0]
    for step in range(n - 1):
        row = (me - step + n) % n
        copy = pltpu.make_async_remote_copy(
            counts_ref.at[pl.ds(row, 1)], counts_ref.at[pl.ds(row, 1)], send_sem, recv_sems.at[step],
            device_id=((me + 1) % n,), device_id_type=pl.DeviceIdType.MESH)
        copy.start()
        copy.wait_send()
        copy.wait_recv()  # the left neighbour's row (me - step - 1) has landed
    pl.semaphore_signal(done_sem, counts_ref[me], device_id=(0,), device_id_type=pl.DeviceIdType.MESH)

    @pl.when(me == 0)
    def _():
        pl.semaphore_wait(done_sem, sum(counts_ref[j] for j in range(n)))


def run(devices: int):
    mesh = Mesh(np.array(jax.devices()[:devices]), ("x",))
    mine = jnp.arange(1, devices + 1, dtype=jnp.int32)

    def per_device(block):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            scratch_shapes=[pltpu.SMEM((devices,), jnp.int32), pltpu.SemaphoreType.DMA((max(devices - 1, 1),)),
                            pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR],
        )(block)

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    return fn(mine)


if __name__ == "__main__":
    run(jax.device_count())
