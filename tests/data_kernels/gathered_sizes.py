"""Per-device row counts all-gathered by remote DMA, then used as DMA sizes and offsets.

Device d holds c_d rows to send (the script passes c_d = d + 1). The counts are all-gathered
into counts_ref in SMEM as in gathered_counts.py. Then every device d > 0 copies its c_d
rows to device 0's inbox at row offset c_1 + ... + c_{d-1} (a `pl.ds` whose start and size
come from the gathered counts), and device 0 waits for all of them at once through one
self-addressed descriptor as large as the total.

SAME_OFFSET (gathered_sizes_same_offset.py) lands every sender at row 0: the copies
overlap in device 0's inbox, a data race.

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

SAME_OFFSET = False
INBOX_ROWS = 64


def kernel(mine_ref, x_ref, o_ref, counts_ref, inbox, meta_send, meta_recv, send_sem, recv_sem):
    me = lax.axis_index("x")
    n = lax.axis_size("x")
    counts_ref[me] = mine_ref[0]

    def meta_to(peer):
        return pltpu.make_async_remote_copy(
            counts_ref.at[pl.ds(me, 1)], counts_ref.at[pl.ds(me, 1)], meta_send, meta_recv,
            device_id=(peer,), device_id_type=pl.DeviceIdType.MESH)

    for k in range(1, n):
        meta_to((me + k) % n).start()
    for k in range(1, n):
        meta_to((me + k) % n).wait_recv()
        meta_to((me + k) % n).wait_send()

    rows = counts_ref[me]
    offset = 0 if SAME_OFFSET else sum(jnp.where(j < me, counts_ref[j], 0) for j in range(1, n))

    @pl.when(me > 0)
    def _():
        copy = pltpu.make_async_remote_copy(
            x_ref.at[pl.ds(0, rows)], inbox.at[pl.ds(offset, rows)], send_sem, recv_sem,
            device_id=(0,), device_id_type=pl.DeviceIdType.MESH)
        copy.start()
        copy.wait_send()

    @pl.when(me == 0)
    def _():
        total = sum(counts_ref[j] for j in range(1, n))
        pltpu.make_async_copy(inbox.at[pl.ds(0, total)], inbox.at[pl.ds(0, total)], recv_sem).wait()


def run(devices: int):
    mesh = Mesh(np.array(jax.devices()[:devices]), ("x",))
    mine = jnp.arange(1, devices + 1, dtype=jnp.int32)
    x = jnp.ones((devices * 8, 128), jnp.float32)

    def per_device(mine, block):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.SMEM((devices,), jnp.int32), pltpu.VMEM((INBOX_ROWS, 128), jnp.float32),
                            pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        )(mine, block)

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"),
                               check_vma=False))
    return fn(mine, x)


if __name__ == "__main__":
    run(jax.device_count())
