"""Bounds of an operand over every input value: interval arithmetic on the IR's operators.

Inputs range over their declared `lo..hi`; registers (a `semaphore_read`, register
arithmetic) are unbounded. Used where the semantics needs a static fact about a value, such
as "this amount is never negative", without enumerating inputs.
"""

from __future__ import annotations

import math
from typing import Callable

from semcheck import ir

INF = math.inf
Interval = tuple[float, float]
UNBOUNDED: Interval = (-INF, INF)


def bounds(op: ir.Operand, reg_bounds: Callable[[str], Interval]) -> Interval:
    """`(lo, hi)` that contains every value `op` can take; `reg_bounds(name)` bounds a
    register or input."""
    if isinstance(op, int):
        return (op, op)
    if isinstance(op, ir.Reg):
        return reg_bounds(op.name)
    a, b = bounds(op.a, reg_bounds), bounds(op.b, reg_bounds)
    rule = _RULES.get(op.op)
    return rule(a, b) if rule else UNBOUNDED


def _mul(a: Interval, b: Interval) -> Interval:
    products = [_times(x, y) for x in a for y in b]
    return (min(products), max(products))


def _times(x: float, y: float) -> float:
    return 0 if x == 0 or y == 0 else x * y  # 0 * inf is 0 here: a zero factor stays zero


def _floordiv(a: Interval, b: Interval) -> Interval:
    if a[0] >= 0 and b[0] > 0:
        return (0, a[1] / b[0] if b[0] else INF)
    return UNBOUNDED  # division by zero gives 0 in the semantics; signs may flip otherwise


def _mod(a: Interval, b: Interval) -> Interval:
    if b[0] > 0:
        return (0, b[1] - 1 if b[1] < INF else INF)
    if b == (0, 0):
        return (0, 0)
    return UNBOUNDED


_BOOL: Interval = (0, 1)

_RULES: dict[str, Callable[[Interval, Interval], Interval]] = {
    "add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
    "sub": lambda a, b: (a[0] - b[1], a[1] - b[0]),
    "mul": _mul,
    "floordiv": _floordiv,
    "mod": _mod,
    "min": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
    "max": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    **{name: (lambda a, b: _BOOL) for name in ("eq", "ne", "lt", "le", "gt", "ge", "and", "or")},
}
