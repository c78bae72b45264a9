"""Token passing in the wrong order: `deadlock`.

Each device waits until its right neighbour has passed it a token, and only then passes a
token to its left neighbour. Every device starts by waiting, so device d waits for d+1,
which waits for d+2, ... which waits for d: the blocked waits form a cycle through all N
devices and no schedule can break it. (Passing first and waiting second is the fix.)
"""

# A known bug: `semcheck verify --expectations` counts this verdict as a pass.
# semcheck: expect deadlock

from semcheck.model import ProtocolBuilder


def model(devices: int):
    p = ProtocolBuilder("circular_wait", devices=devices, backend="tpu")
    token = p.semaphore("token")
    for d in range(devices):
        t = p.thread(d)
        t.wait(token, 1)  # the token from the right neighbour
        t.signal(token, device=(d - 1) % devices)  # then pass one to the left
    return p.build()
