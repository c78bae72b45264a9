"""`nondec_poll` on TPU without the drain: `semaphore_leftover`.

The same arrivals and non-decrementing polls as `nondec_poll`, but device 0 never drains
the counter, so it still holds N-1 when the kernel exits. On TPU every scratch semaphore
must be 0 at exit, or the chip halts the core when the kernel ends.

A model states its own semantics: its waits with `decrement=False` are checked as
non-decrementing, and the result's note says that a TPU kernel written with
`semaphore_wait(decrement=False)` would decrement instead (JAX's Pallas TPU lowering emits
an ordinary wait for it; observed on TPU v5e with JAX 0.10.2). A kernel script is checked
the way the chip runs it (examples/tpu/nondecrementing_poll_leftover.py). This model used
to declare `not_lowerable` too, a warning that claimed TPU lowering rejects the wait; it
does not, so the warning is gone.
"""

# A known bug: `semcheck verify --expectations` counts this verdict as a pass.
# semcheck: expect semaphore_leftover

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
