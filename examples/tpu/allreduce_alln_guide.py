"""The ring all-reduce of JAX's distributed TPU guide (docs/pallas/tpu/distributed.md, "Example:
All-Reduce Sum"), written out again: safe at every device count.

The grid has one step per device. Step 0 enters the kernel with both ring neighbours twice:
once on the barrier semaphore and once more on a REGULAR semaphore allocated with
`pl.run_scoped` (the guide's double barrier, which keeps a neighbour that already re-entered
the kernel from satisfying the first barrier), zeroes the output and the VMEM landing block,
and copies its own block into the working slot of its right neighbour's two-slot HBM buffer,
waiting on both sides of that copy. Every step then:

1. signals the REGULAR `capacity` semaphore of its LEFT neighbour: the slot that neighbour
   will write next (this device's receiving slot) has been read;
2. starts a local copy of its working slot into VMEM;
3. waits for one unit of its own `capacity` (its right neighbour has read the slot it is
   about to write) and starts the remote copy of the working slot into the right
   neighbour's receiving slot;
4. adds the VMEM block to its output, and waits on both sides of the remote copy.

Working and receiving slots swap every step. Each device signals and waits on `capacity`
once per step, so it ends at zero; every copy is waited for in the step that starts it.
`semcheck verify FILE --devices all` proves it for every device count (docs/parametric.md);
allreduce_alln_capacity_to_right.py sends the capacity signal the wrong way.
"""

# semcheck: expect safe

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

    pl.semaphore_signal(capacity, 1, device_id=(left,), device_id_type=pl.DeviceIdType.MESH)

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
