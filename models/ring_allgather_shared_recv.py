"""Ring all-gather with one receive semaphore for every step: `data_race`.

The same ring as `ring_allgather`, but like the all_gather kernel shipped in the jax wheel
it keeps a single receive semaphore for all N-1 steps. The left neighbour does not wait for
this device before sending again, so its copies for step k and step k+1 can be in flight at
once, both counting bytes on the same semaphore. Copies complete in any order: the step-k+1
copy can land first and satisfy this device's wait for step k. The device then forwards
slot k to its right neighbour, reading it while the step-k copy is still writing it.

No schedule hangs and every count returns to 0 (bytes add up), so JAX's interpreter
usually runs it fine; the data forwarded can still be stale. The fix is one receive
semaphore per step (or a capacity handshake), as in `ring_allgather`.
"""

# semcheck: expect data_race devices=3,4,5,6,7,8,16,32
# semcheck: expect safe devices=2

from semcheck.model import DMA, ProtocolBuilder


def model(devices: int):
    p = ProtocolBuilder("ring_allgather_shared_recv", devices=devices, backend="tpu")
    barrier = p.barrier_semaphore(collective_id=0)
    send_sem = p.semaphore("send_sem", DMA)
    recv_sem = p.semaphore("recv_sem", DMA)  # the bug: shared by every step
    out = p.buffer("out", (devices, 8, 128))
    for d in range(devices):
        t = p.thread(d)
        left, right = (d - 1) % devices, (d + 1) % devices
        t.signal(barrier, device=left)
        t.signal(barrier, device=right)
        t.wait(barrier, 2)
        for step in range(devices - 1):
            slot = (d - step) % devices
            copy = t.dma_start(out.region(slot), out.region(slot), recv_sem=recv_sem,
                               send_sem=send_sem, device=right)
            copy.wait_send()
            copy.wait_recv()
    return p.build()
