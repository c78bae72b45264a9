"""Two-hop forward through a copy helper: every device sends its block to its right
neighbour, then forwards the block it received from its left neighbour one hop further.

Both copies go through `send`, a small wrapper around `pltpu.make_async_remote_copy` that
starts the copy and returns it, as real collectives write them. The forward reads the slot
the first hop lands in, so it starts only after `wait_recv` says the left neighbour's block
has arrived; the barrier handshake before it keeps every remote copy from landing on a
device that has not entered the kernel. Every semaphore ends at zero in every schedule.

A finding on a line inside `send` would name the kernel's line that called it as well
(docs/call-chains.md); this kernel has none.
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


def send(src, dst, send_sem, recv_sem, to):
    """Start a copy of `src` into `dst` on device `to` and return it."""
    copy = pltpu.make_async_remote_copy(src, dst, send_sem, recv_sem, device_id=(to,))
    copy.start()
    return copy


def forward_kernel(x_ref, o_ref, send_sems, recv_sems):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)

    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)

    first = send(x_ref, o_ref.at[0], send_sems.at[0], recv_sems.at[0], right)
    first.wait_recv()  # the left neighbour's block is in slot 0
    second = send(o_ref.at[0], o_ref.at[1], send_sems.at[1], recv_sems.at[1], right)
    first.wait_send()
    second.wait()


def forward_two_hops(x, mesh):
    def per_device(block):
        return pl.pallas_call(
            forward_kernel,
            out_shape=jax.ShapeDtypeStruct((2, *block.shape), block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA((2,)), pltpu.SemaphoreType.DMA((2,))],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    out = forward_two_hops(x, mesh)
    jax.block_until_ready(out)
    print("forward through helper:", out.shape)
