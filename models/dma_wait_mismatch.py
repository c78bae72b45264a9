"""A DMA waited for with a larger byte count than it carries: `unsatisfied_wait`.

Every device sends one float32[8, 128] block (4096 bytes) to its right neighbour, but the
receiver waits on its receive semaphore as if the block were float32[16, 128] (8192 bytes),
the kind of slip a wrong descriptor shape makes. TPU DMA semaphores count bytes, so the
receive semaphore stops at 4096 and the wait for 8192 never passes. The send side matches,
so only the receive waits are stuck.
"""

# A known bug: `semcheck verify --expectations` counts this verdict as a pass.
# semcheck: expect unsatisfied_wait

from semcheck.model import DMA, ProtocolBuilder


def model(devices: int):
    p = ProtocolBuilder("dma_wait_mismatch", devices=devices, backend="tpu")
    send_sem = p.semaphore("send_sem", DMA)
    recv_sem = p.semaphore("recv_sem", DMA)
    src = p.buffer("src", (8, 128))
    dst = p.buffer("dst", (16, 128))
    for d in range(devices):
        t = p.thread(d)
        copy = t.dma_start(src.whole, dst.region(0, size=(8, 128)), recv_sem=recv_sem,
                           send_sem=send_sem, device=(d + 1) % devices)
        copy.wait_send()  # 4096 bytes: fine
        t.dma_wait(recv_sem, p.nbytes(dst.whole), side="recv")  # 8192 bytes: the bug
    return p.build()
