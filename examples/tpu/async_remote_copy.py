"""A remote copy started by one kernel and waited for by two later ones: safe.

JAX's way to overlap a copy with other work (tests/pallas/tpu_pallas_async_test.py in
jax-ml/jax, `make_async_remote_copy`): `start_kernel` does a neighbour handshake on its
barrier semaphore, starts a copy of its block to its right neighbour and returns, with the
copy in flight, the destination buffer and both DMA semaphores (out_specs in memory space
SEMAPHORE). `send_done_kernel` takes the send semaphore and waits until the block has left;
`recv_done_kernel` takes the receive semaphore and the destination and waits until the
neighbour's block has landed. Checked kernel by kernel, the start kernel exits with copies
in flight and each done kernel waits for bytes nothing in it sends; semcheck checks the
three as one program per device, the semaphores and the copy carried from one kernel to
the next.

async_remote_copy_send_only.py drops the receive wait.
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
    pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,)).start()


def send_done_kernel(x_ref, send_sem, aliased_x_ref):
    del aliased_x_ref
    pltpu.make_async_copy(x_ref, x_ref, send_sem).wait()


def recv_done_kernel(x_ref, o_ref, recv_sem, aliased_o_ref):
    del aliased_o_ref
    pltpu.make_async_copy(x_ref, o_ref, recv_sem).wait()


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


def recv_done(x, out, recv_sem):
    return pl.pallas_call(
        recv_done_kernel,
        out_shape=jax.ShapeDtypeStruct.like(x),
        in_specs=[ANY, ANY, SEMAPHORE],
        out_specs=ANY,
        input_output_aliases={1: 0},
    )(x, out, recv_sem)


def shift_right(x):
    x, out, send_sem, recv_sem = copy_start(x)
    x = send_done(x, send_sem)
    return recv_done(x, out, recv_sem)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    f = jax.jit(jax.shard_map(shift_right, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    print("shifted:", f(x).shape)
