"""A peer's landing slot written twice, the second copy started before the first has landed.

The kernel of resend_into_slot.py without the go-ahead: each device sends the upper half of its
block into its right neighbour's landing slot, waits for that copy's send side (its source may
be reused) and at once starts the second copy, of the whole block, into the same slot. The send
side says nothing about the landing: the two copies are in flight together, and if the second
lands first the first one overwrites its upper half with the old rows (`data_race`, between the
two copies' starts). The finding rests on copies of one device to one peer landing in any
order (its report says so, `rests on:`): a DMA engine that keeps one path's copies in issue
order would land them in order, and the kernel would then work by luck of the hardware. The
same pair of copies is in a public matmul-reduce-scatter written for a 2x2 TPU v5p
(benchmarks/public_kernels.md, "TPU-Collectives"), beside a read of the slot that races with
the second copy whatever the order.

resend_into_slot.py is the fix: the receiver tells the sender when the first copy has landed.
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

ROWS, HALF = 16, 8


def resend_kernel(x_ref, o_ref, landing, send_sems, recv_sems):
    me = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(me + 1, num_devices)

    first = pltpu.make_async_remote_copy(
        x_ref.at[pl.ds(0, HALF)], landing.at[pl.ds(0, HALF)], send_sems.at[0], recv_sems.at[0], device_id=(right,)
    )
    second = pltpu.make_async_remote_copy(x_ref, landing, send_sems.at[1], recv_sems.at[1], device_id=(right,))

    first.start()  # <- data_race
    first.wait_send()
    second.start()  # <- data_race
    second.wait_send()
    first.wait_recv()
    second.wait_recv()
    o_ref[...] = landing[...]


def resend_into_slot_unacked(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            resend_kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[
                pltpu.VMEM((ROWS, 128), jnp.float32),  # landing
                pltpu.SemaphoreType.DMA((2,)),  # send_sems
                pltpu.SemaphoreType.DMA((2,)),  # recv_sems
            ],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * ROWS * 128, dtype=jnp.float32).reshape(n * ROWS, 128)
    out = resend_into_slot_unacked(x, mesh)
    jax.block_until_ready(out)
    print("resend into slot, unacked:", out.shape)
