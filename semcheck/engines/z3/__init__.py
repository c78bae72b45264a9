"""The z3 engine: the protocol unrolled (`unroll.py`) and encoded as SMT constraints
(`encoding.py`, `scope.py`, `terms.py`), solved (`engine.py`), and each answer
replayed through the semantics (`guided.py`).
"""
