"""A ring copy started by one kernel and waited for by another, each kernel in a shard_map of
its own inside one jitted function (the shape of a reshard "future": the start program returns
the destination buffer and the DMA semaphores, the wait program takes them). The semaphores
leave the first shard_map and enter the second; each device's shard of them is its own (both
specs shard the device axis), so the two kernels are one program. WAITS=2 waits twice for the
one receive."""

import os

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

ANY = pl.BlockSpec(memory_space=pl.ANY)
SEMAPHORE = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)
WAITS = int(os.environ.get("WAITS", "1"))


def start_kernel(x_ref, buffer_ref, out_ref, sems):
    del buffer_ref  # aliased into out_ref
    n = lax.axis_size("x")
    right = lax.rem(lax.axis_index("x") + 1, n)
    left = lax.rem(lax.axis_index("x") + n - 1, n)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    pltpu.make_async_remote_copy(x_ref, out_ref, sems.at[0], sems.at[1], device_id=(right,)).start()


def wait_kernel(x_ref, buffer_ref, sems, out_ref):
    del buffer_ref  # aliased into out_ref
    pltpu.make_async_copy(x_ref, x_ref, sems.at[0]).wait()  # the send
    for _ in range(WAITS):
        pltpu.make_async_copy(x_ref, out_ref, sems.at[1]).wait()  # the receive


def start(x, buffer):
    return pl.pallas_call(
        start_kernel,
        out_shape=(jax.ShapeDtypeStruct.like(x), pltpu.SemaphoreType.DMA((2,))),
        in_specs=[ANY, ANY],
        out_specs=(ANY, SEMAPHORE),
        input_output_aliases={1: 0},
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )(x, buffer)


def wait(x, buffer, sems):
    return pl.pallas_call(
        wait_kernel,
        out_shape=jax.ShapeDtypeStruct.like(x),
        in_specs=[ANY, ANY, SEMAPHORE],
        out_specs=ANY,
        input_output_aliases={1: 0},
        compiler_params=pltpu.CompilerParams(has_side_effects=True),
    )(x, buffer, sems)


mesh = jax.make_mesh((jax.device_count(),), ("x",))
start_program = jax.jit(jax.shard_map(start, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=(P("x"), P("x")),
                                      check_vma=False))
wait_program = jax.jit(jax.shard_map(wait, mesh=mesh, in_specs=(P("x"), P("x"), P("x")), out_specs=P("x"),
                                     check_vma=False))


@jax.jit
def reshard(x, buffer):
    out, sems = start_program(x, buffer)
    return wait_program(x, out, sems)


if __name__ == "__main__":
    sharded = NamedSharding(mesh, P("x"))
    x = jax.device_put(jnp.arange(jax.device_count() * 8 * 128, dtype=jnp.float32).reshape(-1, 128), sharded)
    print(reshard(x, jax.device_put(jnp.zeros_like(x), sharded)).shape)
