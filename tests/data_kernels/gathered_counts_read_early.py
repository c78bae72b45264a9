"""gathered_counts.py, but device 0 sums the counts before the peers' copies have landed:
a data race on counts_ref (the values that fed the wait may differ between schedules).

Expected verdict: violation (data_race)
"""

import jax

import gathered_counts

gathered_counts.READ_EARLY = True

if __name__ == "__main__":
    gathered_counts.run(jax.device_count())
