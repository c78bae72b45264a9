"""Ring all-gather on TPU: safe.

Every device first does a barrier handshake with both neighbours (it signals the barrier
semaphore of its left and of its right neighbour, then waits until both have signalled it),
so no remote copy can land on a device that has not entered the kernel. Then, for N-1 steps,
it copies the slot it received last to its right neighbour with a remote DMA and waits on
both sides of its own copy: `wait_send` (its send semaphore: the data has left) and
`wait_recv` (its receive semaphore: the copy from its left neighbour has landed).

Each step has its own receive semaphore (`recv_sem[step]`, as in JAX's distributed
tutorial), so a wait for step k's bytes can only be satisfied by step k's copy.

Why it is safe: every device's barrier semaphore receives exactly two signals and is waited
for two; every copy adds 4096 bytes to the sender's send semaphore and to the receiver's
step semaphore, and each is waited for exactly 4096 bytes once. A copy from the left
neighbour can land before or after this device's own send completes, and the left
neighbour may run a step ahead, but a device only forwards a slot after waiting for the
copy that filled it, so no schedule blocks, leaves a semaphore non-zero, or reads a slot
while a copy into it is still in flight. (`ring_allgather_shared_recv` shows what goes
wrong with a single receive semaphore.)
"""
# semcheck: expect safe
from semcheck.model import DMA, ProtocolBuilder

BLOCK = (8, 128)  # float32: 4096 bytes per slot


def model(devices: int):
    p = ProtocolBuilder("ring_allgather", devices=devices, backend="tpu")
    barrier = p.barrier_semaphore(collective_id=0)
    send_sem = p.semaphore("send_sem", DMA)
    recv_sem = p.semaphore("recv_sem", DMA, size=max(devices - 1, 1))  # one per step
    out = p.buffer("out", (devices, *BLOCK))
    for d in range(devices):
        t = p.thread(d)
        left, right = (d - 1) % devices, (d + 1) % devices
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
