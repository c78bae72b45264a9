"""Bidirectional ring reduce-scatter over a (step, phase) grid, with two capacity semaphores.

Device d ends with block d of the sum over all devices. Each block is cut in two halves:
the upper half's partial sum travels right to left around the ring, the lower half's left
to right, so both directions of every link carry data. The grid is (N, 2): in each step,
phase 0 works on the leftward partial sum and phase 1 on the rightward one, while the copy
of the other direction's partial sum, started at the top of the phase, is in flight.

Each device owns a two-slot buffer `slots` (working and spare slot swap every step). The
first phase enters the kernel with both neighbours (a barrier on the barrier semaphore),
sends its own upper half into its left neighbour's working slot and its lower half into
its right neighbour's, and gives each neighbour one unit of capacity. Every later phase:

1. waits for one unit of capacity from the neighbour it is about to send to (the REGULAR
   semaphore `right_capacity` before sending right, `left_capacity` before sending left),
   and starts that copy of last phase's partial sum into the neighbour's buffer;
2. copies its own partial sum of this phase into VMEM, adds its input, and copies it back
   (the local DMA semaphore; one local copy in flight at a time);
3. waits for the copy it started to leave and for the neighbour's copy to land, then gives
   the neighbour on that side one unit of capacity back.

The last step writes the finished halves to the output and takes back the unit of capacity
each neighbour still holds, so every semaphore is zero at exit. Five DMA semaphores (local,
and send and receive per direction) and two capacity semaphores, as in JAX's distributed
TPU tutorial (docs/pallas/tpu/distributed.md).
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

BLOCK = (16, 128)
HALF = BLOCK[0] // 2
LEFTWARD, RIGHTWARD = 0, 1


def give_capacity(semaphore, device):
    pl.semaphore_signal(semaphore, 1, device_id=(device,))


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
        pl.semaphore_wait(right_capacity, 1)

    @pl.when(jnp.logical_and(last, phase == RIGHTWARD))
    def _():
        o_ref[lower, :] = acc[...]
        pl.semaphore_wait(left_capacity, 1)


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
