"""Terms that are either Python constants or Z3 expressions, folded where possible.

Most operands in a protocol are constants; keeping them as Python ints and bools (instead of
Z3 literals) keeps the formulas of straight-line code small. Integer operators follow
`semantics.apply_op` exactly, including Python's floor division and modulo and the
"division by zero gives 0" rule.
"""

from __future__ import annotations

from typing import Union

import z3
from z3.z3types import Ast

from semcheck.ir import apply_op

SymInt = Union[int, z3.ArithRef]
SymBool = Union[bool, z3.BoolRef]

# The connectives below call Z3's C API directly: z3.And/Or/Not/If re-check and coerce every
# argument in Python, which dominated encoding time. Arguments here are already Z3 terms of
# the right sort (constants are folded away first), so the checks buy nothing.
_CTX = z3.main_ctx()


def fresh_context() -> None:
    """Start the next check in a new Z3 context, as in a fresh process. Z3's answers (which
    model, so which counterexample) depend on every term the context has seen before: without
    this, a check's counterexample depended on what the same process had checked earlier,
    so a serial sweep, `-j` workers and Ray workers reported different ones."""
    global _CTX
    z3.z3._main_ctx = None  # z3.main_ctx() makes a new one on its next call
    _CTX = z3.main_ctx()
    _LITERALS.clear()


def _ref():
    return _CTX.ref()


def _array(args):
    arr = (Ast * len(args))()
    for i, a in enumerate(args):
        arr[i] = a.as_ast()
    return arr


_LITERALS: dict[int, z3.ArithRef] = {}


def _int_term(x: SymInt) -> z3.ArithRef:
    if not isinstance(x, int):
        return x
    literal = _LITERALS.get(x)
    if literal is None:
        literal = _LITERALS[x] = z3.IntVal(x)
    return literal


def is_const(x) -> bool:
    return isinstance(x, (bool, int))


def AND(*xs: SymBool) -> SymBool:
    rest = []
    for x in xs:
        if x is False:
            return False
        if x is not True:
            rest.append(x)
    if not rest:
        return True
    if len(rest) == 1:
        return rest[0]
    return z3.BoolRef(z3.Z3_mk_and(_ref(), len(rest), _array(rest)), _CTX)


def OR(*xs: SymBool) -> SymBool:
    rest = []
    for x in xs:
        if x is True:
            return True
        if x is not False:
            rest.append(x)
    if not rest:
        return False
    if len(rest) == 1:
        return rest[0]
    return z3.BoolRef(z3.Z3_mk_or(_ref(), len(rest), _array(rest)), _CTX)


def NOT(x: SymBool) -> SymBool:
    if isinstance(x, bool):
        return not x
    return z3.BoolRef(z3.Z3_mk_not(_ref(), x.as_ast()), _CTX)


def IMPLIES(a: SymBool, b: SymBool) -> SymBool:
    if isinstance(a, bool) or isinstance(b, bool):
        return OR(NOT(a), b)
    return z3.BoolRef(z3.Z3_mk_implies(_ref(), a.as_ast(), b.as_ast()), _CTX)


def ITE(c: SymBool, a: SymInt, b: SymInt) -> SymInt:
    if c is True:
        return a
    if c is False:
        return b
    if is_const(a) and is_const(b) and a == b:
        return a
    a, b = _int_term(a), _int_term(b)
    return z3.ArithRef(z3.Z3_mk_ite(_ref(), c.as_ast(), a.as_ast(), b.as_ast()), _CTX)


def EQ(a: SymInt, b: SymInt) -> SymBool:
    return a == b  # a Python bool for two constants, else a Z3 atom


def LT(a: SymInt, b: SymInt) -> SymBool:
    return a < b


def LE(a: SymInt, b: SymInt) -> SymBool:
    return a <= b


def GE(a: SymInt, b: SymInt) -> SymBool:
    return LE(b, a)


def in_range(x: SymInt, lo: int, hi_exclusive: int) -> SymBool:
    return AND(LE(lo, x), LT(x, hi_exclusive))


def SUM(terms: list[SymInt]) -> SymInt:
    const = sum(t for t in terms if is_const(t))
    sym = [t for t in terms if not is_const(t)]
    if not sym:
        return const
    if const:
        sym.append(_int_term(const))
    if len(sym) == 1:
        return sym[0]
    return z3.ArithRef(z3.Z3_mk_add(_ref(), len(sym), _array(sym)), _CTX)


def truth(x: SymInt) -> SymBool:
    """C-like truth of an integer: non-zero."""
    return x != 0


def _bool_int(c: SymBool) -> SymInt:
    return ITE(c, 1, 0)


def _floordiv(a: SymInt, b: SymInt) -> SymInt:
    if is_const(b):
        if b == 0:
            return 0
        return a / b if b > 0 else (-a) / (-b)  # Z3 `/` on Ints floors for a positive divisor
    return z3.If(b == 0, 0, z3.If(b > 0, a / b, (-a) / (-b)))


def _mod(a: SymInt, b: SymInt) -> SymInt:
    q = _floordiv(a, b)
    if is_const(b) and b == 0:
        return 0
    return ITE(EQ(b, 0), 0, a - b * q)


def apply(op: str, a: SymInt, b: SymInt) -> SymInt:  # noqa: C901
    """`semantics.apply_op` lifted to symbolic operands."""
    if is_const(a) and is_const(b):
        return apply_op(op, int(a), int(b))
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "floordiv":
        return _floordiv(a, b)
    if op == "mod":
        return _mod(a, b)
    if op == "min":
        return ITE(LE(a, b), a, b)
    if op == "max":
        return ITE(LE(a, b), b, a)
    if op == "eq":
        return _bool_int(EQ(a, b))
    if op == "ne":
        return _bool_int(NOT(EQ(a, b)))
    if op == "lt":
        return _bool_int(LT(a, b))
    if op == "le":
        return _bool_int(LE(a, b))
    if op == "gt":
        return _bool_int(LT(b, a))
    if op == "ge":
        return _bool_int(LE(b, a))
    if op == "and":
        return _bool_int(AND(truth(a), truth(b)))
    if op == "or":
        return _bool_int(OR(truth(a), truth(b)))
    raise ValueError(f"unknown operator {op!r}")
