"""gathered_counts.py with its entry handshake on a scratch `SemaphoreType.BARRIER` semaphore
(`collective_id=0`, `allow_collective_id_without_custom_barrier=True`), as sglang-jax's fused
MoE v2 builds its `sync_barrier`.

semcheck checks such a semaphore as an ordinary scratch semaphore allocated at entry
(docs/semantics.md), so a peer's handshake signal can arrive before this device entered and
be lost: `remote_before_entry`. The counts gathered after the handshake are still the
script's: the canonical run that lands remote copies (lower/schedule.py) lets every thread
enter before any runs on, so the handshake completes there and the copies land.

Expected verdict: violation (remote_before_entry only)
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P


def kernel(mine_ref, o_ref, counts_ref, recv_sem, send_sem, done_sem, handshake):
    me = lax.axis_index("x")
    n = lax.axis_size("x")
    for peer in range(n):
        pl.semaphore_signal(handshake, 1, device_id=(peer,), device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(handshake, n)
    counts_ref[me] = mine_ref[0]

    def copy_to(peer):
        return pltpu.make_async_remote_copy(
            counts_ref.at[pl.ds(me, 1)], counts_ref.at[pl.ds(me, 1)], send_sem, recv_sem,
            device_id=(peer,), device_id_type=pl.DeviceIdType.MESH)

    for k in range(1, n):
        copy_to((me + k) % n).start()
    for k in range(1, n):
        copy_to((me + k) % n).wait_recv()
        copy_to((me + k) % n).wait_send()
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
            scratch_shapes=[pltpu.SMEM((devices,), jnp.int32), pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR,
                            pltpu.SemaphoreType.BARRIER],
            compiler_params=pltpu.CompilerParams(collective_id=0,
                                                 allow_collective_id_without_custom_barrier=True),
        )(block)

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    return fn(mine)


if __name__ == "__main__":
    run(jax.device_count())
