"""Ring all-gather where device 0 forgets its barrier signal to its left neighbour:
`unsatisfied_wait`.

The protocol is `ring_allgather` except for one line: device 0 signals only its right
neighbour. Its left neighbour (device N-1) then receives one barrier signal instead of two,
and its `wait(barrier, 2)` can never pass: nothing left in the system will ever add to that
semaphore. Every device that needs a copy from device N-1 blocks behind it, so the report
names device N-1's barrier wait as the root and lists the waits stuck behind it. On
hardware this hangs the pod; JAX's TPU interpreter hangs forever too.
"""

# A known bug: `semcheck verify --expectations` counts this verdict as a pass.
# semcheck: expect unsatisfied_wait

from semcheck.model import DMA, ProtocolBuilder


def model(devices: int):
    p = ProtocolBuilder("ring_allgather_missing_signal", devices=devices, backend="tpu")
    barrier = p.barrier_semaphore(collective_id=0)
    send_sem = p.semaphore("send_sem", DMA)
    recv_sem = p.semaphore("recv_sem", DMA, size=max(devices - 1, 1))  # one per step
    out = p.buffer("out", (devices, 8, 128))
    for d in range(devices):
        t = p.thread(d)
        left, right = (d - 1) % devices, (d + 1) % devices
        if d != 0:  # the bug: device 0 skips this signal
            t.signal(barrier, device=left)
        t.signal(barrier, device=right)
        t.wait(barrier, 2)
        for step in range(devices - 1):
            slot = (d - step) % devices
            copy = t.dma_start(out.region(slot), out.region(slot), recv_sem=recv_sem[step],
                               send_sem=send_sem, device=right)
            copy.wait_send()
            copy.wait_recv()
    return p.build()
