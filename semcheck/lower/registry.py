"""The rule registry: {primitive name: rule}. One small rule per primitive, grouped by family
in the modules of this package (`tpu.py`, `control.py`, `memory.py`, `arith.py`).

A rule is `rule(thread, eqn, inputs) -> list of output Values` (see values.py); it may emit
IR instructions through `thread.emitter`. Primitives without a rule are folded with JAX
when their inputs are known, and otherwise become opaque data (interpreter.py).
"""

from __future__ import annotations

from typing import Callable

RULES: dict[str, Callable] = {}


def rule(*names: str):
    def register(fn):
        for name in names:
            if name in RULES:
                raise ValueError(f"two lowering rules for primitive {name!r}")
            RULES[name] = fn
        return fn

    return register
