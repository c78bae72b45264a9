"""Bidirectional ring reduce-scatter that does not take back its capacity at the end.

The kernel of reduce_scatter_bidirectional.py without its epilogue's drain: the last step
writes the finished halves to the output but never waits for the unit of capacity each
neighbour gave it after their last exchange. Nothing hangs and every copy is waited for,
but both REGULAR capacity semaphores of every device are still 1 when the kernel exits
(`semaphore_leftover`, reported at the signal that left them non-zero), which Mosaic
rejects at kernel exit and which would let the next kernel on the same semaphores start
a send too early. reduce_scatter_bidirectional.py is the fix.
"""

# semcheck: expect semaphore_leftover

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (16, 128)
HALF = BLOCK[0] // 2
LEFTWARD, RIGHTWARD = 0, 1


def give_capacity(semaphore, device):
    pl.semaphore_signal(semaphore, 1, device_id=(device,))  # <- semaphore_leftover


def reduce_scatter_kernel(
    x_ref, o_ref, slots,
    local_sem, left_recv, left_send, right_recv, right_send,
    left_capacity, right_capacity, acc,
):
    step = pl.program_id(0)
    phase = pl.program_id(1)
    first = jnp.logical_and(step == 0, phase == 0)
    last = step == pl.num_programs(0) - 1
    work = lax.rem(step, 2)
    spare = 1 - work
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)
    upper = pl.ds(0, HALF)
    lower = pl.ds(HALF, HALF)
    this_half = pl.ds(phase * HALF, HALF)

    def to_left(src, dst):
        return pltpu.make_async_remote_copy(src, dst, left_send, left_recv, device_id=(left,))

    def to_right(src, dst):
        return pltpu.make_async_remote_copy(src, dst, right_send, right_recv, device_id=(right,))

    seed_left = to_left(x_ref.at[my_id, upper], slots.at[work, upper])
    seed_right = to_right(x_ref.at[my_id, lower], slots.at[work, lower])
    # The rightward copy feeds the next step, so it goes from the spare slot to the working one.
    onward_left = to_left(slots.at[work, upper], slots.at[spare, upper])
    onward_right = to_right(slots.at[spare, lower], slots.at[work, lower])

    @pl.when(first)
    def _():
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(left,))
        pl.semaphore_signal(barrier, 1, device_id=(right,))
        pl.semaphore_wait(barrier, 2)
        o_ref[...] = jnp.zeros_like(o_ref)
        acc[...] = jnp.zeros_like(acc)
        seed_left.start()
        seed_left.wait()
        seed_right.start()
        give_capacity(right_capacity, left)
        give_capacity(left_capacity, right)

    @pl.when(jnp.logical_and(~first, phase == LEFTWARD))
    def _():
        pl.semaphore_wait(right_capacity, 1)
        onward_right.start()

    @pl.when(jnp.logical_and(~first, phase == RIGHTWARD))
    def _():
        pl.semaphore_wait(left_capacity, 1)
        onward_left.start()

    load = pltpu.make_async_copy(slots.at[work, this_half], acc, local_sem)
    load.start()
    load.wait()

    @pl.when(~last)
    def _():
        origin = jnp.where(
            phase == LEFTWARD,
            lax.rem(my_id + step + 1, num_devices),
            lax.rem(my_id + 2 * num_devices - step - 1, num_devices),
        )
        acc[...] += x_ref[origin, pl.ds(phase * HALF, HALF)]

    store = pltpu.make_async_copy(acc, slots.at[work, this_half], local_sem)
    store.start()
    store.wait()

    @pl.when(first)
    def _():
        seed_right.wait()

    @pl.when(jnp.logical_and(~first, phase == LEFTWARD))
    def _():
        onward_right.wait()
        give_capacity(right_capacity, left)

    @pl.when(jnp.logical_and(~first, phase == RIGHTWARD))
    def _():
        onward_left.wait()
        give_capacity(left_capacity, right)

    @pl.when(jnp.logical_and(last, phase == LEFTWARD))
    def _():
        o_ref[upper, :] = acc[...]

    @pl.when(jnp.logical_and(last, phase == RIGHTWARD))
    def _():
        o_ref[lower, :] = acc[...]


def reduce_scatter(x, mesh):
    num_devices = mesh.size

    def per_device(blocks):
        out, _slots = pl.pallas_call(
            reduce_scatter_kernel,
            grid=(num_devices, 2),
            out_shape=(
                jax.ShapeDtypeStruct(BLOCK, jnp.float32),
                jax.ShapeDtypeStruct((2, *BLOCK), jnp.float32),  # slots, resident in HBM
            ),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=(pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pl.ANY)),
            scratch_shapes=[
                pltpu.SemaphoreType.DMA,  # local_sem
                pltpu.SemaphoreType.DMA,  # left_recv
                pltpu.SemaphoreType.DMA,  # left_send
                pltpu.SemaphoreType.DMA,  # right_recv
                pltpu.SemaphoreType.DMA,  # right_send
                pltpu.SemaphoreType.REGULAR,  # left_capacity
                pltpu.SemaphoreType.REGULAR,  # right_capacity
                pltpu.VMEM((HALF, BLOCK[1]), jnp.float32),  # acc
            ],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(blocks.reshape(num_devices, *BLOCK))
        return out

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P(None, "x"), out_specs=P("x", None), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.ones((BLOCK[0] * n, BLOCK[1] * n), jnp.float32)
    out = reduce_scatter(x, mesh)
    jax.block_until_ready(out)
    print("reduce-scatter:", out.shape, float(out[0, 0]))
