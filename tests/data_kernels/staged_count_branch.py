"""A count sent to the right neighbour's HBM output, staged into VMEM, read as a branch.

Device d holds a count (the script passes 0 on device 0, d + 1 elsewhere). It copies the
count to its right neighbour's HBM output `inbox` by remote DMA and waits for the copy
from its left; it stages what arrived into VMEM by a local DMA and reads it. A device whose
own count is non-zero signals its right neighbour's `go` semaphore; a device that received a
non-zero count waits on its own `go`. Both sides decide on the same count, the sender from
its operand and the receiver from the copy, so every signal is waited for (safe).

The value the receiver branches on arrives by a remote copy and then a local one: semcheck
must follow the remote copy's payload into `inbox` (the canonical run lands it, and the
kernel is lowered again) rather than check the branch for every outcome, which would pair
a waiting receiver with a sender that does not signal (a false `unsatisfied_wait`), as the
variable-count RDMA exchange of public_kernels.md got.

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


def kernel(count_hbm, count_smem, o_ref, inbox, staged, send_sem, recv_sem, stage_sem, go_sem):
    me = lax.axis_index("x")
    n = lax.axis_size("x")
    right = lax.rem(me + 1, n)
    copy = pltpu.make_async_remote_copy(count_hbm, inbox, send_sem, recv_sem, device_id=(right,),
                                        device_id_type=pl.DeviceIdType.MESH)
    copy.start()
    copy.wait_send()
    copy.wait_recv()
    stage = pltpu.make_async_copy(inbox, staged, stage_sem)
    stage.start()
    stage.wait()

    @pl.when(count_smem[0] != 0)
    def _():
        pl.semaphore_signal(go_sem, device_id=(right,), device_id_type=pl.DeviceIdType.MESH)

    @pl.when(staged[0, 0] != 0)
    def _():
        pl.semaphore_wait(go_sem, 1)

    o_ref[...] = staged[...]


def run(devices: int):
    mesh = Mesh(np.array(jax.devices()[:devices]), ("x",))
    counts = np.arange(1, devices + 1, dtype=np.int32)
    counts[0] = 0
    rows = jnp.asarray(np.repeat(counts, 8)[:, None] * np.ones((1, 128), np.int32))

    def per_device(block):
        return pl.pallas_call(
            kernel,
            out_shape=(jax.ShapeDtypeStruct((8, 128), jnp.int32), jax.ShapeDtypeStruct((8, 128), jnp.int32)),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.SMEM)],
            # the inbox is an HBM output (JAX 0.10.2's interpreter does not run an HBM scratch)
            out_specs=(pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pl.ANY)),
            scratch_shapes=[pltpu.VMEM((8, 128), jnp.int32),
                            pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                            pltpu.SemaphoreType.REGULAR],
        )(block, block[:1, 0])

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=(P("x"), P("x")), check_vma=False))
    return fn(rows)


if __name__ == "__main__":
    run(jax.device_count())
