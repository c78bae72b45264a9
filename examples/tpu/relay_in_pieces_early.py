"""Two-hop relay on a ring that passes a piece on before the chunk it lies in has landed.

The kernel of relay_in_pieces.py, with the relay's pipelining done by index: the loop waits
for chunk k of the left neighbour's block and then starts piece k of the relayed half. The
relayed half is the lower one (rows 8..16), which lies wholly in chunk 1, so piece 0 (rows
8..12) starts after only chunk 0 has landed: its copy reads rows of the slot that the left
neighbour's copy of chunk 1 may still be writing (`data_race`, between the relay's start and
the chunk's copy; at every device count). The forwarded rows may be stale, and nothing on the
receiving side can tell. The same slip is in an all-gather written for a 2x2 TPU v5p
(benchmarks/public_kernels.md, "TPU-Collectives"): its leftward relay takes pieces of the
second half of a block at the loop index of the first half's arrival.

relay_in_pieces.py is the fix: start each piece after the chunk it lies in.
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

ROWS, CHUNK, PIECE = 16, 8, 4
CHUNKS = ROWS // CHUNK
RELAYED = (8, 12)  # first rows of the two pieces relayed: the lower half of the block


def relay_kernel(x_ref, o_ref, hop_send, hop_recv, relay_send, relay_recv):
    me = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    right = lax.rem(me + 1, num_devices)
    left = lax.rem(me + num_devices - 1, num_devices)

    def hop(k):  # chunk k of this device's block, into slot `me` of the right neighbour
        rows = pl.ds(k * CHUNK, CHUNK)
        return pltpu.make_async_remote_copy(
            x_ref.at[rows], o_ref.at[me, rows], hop_send.at[k], hop_recv.at[k], device_id=(right,)
        )

    def relay(p):  # piece p of the left neighbour's block, on to slot `left` of the right one
        rows = pl.ds(RELAYED[p], PIECE)
        return pltpu.make_async_remote_copy(
            o_ref.at[left, rows], o_ref.at[left, rows], relay_send.at[p], relay_recv.at[p], device_id=(right,)
        )

    for k in range(CHUNKS):
        hop(k).start()  # <- data_race
    for k in range(CHUNKS):
        hop(k).wait()  # this device's chunk k has left, and the left neighbour's chunk k landed
        relay(k).start()  # <- data_race
    for p in range(len(RELAYED)):
        relay(p).wait()


def relay_in_pieces_early(x, mesh):
    n = mesh.size

    def per_device(block):
        return pl.pallas_call(
            relay_kernel,
            out_shape=jax.ShapeDtypeStruct((n, ROWS, 128), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[
                pltpu.SemaphoreType.DMA((CHUNKS,)),  # hop_send
                pltpu.SemaphoreType.DMA((CHUNKS,)),  # hop_recv
                pltpu.SemaphoreType.DMA((len(RELAYED),)),  # relay_send
                pltpu.SemaphoreType.DMA((len(RELAYED),)),  # relay_recv
            ],
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    x = jnp.arange(n * ROWS * 128, dtype=jnp.float32).reshape(n * ROWS, 128)
    out = relay_in_pieces_early(x, mesh)
    jax.block_until_ready(out)
    print("relay in pieces, started early:", out.shape)
