"""A token passed once around the ring, started by device 0: safe at every device count, but
not one program for every device, so `--devices all` is inconclusive.

Device 0 signals the REGULAR semaphore `token` of its right neighbour and then waits for the
token to come back from its left neighbour; every other device waits for the token from its
left neighbour and passes it on to its right. Each device's `token` receives exactly one
signal and is waited for once, and the token goes round in order, so no schedule blocks or
leaves a count behind (no collective_id is set: the default device barrier runs before the
body, so no signal reaches a device that has not entered the kernel).

Every count checked on its own is safe. But device 0 runs another program than the rest (it
signals before it waits), so the devices are not rotations of one program and the argument
of docs/parametric.md does not apply: `semcheck verify FILE --devices all` says
`inconclusive: not parametric`, naming the first instruction where device 1 differs from
device 0, rather than claim a proof.
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

BLOCK = (8, 128)


def token_kernel(x_ref, o_ref, token):
    me = lax.axis_index("x")
    right = lax.rem(me + 1, lax.axis_size("x"))

    @pl.when(me == 0)
    def _():
        pl.semaphore_signal(token, 1, device_id=(right,), device_id_type=pl.DeviceIdType.MESH)

    pl.semaphore_wait(token, 1)  # the token, from the left neighbour

    @pl.when(me != 0)
    def _():
        pl.semaphore_signal(token, 1, device_id=(right,), device_id_type=pl.DeviceIdType.MESH)

    o_ref[...] = x_ref[...]


def pass_token(x, mesh):
    kernel = pl.pallas_call(
        token_kernel,
        out_shape=jax.ShapeDtypeStruct(BLOCK, jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.SemaphoreType.REGULAR],
    )
    return jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * BLOCK[0] * BLOCK[1], dtype=jnp.float32).reshape(n * BLOCK[0], BLOCK[1])
    out = pass_token(x, mesh)
    jax.block_until_ready(out)
    print("token passed:", out.shape)
