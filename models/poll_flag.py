"""Polling a flag with `semaphore_read` in a loop, then consuming it: safe.

Each device signals a flag on its right neighbour, then spins: it reads its own flag until
the read sees the left neighbour's signal, and finally takes it with a decrementing wait
(so the flag is back to 0 at exit, as TPU requires).

Why it is safe: every device signals before it spins, so every flag is eventually set, and
every spin can leave its loop in every schedule; schedules that keep spinning are only the
unfair ones in which the neighbour never gets to run. The z3 engine cannot decide this one:
the loop has no bound it could unroll to, so it answers inconclusive and says why.
"""

# semcheck: expect safe

from semcheck.ir import BinOp
from semcheck.model import ProtocolBuilder


def model(devices: int):
    p = ProtocolBuilder("poll_flag", devices=devices, backend="tpu")
    flag = p.semaphore("flag")
    for d in range(devices):
        t = p.thread(d)
        t.signal(flag, device=(d + 1) % devices)
        spin = t.label()
        seen = t.read(flag)
        t.branch(BinOp("lt", seen, 1), spin)  # while the left neighbour has not signalled
        t.wait(flag, 1)
    return p.build()
