"""async_remote_copy.py with each kernel in a nested `jax.jit`: safe.

The start kernel, the send-done kernel and the receive-done kernel are each called through
a `jax.jit` of their own inside the jitted, shard_mapped function, so the DMA semaphores the
start kernel returns reach the done kernels through the nested calls' arguments and
results. JAX lowers a nested jit as a call of a function of its own; semcheck lowers a call
that holds a kernel inline while capturing (frontends/capture.py), so the three kernels are
still one program per device and the semaphores and the copy in flight carry across.

async_remote_copy_nested_jit_waits_twice.py waits twice for the one receive.
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
    # Each kernel in a jax.jit of its own, nested in the traced function: the semaphores
    # cross the nested calls' boundaries as values.
    x, out, send_sem, recv_sem = jax.jit(copy_start)(x)
    x = jax.jit(send_done)(x, send_sem)
    return jax.jit(recv_done)(x, out, recv_sem)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * 8 * 128, dtype=jnp.float32).reshape(n * 8, 128)
    f = jax.jit(jax.shard_map(shift_right, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    print("shifted:", f(x).shape)
