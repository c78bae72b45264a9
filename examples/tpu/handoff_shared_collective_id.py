"""Two handoff kernels that share a collective_id: a barrier wait passes on the other kernel's signal.

`count_kernel` hands a count from device 0 to device 1: device 1 says "ready" on device 0's
barrier semaphore, device 0 adds 5 to device 1's `count` semaphore and says "done" on device
1's barrier semaphore; device 1 waits for "done", reads `count` into its output, then takes
the 5. `relay_kernel`, run next in the same jitted function, is a plain ready/done handshake
between devices 1 and 2 on the barrier semaphore. Both kernels use `collective_id=0`, so
they share one barrier semaphore, and nothing else is wrong: every count balances, nothing
hangs, every copy is local.

Device 2 has nothing to do in `count_kernel`: it enters `relay_kernel` at once and says
"ready" on device 1's barrier semaphore. Device 1, still in `count_kernel`, waits there for
device 0's "done", and the chip cannot tell the two signals apart: the wait passes on
device 2's, and device 1 reads `count` before device 0's 5 has arrived (it outputs 0).
semcheck reports the wait (`remote_before_entry`: it passed on a signal sent from a later
invocation), naming device 2's signal. JAX's distributed Pallas tests check the same two
kernels made safe by giving each kernel its own barrier semaphore
(test_auto_assigned_barrier_semaphores_no_data_corruption, jax-ml/jax). With 2 devices the
relay is between devices 1 and 0, and device 0 says "done" before it can say "ready": safe.

handoff_own_collective_ids.py is the fix: a collective_id per kernel.
"""

# semcheck: expect remote_before_entry devices=4,8
# semcheck: expect safe devices=2

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

COUNT_ID, RELAY_ID = 0, 0  # one barrier semaphore for both kernels


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
        pl.semaphore_wait(barrier, 1)  # <- remote_before_entry (passes on the relay's "ready")
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
