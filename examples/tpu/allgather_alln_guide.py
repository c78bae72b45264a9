"""The ring all-gather of JAX's distributed TPU guide (docs/pallas/tpu/distributed.md, "Example:
All-gather"), written out again: safe at every device count.

The grid has N - 1 steps. In step 0 every device copies its own block into its slot of the
output (a local DMA, waited for at once). In every step it then copies the slot it holds
newest, `(my_id - step) mod N`, into the same slot of its right neighbour's output with a
remote DMA, and waits on both sides of it: its own block has left, and its left neighbour's
block of this step has landed. Each step has its own receive semaphore (`recv_sems.at[step]`),
so a wait can only be satisfied by its own step's copy even when a sender runs ahead.

No collective_id is set, so the default device barrier runs before the body and no copy can
reach a device that has not entered the kernel. `semcheck verify FILE --devices all` proves it
for every device count (docs/parametric.md).
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


def all_gather_kernel(x_ref, o_ref, local_sem, send_sem, recv_sems):
    step = pl.program_id(0)
    me = lax.axis_index("x")
    count = lax.axis_size("x")
    right = lax.rem(me + 1, count)
    newest = lax.rem(me - step + count, count)

    @pl.when(step == 0)
    def _():
        own = pltpu.make_async_copy(src_ref=x_ref, dst_ref=o_ref.at[me], sem=local_sem)
        own.start()
        own.wait()

    # The left neighbour writes slot newest - 1 of this device meanwhile: the slots differ.
    onward = pltpu.make_async_remote_copy(
        src_ref=o_ref.at[newest], dst_ref=o_ref.at[newest], send_sem=send_sem,
        recv_sem=recv_sems.at[step], device_id=(right,), device_id_type=pl.DeviceIdType.MESH,
    )
    onward.start()
    onward.wait()


def all_gather(x, mesh):
    count = mesh.size
    kernel = pl.pallas_call(
        all_gather_kernel,
        out_shape=jax.ShapeDtypeStruct((count, *BLOCK), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=[pltpu.SemaphoreType.DMA] * 2 + [pltpu.SemaphoreType.DMA((count - 1,))],
            grid=(count - 1,),
        ),
    )
    return jax.jit(
        jax.shard_map(kernel, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * BLOCK[0] * BLOCK[1], dtype=jnp.float32).reshape(n * BLOCK[0], BLOCK[1])
    out = all_gather(x, mesh)
    jax.block_until_ready(out)
    print("all-gather:", out.shape)
