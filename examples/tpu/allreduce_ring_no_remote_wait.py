"""The ring all-reduce of allreduce_ring.py with one line dropped: `onward.wait()`.

Each step still starts the copy of its working slot into the right neighbour's spare
slot, but nothing waits for it: neither for it to leave (its send semaphore) nor for the
left neighbour's copy to land (the receive semaphore). Both semaphores hold the bytes of
every such copy when the kernel exits (`semaphore_leftover`), and a device reads the slot
that its left neighbour's copy is still writing in the next step (`data_race`). One
missing line, one problem: the copy started at the `onward.start()` line is never waited
for. allreduce_ring.py is the fix.
"""

# semcheck: expect data_race, semaphore_leftover


import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (8, 128)


def enter_with_neighbours(left, right):
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id=(left,))
    pl.semaphore_signal(barrier, 1, device_id=(right,))
    pl.semaphore_wait(barrier, 2)


def all_reduce_kernel(x_ref, o_ref, slots, local_sem, send_sem, recv_sem, capacity, incoming):
    step = pl.program_id(0)
    work = lax.rem(step, 2)
    spare = 1 - work
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(my_id + 1, num_devices)
    left = lax.rem(my_id + num_devices - 1, num_devices)

    @pl.when(step == 0)
    def _():
        enter_with_neighbours(left, right)
        o_ref[...] = jnp.zeros_like(o_ref)
        first = pltpu.make_async_remote_copy(
            x_ref, slots.at[work], send_sem, recv_sem, device_id=(right,)
        )
        first.start()
        first.wait()  # my block has left, and my left neighbour's block has landed

    pl.semaphore_signal(capacity, 1, device_id=(left,))  # my spare slot is free

    local = pltpu.make_async_copy(slots.at[work], incoming, local_sem)
    local.start()  # <- data_race

    pl.semaphore_wait(capacity, 1)  # my right neighbour's spare slot is free
    onward = pltpu.make_async_remote_copy(
        slots.at[work], slots.at[spare], send_sem, recv_sem, device_id=(right,)
    )
    onward.start()  # <- data_race, semaphore_leftover

    local.wait()
    o_ref[...] += incoming[...]


def all_reduce(x, mesh):
    num_devices = mesh.size

    def per_device(block):
        out, _slots = pl.pallas_call(
            all_reduce_kernel,
            grid=(num_devices,),
            out_shape=(
                jax.ShapeDtypeStruct(BLOCK, jnp.float32),
                jax.ShapeDtypeStruct((2, *BLOCK), jnp.float32),  # slots, resident in HBM
            ),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=(pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pl.ANY)),
            scratch_shapes=[
                pltpu.SemaphoreType.DMA,  # local_sem
                pltpu.SemaphoreType.DMA,  # send_sem
                pltpu.SemaphoreType.DMA,  # recv_sem
                pltpu.SemaphoreType.REGULAR,  # capacity
                pltpu.VMEM(BLOCK, jnp.float32),  # incoming
            ],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(block)
        return out

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(BLOCK[0] * BLOCK[1] * n, dtype=jnp.float32).reshape(BLOCK[0], BLOCK[1] * n)
    out = all_reduce(x, mesh)
    jax.block_until_ready(out)
    print("all-reduce:", out.shape, float(out[0, 0]))
