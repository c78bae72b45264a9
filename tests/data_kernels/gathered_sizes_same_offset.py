"""gathered_sizes.py, but every sender lands at row 0 of device 0's inbox: with 3 or more
devices the copies overlap there (a data race).

Expected verdict: violation (data_race) from 3 devices
"""

import jax

import gathered_sizes

gathered_sizes.SAME_OFFSET = True

if __name__ == "__main__":
    gathered_sizes.run(jax.device_count())
