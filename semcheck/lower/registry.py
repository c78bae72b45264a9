"""The rule registry: {primitive name: rule}. One small rule per primitive, grouped by family
in the modules of this package (`tpu.py`, `control.py`, `memory.py`, `arith.py`).

A rule is `rule(thread, eqn, inputs) -> list of output Values` (see values.py); it may emit
IR instructions through `thread.emitter`. Primitives without a rule are folded with JAX
when their inputs are known, and otherwise become opaque data (interpreter.py).
"""

from __future__ import annotations

from typing import Callable

RULES: dict[str, Callable] = {}

# Where a backend gives a primitive other semantics (Mosaic GPU's semaphore_signal reaches
# blocks, not cores), its rule overrides the shared one for that backend's kernels only.
BACKEND_RULES: dict[str, dict[str, Callable]] = {}


def rule(*names: str, backend: str | None = None):
    table = RULES if backend is None else BACKEND_RULES.setdefault(backend, {})

    def register(fn):
        for name in names:
            if name in table:
                raise ValueError(f"two lowering rules for primitive {name!r}")
            table[name] = fn
        return fn

    return register


def lookup(name: str, backend: str) -> Callable | None:
    return BACKEND_RULES.get(backend, {}).get(name) or RULES.get(name)
