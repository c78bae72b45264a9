"""A peer's landing slot written twice: the second copy waits for the receiver's go-ahead.

Each device sends the upper half of its block into its right neighbour's landing slot (the
first copy, on `send_sems[0]` / `recv_sems[0]`), and later the whole block into the same slot
(the second copy, on `send_sems[1]` / `recv_sems[1]`), as a reduce-scatter does when it first
sends a partial result and then the finished one into one buffer of its neighbour. Between the
two, the receiver waits for the first copy to land and then signals its left neighbour's
REGULAR semaphore `go`; the sender waits for `go` before it starts the second copy. So the
first copy has landed before the second one starts, in every schedule, whatever order a DMA
engine lands copies in; at the end the receiver waits for the second copy and reads the slot.

Every semaphore ends at zero. resend_into_slot_unacked.py is the same kernel without the
go-ahead.
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

ROWS, HALF = 16, 8


def resend_kernel(x_ref, o_ref, landing, send_sems, recv_sems, go):
    me = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(me + 1, num_devices)
    left = lax.rem(me + num_devices - 1, num_devices)

    first = pltpu.make_async_remote_copy(
        x_ref.at[pl.ds(0, HALF)], landing.at[pl.ds(0, HALF)], send_sems.at[0], recv_sems.at[0], device_id=(right,)
    )
    second = pltpu.make_async_remote_copy(x_ref, landing, send_sems.at[1], recv_sems.at[1], device_id=(right,))

    first.start()
    first.wait_send()
    first.wait_recv()  # the left neighbour's first copy has landed in this device's slot
    pl.semaphore_signal(go, 1, device_id=(left,))  # it may send its second copy now
    pl.semaphore_wait(go, 1)  # the right neighbour's go-ahead: this device's first copy landed
    second.start()
    second.wait_send()
    second.wait_recv()
    o_ref[...] = landing[...]


def resend_into_slot(x, mesh):
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
                pltpu.SemaphoreType.REGULAR,  # go
            ],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * ROWS * 128, dtype=jnp.float32).reshape(n * ROWS, 128)
    out = resend_into_slot(x, mesh)
    jax.block_until_ready(out)
    print("resend into slot:", out.shape)
