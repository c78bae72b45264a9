"""Dispatch by a static plan with one receive semaphore for both generations: `data_race`.

The same kernel as moe_static_plan.py, except that both generations land on one receive
semaphore. A device that has all of its first block's rows goes on to push its second
block; those rows can land on a slower device before some of that device's first-block
rows, and their bytes satisfy its first-generation wait, so it reads bank 0 while a
first-block copy is still writing it.

moe_static_plan.py is the fix: one receive semaphore per generation.

It reads the plan's entries with `plan_entry` (iotas and a sum) for the reason
moe_static_plan.py gives: `plan[my_id, d]` is a `dynamic_slice`, which Pallas TPU lowering
does not implement, so the kernel as first written did not build for a TPU (semcheck's
`not_lowerable`). The values, and the verdict, are the same.
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

GENERATIONS = 2
ROWS = 8  # tokens per device and generation (the plan never sends more than 2 to one device)
HIDDEN = 128


def plan_table(devices: int):
    """Rows device src sends device dst, as a (devices, devices) table. Built from iotas in
    the kernel, since a pallas_call refuses array constants it closes over."""
    src = lax.broadcasted_iota(jnp.int32, (devices, devices), 0)
    dst = lax.broadcasted_iota(jnp.int32, (devices, devices), 1)
    return (src + 2 * dst) % 3


def plan_entry(plan, src, dst):
    """plan[src, dst] at traced indices, selected with iotas and summed: Pallas TPU lowering
    has no rule for indexing an array value at a traced index (a dynamic_slice)."""
    rows = lax.broadcasted_iota(jnp.int32, plan.shape, 0)
    cols = lax.broadcasted_iota(jnp.int32, plan.shape, 1)
    return jnp.sum(jnp.where((rows == src) & (cols == dst), plan, 0))


def dispatch_kernel(x_hbm, out_ref, banks, send_sem, recv_sem):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    plan = plan_table(num_devices)
    # Where my rows land in each device's bank: after those of every device before me.
    src = lax.broadcasted_iota(jnp.int32, plan.shape, 0)
    offsets = jnp.sum(jnp.where(src < my_id, plan, 0), axis=0)

    barrier = pltpu.get_barrier_semaphore()
    for d in range(num_devices):
        pl.semaphore_signal(barrier, 1, device_id=(d,))
    pl.semaphore_wait(barrier, num_devices)

    sent = 0
    for g in range(GENERATIONS):
        for d in range(num_devices):
            n = plan_entry(plan, my_id, d)
            pltpu.make_async_remote_copy(
                x_hbm.at[g, pl.ds(0, n)], banks.at[g, pl.ds(offsets[d], n)],
                send_sem, recv_sem, device_id=(d,),  # BUG: one semaphore for every generation
            ).start()  # <- data_race
            sent = sent + n
        received = 0
        for d in range(num_devices):
            received = received + plan_entry(plan, d, my_id)
        rows = banks.at[g, pl.ds(0, received)]
        pltpu.make_async_copy(rows, rows, recv_sem).wait()
        out_ref[g] = banks[g] * 2.0  # <- data_race
    rows = x_hbm.at[0, pl.ds(0, sent)]  # a descriptor of every row sent, for the byte count
    pltpu.make_async_copy(rows, rows, send_sem).wait()


def dispatch(x, mesh):
    n = mesh.size

    def per_device(block):
        return pl.pallas_call(
            dispatch_kernel,
            out_shape=jax.ShapeDtypeStruct((GENERATIONS, 2 * n, HIDDEN), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[
                pltpu.VMEM((GENERATIONS, 2 * n, HIDDEN), jnp.float32),  # banks, one per generation
                pltpu.SemaphoreType.DMA,
                pltpu.SemaphoreType.DMA,  # the receive semaphore, shared by the generations
            ],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(block.reshape(GENERATIONS, ROWS, HIDDEN))

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * GENERATIONS * ROWS * HIDDEN, dtype=jnp.float32).reshape(n * GENERATIONS * ROWS, HIDDEN)
    out = dispatch(x, mesh)
    jax.block_until_ready(out)
    print("static plan dispatch, one receive semaphore:", out.shape)
