"""Two handoff kernels, each with a collective_id of its own: safe.

The fix of handoff_shared_collective_id.py: `count_kernel` keeps `collective_id=0` and
`relay_kernel` takes `collective_id=1`, so each kernel gets a barrier semaphore of its own.
Device 2's "ready" for the relay now lands on a semaphore that only the relay waits on, and
device 1's wait in `count_kernel` can only pass on device 0's "done", which device 0 sends
after its 5: device 1 reads 5. (JAX 0.11's jax_pallas_auto_assign_collective_ids=override
gives each kernel its own barrier semaphore in the same way.)
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

COUNT_ID, RELAY_ID = 0, 1  # a barrier semaphore per kernel


def count_kernel(x_ref, o_ref, count):
    me = lax.axis_index("x")
    barrier = pltpu.get_barrier_semaphore()
    o_ref[...] = x_ref[...]

    @pl.when(me == 0)
    def _give():
        pl.semaphore_wait(barrier, 1)  # device 1 is ready
        pl.semaphore_signal(count, 5, device_id=(1,))
        pl.semaphore_signal(barrier, 1, device_id=(1,))  # done

    @pl.when(me == 1)
    def _take():
        pl.semaphore_signal(barrier, 1, device_id=(0,))  # ready
        pl.semaphore_wait(barrier, 1)  # only device 0 signals this kernel's barrier semaphore
        o_ref[...] = jnp.full_like(o_ref, pl.semaphore_read(count).astype(o_ref.dtype))
        pl.semaphore_wait(count, 5)


def relay_kernel(x_ref, o_ref):
    me = lax.axis_index("x")
    n = lax.axis_size("x")
    peer = lax.rem(2, n)
    barrier = pltpu.get_barrier_semaphore()
    o_ref[...] = x_ref[...]

    @pl.when(me == 1)
    def _first():
        pl.semaphore_wait(barrier, 1)  # the peer is ready
        pl.semaphore_signal(barrier, 1, device_id=(peer,))  # done

    @pl.when(me == peer)
    def _second():
        pl.semaphore_signal(barrier, 1, device_id=(1,))  # ready
        pl.semaphore_wait(barrier, 1)


def count_then_relay(block):
    block = pl.pallas_call(
        count_kernel,
        out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
        compiler_params=pltpu.CompilerParams(collective_id=COUNT_ID),
    )(block)
    return pl.pallas_call(
        relay_kernel,
        out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
        compiler_params=pltpu.CompilerParams(collective_id=RELAY_ID),
    )(block)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.zeros((n * 8, 128), jnp.float32)
    f = jax.jit(jax.shard_map(count_then_relay, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    print("device 1 read:", np.asarray(jax.block_until_ready(f(x)))[8, 0])
