"""Two-hop forward through a copy helper, forwarded too early: the forward reads the slot
the first hop is still writing.

Same as forward_through_helper.py, except that the forward starts before `wait_recv`: the
left neighbour's block may still be landing in slot 0 while the forward reads it, so the
right neighbour can receive half a block. Both copies start on the one line inside the
`send` helper, so that line alone would not say which copy is early; the report names it
with the kernel line that called the helper (the forward), and names the first hop's call
for the copy it races with (docs/call-chains.md).
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


def send(src, dst, send_sem, recv_sem, to):
    """Start a copy of `src` into `dst` on device `to` and return it."""
    copy = pltpu.make_async_remote_copy(src, dst, send_sem, recv_sem, device_id=(to,))
    copy.start()  # <- data_race
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
    # BUG: forwards slot 0 before the left neighbour's block has landed in it
    second = send(o_ref.at[0], o_ref.at[1], send_sems.at[1], recv_sems.at[1], right)
    first.wait_recv()
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
    print("forward through helper (early):", out.shape)
