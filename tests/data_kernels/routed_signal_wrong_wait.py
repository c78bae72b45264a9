"""routed_signal.py, but every device waits on the local semaphore its router does not
signal: an unsatisfied wait on every device, found only because the routing is evaluated.

Expected verdict: violation (unsatisfied_wait)
"""

import jax

import routed_signal

routed_signal.BUGGY = True

if __name__ == "__main__":
    routed_signal.run(jax.device_count())
