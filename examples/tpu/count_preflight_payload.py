"""A count sent ahead of a payload that is sent only when the count is non-zero: safe.

Each device first copies its count row to its right neighbour (a remote DMA into the
neighbour's HBM output `counts_in`) and waits for its left neighbour's; it stages what arrived
into VMEM with a local DMA and reads it. Then a device whose own count is non-zero sends its
payload into the right neighbour's `landing`, and a device that received a non-zero count
waits for the left neighbour's payload; one that received zero takes zeros instead. The
sender decides from its operand and the receiver from the copy of that operand, so every
payload sent is waited for and no wait is for a payload never sent. The script gives even
devices a zero count, so both sides of each branch run.

semcheck follows the count through both copies (the canonical run lands the remote copy in
`counts_in`, and the kernel is lowered again with it, docs/data-evaluation.md), so each
receiver's branch is the script's, not every outcome: checked for every outcome, a receiver
that waits would be paired with a sender that does not send. The variable-count RDMA
exchange of benchmarks/public_kernels.md is this protocol, once per peer offset.
count_preflight_payload_own_count.py decides the receiver's side from its own count.
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

OWN_COUNT = False  # the buggy sibling: the receiver decides from its own count


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
        payload_copy.wait_recv()
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
    print("count preflight payload:", out.shape)
