"""Polling a counter with non-decrementing waits, then draining it (Mosaic GPU): safe.

Every device except device 0 signals a counter on device 0 once. Device 0 watches the
counter grow with non-decrementing waits (`pl.semaphore_wait(sem, k, decrement=False)`
returns once the count is at least k and leaves it unchanged), one per expected arrival,
and finally drains it with one decrementing wait for all N-1 signals.

Why it is safe: arrivals only ever add, so each poll `>= k` passes once k devices have
arrived, in any order; the final drain takes exactly what was added. (On GPU a non-zero
count at exit would also be fine: GMEM semaphores are zero-filled per launch.)
"""
# semcheck: expect safe
from semcheck.model import ProtocolBuilder


def model(devices: int):
    p = ProtocolBuilder("nondec_poll", devices=devices, backend="gpu")
    counter = p.semaphore("counter")
    for d in range(1, devices):
        p.thread(d).signal(counter, device=0)
    poller = p.thread(0)
    for k in range(1, devices):
        poller.wait(counter, k, decrement=False)  # "at least k have arrived"
    poller.wait(counter, devices - 1)  # drain
    return p.build()
