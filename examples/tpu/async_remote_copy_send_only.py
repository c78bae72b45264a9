"""A remote copy started by one kernel, and only its send waited for: a semaphore leftover.

async_remote_copy.py without `recv_done_kernel`: the program waits until each block has
left its device, never until the neighbour's block has landed. The receive semaphore
`start_kernel` returned is dropped when the program ends while it holds the landed bytes
(or the copy is still landing): `semaphore_leftover` on the receive semaphore, judged at
the end of the program rather than at the exit of the kernel that handed it on.
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

ANY = pl.BlockSpec(memory_space=pl.ANY)
SEMAPHORE = pl.BlockSpec(memory_space=pltpu.SEMAPHORE)


def start_kernel(x_ref, aliased_x_ref, o_ref, send_sem, recv_sem):
    del aliased_x_ref
    n = lax.axis_size("x")
    me = lax.axis_index("x")
    right = lax.rem(me + 1, n)
    left = lax.rem(me + n - 1, n)
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, device_id=(left,))
    pl.semaphore_wait(barrier, 1)
    pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,)).start()  # <- semaphore_leftover


def send_done_kernel(x_ref, send_sem, aliased_x_ref):
    del aliased_x_ref
    pltpu.make_async_copy(x_ref, x_ref, send_sem).wait()


def copy_start(x):
    return pl.pallas_call(
        start_kernel,
        out_shape=(jax.ShapeDtypeStruct.like(x), jax.ShapeDtypeStruct.like(x),
                   pltpu.SemaphoreType.DMA(()), pltpu.SemaphoreType.DMA(())),
        in_specs=[ANY],
        out_specs=(ANY, ANY, SEMAPHORE, SEMAPHORE),
        input_output_aliases={0: 0},
        compiler_params=pltpu.CompilerParams(collective_id=0, has_side_effects=True),
    )(x)


def send_done(x, send_sem):
    return pl.pallas_call(
        send_done_kernel,
        out_shape=jax.ShapeDtypeStruct.like(x),
        in_specs=[ANY, SEMAPHORE],
        out_specs=ANY,
        input_output_aliases={0: 0},
    )(x, send_sem)


def shift_right(x):
    x, out, send_sem, recv_sem = copy_start(x)
    del recv_sem  # the bug: nobody waits for the block to land
    x = send_done(x, send_sem)
    return x + out


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    f = jax.jit(jax.shard_map(shift_right, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    print("shifted:", f(x).shape)
