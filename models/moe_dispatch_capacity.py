"""MoE dispatch sized by a scalar-prefetch operand: `unsatisfied_wait`, but only when an
expert's buffer is exactly full (tokens = CAPACITY).

`tokens` is how many tokens the router sends to each expert in this step: a scalar-prefetch
operand, unknown when the kernel is traced, so the protocol declares it as an input with the
range the router can produce, 0..CAPACITY. After a barrier handshake with both neighbours,
every device copies its routed rows to the expert on its right neighbour with one remote
DMA, skipped when nothing was routed (`pl.when(tokens > 0)`), and waits for the rows its
left neighbour sends it.

The bug is an off-by-one in the sender's clamp: it sends `min(tokens, CAPACITY - 1)` rows
(as if the buffer's last row were reserved), while the receiver expects
`min(tokens, CAPACITY)`. For every tokens < CAPACITY both sides agree and the protocol is
clean; for tokens = CAPACITY the receiver waits for one row more than arrives and hangs.
So the violation exists for exactly one value of the input's range, and the
counterexample carries it: `tokens = 64`. (`--assume tokens=0..63` makes it safe.)

The explicit engine checks the CAPACITY + 1 values one start state at a time; the z3 engine
covers the whole range with one query per question.
"""

# semcheck: expect unsatisfied_wait

from semcheck.ir import BinOp
from semcheck.model import DMA, ProtocolBuilder

CAPACITY = 64  # rows in an expert's receive buffer
ROW_BYTES = 512  # one token: 128 float32


def model(devices: int):
    p = ProtocolBuilder("moe_dispatch_capacity", devices=devices, backend="tpu")
    tokens = p.input("tokens", 0, CAPACITY)  # scalar prefetch: the router's count
    barrier = p.barrier_semaphore(collective_id=0)
    send_sem = p.semaphore("send_sem", DMA)
    recv_sem = p.semaphore("recv_sem", DMA)
    rows = p.buffer("rows", (CAPACITY, 128))
    expert = p.buffer("expert", (CAPACITY, 128))
    sent_rows = BinOp("min", tokens, CAPACITY - 1)  # the bug: should be CAPACITY
    expected_rows = BinOp("min", tokens, CAPACITY)
    for d in range(devices):
        t = p.thread(d)
        left, right = (d - 1) % devices, (d + 1) % devices
        t.signal(barrier, device=left)
        t.signal(barrier, device=right)
        t.wait(barrier, 2)
        with t.when(BinOp("gt", tokens, 0)):
            copy = t.dma_start(rows.whole, expert.whole, recv_sem=recv_sem, send_sem=send_sem,
                               device=right, nbytes=BinOp("mul", sent_rows, ROW_BYTES))
            copy.wait_send()
            t.dma_wait(recv_sem, BinOp("mul", expected_rows, ROW_BYTES), side="recv")
    return p.build()
