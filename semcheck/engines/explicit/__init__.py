"""The explicit-state engine: exhaustive search (`search.py`) with partial-order
reduction (`reduction.py`, `independence.py`), symmetry reduction (`symmetry.py`), the
packed state store (`store.py`) and lasso detection for loops that never end (`endless.py`).
"""
