"""Running checks: one protocol or one file (`checks.py`), a sweep of (file, device count)
tasks here, on a pool or on Ray (`tasks.py`, `sweep.py`, `sweep_ray.py`), the result of a
kernel whose lowering stopped (`prefix.py`), notes on values taken from data
(`provenance.py`), and the verdicts a project declares (`expectations.py`)."""
