"""`nondec_poll` on TPU without the drain: `semaphore_leftover` (and `not_lowerable`).

The same arrivals and non-decrementing polls as `nondec_poll`, but device 0 never drains
the counter, so it still holds N-1 when the kernel exits. On TPU every scratch semaphore
must be 0 at exit, or the runtime crashes the program when the kernel ends. Besides,
TPU lowering rejects `decrement=False` ("Non-decrementing wait is not supported."), which
semcheck reports as a `not_lowerable` warning while still analyzing the protocol.
"""

# A known bug: `semcheck verify --expectations` counts this verdict as a pass.
# semcheck: expect semaphore_leftover, not_lowerable

from semcheck.model import ProtocolBuilder


def model(devices: int):
    p = ProtocolBuilder("nondec_poll_leak", devices=devices, backend="tpu")
    counter = p.semaphore("counter")
    for d in range(1, devices):
        p.thread(d).signal(counter, device=0)
    poller = p.thread(0)
    for k in range(1, devices):
        poller.wait(counter, k, decrement=False)
    # the bug: no final poller.wait(counter, devices - 1)
    return p.build()
