"""A remote signal to device N: `invalid_device_id`.

Each device hands a token to the device on its right with `device_id = d + 1`, forgetting
the `% N` that wraps the ring, so the last device signals device N, which does not exist
(device ids run 0..N-1). On hardware the signal goes to whatever that id names, or faults.
Every other device waits for the token from its left neighbour, which arrives.
"""

# A known bug: `semcheck verify --expectations` counts this verdict as a pass.
# semcheck: expect invalid_device_id

from semcheck.model import ProtocolBuilder


def model(devices: int):
    p = ProtocolBuilder("remote_out_of_range", devices=devices, backend="tpu")
    token = p.semaphore("token")
    for d in range(devices):
        t = p.thread(d)
        if d > 0:
            t.wait(token, 1)
        t.signal(token, device=d + 1)  # the bug: should be (d + 1) % devices
    return p.build()
