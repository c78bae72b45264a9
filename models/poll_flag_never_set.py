"""Polling for more signals than will ever come: `unsatisfied_wait` (a loop that spins for ever).

As in poll_flag.py, each device signals its right neighbour and then spins on
`semaphore_read` of its own flag, but it waits until the flag reads 2, as if both
neighbours signalled it. Only the left one does, so once that signal has landed nothing
can ever change what the loop reads: from then on every schedule keeps spinning. No wait
is blocked, so this is not a stuck state; the explicit engine finds the states from which
no schedule ends and reports the loop's read as an unsatisfied wait, with a trace into the
loop and one turn of it.
"""

# semcheck: expect unsatisfied_wait

from semcheck.ir import BinOp
from semcheck.model import ProtocolBuilder


def model(devices: int):
    p = ProtocolBuilder("poll_flag_never_set", devices=devices, backend="tpu")
    flag = p.semaphore("flag")
    for d in range(devices):
        t = p.thread(d)
        t.signal(flag, device=(d + 1) % devices)
        spin = t.label()
        seen = t.read(flag)  # <- unsatisfied_wait
        t.branch(BinOp("lt", seen, 2), spin)  # only one neighbour signals: never 2
        t.wait(flag, 2)
    return p.build()
