"""count_preflight_payload.py with the receiver deciding from its own count: it hangs.

The script gives even devices a zero count. Device 1 (count 1) sends its payload to its right
neighbour and waits for device 0's, which device 0 (count 0) never sends: `unsatisfied_wait` at the
payload's `wait_recv`, at every device count. The fix is the sibling's: decide the receiving
side from the count that arrived (`count_vmem`), the copy of the sender's own.
"""

# semcheck: expect unsatisfied_wait

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

OWN_COUNT = True  # the receiver decides from its own count, not the one it received


def preflight_kernel(count_smem, count_hbm, payload_ref, o_ref, counts_in, count_vmem, landing,
                     count_sems, stage_sem, payload_sems):
    me = lax.axis_index("x")
    right = lax.rem(me + 1, lax.axis_size("x"))
    count_copy = pltpu.make_async_remote_copy(count_hbm, counts_in, count_sems.at[0], count_sems.at[1],
                                              device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
    count_copy.start()
    count_copy.wait_send()
    count_copy.wait_recv()  # the left neighbour's count has landed in counts_in
    stage = pltpu.make_async_copy(counts_in, count_vmem, stage_sem)
    stage.start()
    stage.wait()

    payload_copy = pltpu.make_async_remote_copy(payload_ref, landing, payload_sems.at[0], payload_sems.at[1],
                                                device_id=(right,), device_id_type=pl.DeviceIdType.MESH)
    sending = count_smem[0] != 0
    receiving = sending if OWN_COUNT else count_vmem[0, 0] != 0

    @pl.when(sending)
    def _():
        payload_copy.start()
        payload_copy.wait_send()

    @pl.when(receiving)
    def _():
        payload_copy.wait_recv()  # <- unsatisfied_wait
        o_ref[...] = landing[...]

    @pl.when(jnp.logical_not(receiving))
    def _():
        o_ref[...] = jnp.zeros_like(o_ref)


def count_preflight_payload(counts, payload, mesh):
    def per_device(count_block, payload_block):
        return pl.pallas_call(
            preflight_kernel,
            out_shape=(jax.ShapeDtypeStruct(payload_block.shape, payload_block.dtype),
                       jax.ShapeDtypeStruct(count_block.shape, count_block.dtype)),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY),
                      pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=(pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pl.ANY)),
            scratch_shapes=[
                pltpu.VMEM(count_block.shape, count_block.dtype),  # count_vmem
                pltpu.VMEM(payload_block.shape, payload_block.dtype),  # landing
                pltpu.SemaphoreType.DMA((2,)),  # count_sems: send, receive
                pltpu.SemaphoreType.DMA,  # stage_sem
                pltpu.SemaphoreType.DMA((2,)),  # payload_sems: send, receive
            ],
        )(count_block[0, :1], count_block, payload_block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=(P("x"), P("x")),
                      check_vma=False)
    )(counts, payload)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    counts = jnp.repeat(jnp.arange(n, dtype=jnp.int32) % 2, 8 * 128).reshape(n * 8, 128)
    payload = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    out, _ = count_preflight_payload(counts, payload, mesh)
    jax.block_until_ready(out)
    print("count preflight payload, own count:", out.shape)
