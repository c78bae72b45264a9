"""Ring exchange that waits to receive before it sends: `deadlock`.

Each device first does the barrier handshake with both neighbours (as `ring_allgather`
does), then waits for its left neighbour's block to land on its receive semaphore, and
only then starts its own copy to the right neighbour. Every device makes the same choice,
so device d waits for a copy that device d-1 starts only after *its* wait passes: the
blocked receive waits form a cycle through all N devices, and every schedule ends there.
The handshake itself completes, which is why the counterexample is worth drawing: the
barrier signals feed the barrier waits, and then the ring closes on itself. (Starting the
copy before waiting for the neighbour's, as `ring_allgather` does, is the fix.)
"""

# A known bug: `semcheck verify --expectations` counts this verdict as a pass.
# semcheck: expect deadlock

from semcheck.model import DMA, ProtocolBuilder

BLOCK = (8, 128)  # float32: 4096 bytes


def model(devices: int):
    p = ProtocolBuilder("ring_recv_before_send", devices=devices, backend="tpu")
    barrier = p.barrier_semaphore(collective_id=0)
    send_sem = p.semaphore("send_sem", DMA)
    recv_sem = p.semaphore("recv_sem", DMA)
    block = p.buffer("block", BLOCK)
    received = p.buffer("received", BLOCK)
    for d in range(devices):
        t = p.thread(d)
        left, right = (d - 1) % devices, (d + 1) % devices
        t.signal(barrier, device=left)
        t.signal(barrier, device=right)
        t.wait(barrier, 2)
        t.dma_wait(recv_sem, p.nbytes(received.whole), side="recv")  # the bug: waits first
        copy = t.dma_start(block.whole, received.whole, recv_sem=recv_sem, send_sem=send_sem,
                           device=right)
        copy.wait_send()
    return p.build()
