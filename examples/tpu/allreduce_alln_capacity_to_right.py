"""The ring all-reduce of JAX's distributed TPU guide with its capacity signal sent the wrong
way: `data_race` from 3 devices on, safe at 2.

allreduce_alln_guide.py signals the `capacity` semaphore of its LEFT neighbour, the one that
writes into this device's receiving slot. This one signals its RIGHT neighbour instead. At 2
devices the two neighbours are one device, so nothing changes. From 3 devices on the unit of
capacity a device waits for comes from its left neighbour, which knows nothing about the
right neighbour it is about to write to: a device can get a step ahead of its right
neighbour and copy into the slot that neighbour is still reading (`data_race` at the onward
copy's start), and a landing can satisfy the wrong receive wait. `semcheck verify FILE
--devices all` reports N = 3 as the smallest device count with a violation.
"""

# semcheck: expect data_race devices=3,4,5,6,7,8,16
# semcheck: expect safe devices=2



import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

BLOCK = (8, 128)


def barrier_with(neighbours):
    """Signal both neighbours and wait for both, on the barrier semaphore and then once more
    on a scoped REGULAR semaphore."""
    barrier = pltpu.get_barrier_semaphore()
    for peer in neighbours:
        pl.semaphore_signal(barrier, 1, device_id=(peer,), device_id_type=pl.DeviceIdType.MESH)
    pl.semaphore_wait(barrier, 2)

    @functools.partial(pl.run_scoped, again=pltpu.SemaphoreType.REGULAR)
    def _(again):
        for peer in neighbours:
            pl.semaphore_signal(again, 1, device_id=(peer,), device_id_type=pl.DeviceIdType.MESH)
        pl.semaphore_wait(again, 2)


def all_reduce_kernel(x_ref, o_ref, hbm_slots, local_sem, recv_sem, send_sem, capacity, landing):
    step = pl.program_id(0)
    working = lax.rem(step, 2)
    receiving = 1 - working
    me = lax.axis_index("x")
    count = lax.axis_size("x")
    right = lax.rem(me + 1, count)
    left = lax.rem(me - 1 + count, count)

    @pl.when(step == 0)
    def _():
        barrier_with((left, right))
        o_ref[...] = jnp.zeros_like(o_ref)
        landing[...] = jnp.zeros_like(landing)
        first = pltpu.make_async_remote_copy(
            src_ref=x_ref, dst_ref=hbm_slots.at[working], send_sem=send_sem, recv_sem=recv_sem,
            device_id=(right,), device_id_type=pl.DeviceIdType.MESH,
        )
        first.start()
        first.wait()

    pl.semaphore_signal(capacity, 1, device_id=(right,), device_id_type=pl.DeviceIdType.MESH)  # the bug

    local = pltpu.make_async_copy(src_ref=hbm_slots.at[working], dst_ref=landing, sem=local_sem)
    local.start()

    pl.semaphore_wait(capacity, 1)
    onward = pltpu.make_async_remote_copy(
        src_ref=hbm_slots.at[working], dst_ref=hbm_slots.at[receiving], send_sem=send_sem,
        recv_sem=recv_sem, device_id=(right,), device_id_type=pl.DeviceIdType.MESH,
    )
    onward.start()
    local.wait()
    o_ref[...] += landing[...]
    onward.wait()


def all_reduce(x, mesh):
    count = mesh.size
    kernel = pl.pallas_call(
        all_reduce_kernel,
        out_shape=(
            jax.ShapeDtypeStruct(BLOCK, jnp.float32),
            jax.ShapeDtypeStruct((2, *BLOCK), jnp.float32),  # the two slots, kept in HBM
        ),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pl.ANY)],
            grid=(count,),
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 3 + [pltpu.SemaphoreType.REGULAR,
                                                            pltpu.VMEM(BLOCK, jnp.float32)],
        ),
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )
    return jax.jit(
        jax.shard_map(kernel, mesh=mesh, in_specs=P(None, "x"), out_specs=P(None, "x"), check_vma=False)
    )(x)[0]


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(BLOCK[0] * BLOCK[1] * n, dtype=jnp.float32).reshape(BLOCK[0], BLOCK[1] * n)
    out = all_reduce(x, mesh)
    jax.block_until_ready(out)
    print("all-reduce:", out.shape, float(out[0, 0]))
