"""Two-hop relay on a ring: a block arrives in two chunks and half of it is passed on in pieces.

Each device sends its block to its right neighbour as two remote DMAs, one per chunk of 8
rows, into slot `me` of the neighbour's output, each chunk on a receive semaphore of its own
(`hop_recv.at[k]`). The block that arrives from the left neighbour is then relayed one hop
further, to the right neighbour's slot `left`: only its lower half (rows 8..16), in two pieces
of 4 rows, each on its own send and receive semaphore, the way a bidirectional all-gather on a
4-device ring sends each half of a block round the ring in its own direction to the device
opposite.

The relay is pipelined with the arrival: the loop waits for chunk k and then starts every piece
that lies in chunk k. Both pieces of the lower half lie in chunk 1, so both start after the
second wait, when every row they read has landed; a piece never reads rows a copy still writes.
The slots are distinct at every device count: the hop writes the neighbour's slot `me`, the
relay its slot `left` (the slot of the device two hops back; at 2 devices that is the
neighbour's own slot, which nothing else writes). Every copy is waited for on both sides.

relay_in_pieces_early.py is the bug this avoids: it starts piece k after chunk k, whatever chunk
the piece lies in.
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
        hop(k).start()
    for k in range(CHUNKS):
        hop(k).wait()  # this device's chunk k has left, and the left neighbour's chunk k landed
        for p, first_row in enumerate(RELAYED):
            if first_row // CHUNK == k:  # the piece lies in the chunk that just landed
                relay(p).start()
    for p in range(len(RELAYED)):
        relay(p).wait()


def relay_in_pieces(x, mesh):
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
    out = relay_in_pieces(x, mesh)
    jax.block_until_ready(out)
    print("relay in pieces:", out.shape)
