"""Run-time integer arithmetic in the IR matches JAX's integer semantics (lax.rem and
lax.div round toward zero, unlike the IR's floor `mod`/`floordiv`), and select/comparisons
fold as they should."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from semcheck import ir
from semcheck.lower.values import select, sym_op, trunc_div, trunc_rem
from semcheck.semantics import apply_op

A, B, P = ir.Reg("a"), ir.Reg("b"), ir.Reg("p")


def evaluate(op: ir.Operand, env: dict[str, int]) -> int:
    if isinstance(op, int):
        return op
    if isinstance(op, ir.Reg):
        return env[op.name]
    return apply_op(op.op, evaluate(op.a, env), evaluate(op.b, env))


ints = st.integers(-1000, 1000)


@given(ints, ints.filter(bool))
def test_remainder_and_division_round_toward_zero_like_lax(a, b):
    env = {"a": a, "b": b}
    assert evaluate(trunc_rem(A, B), env) == int(np.fmod(a, b)) == trunc_rem(a, b)
    assert evaluate(trunc_div(A, B), env) == int(np.trunc(a / b)) == trunc_div(a, b)


@given(st.integers(0, 1), ints, ints)
def test_select_picks_by_a_zero_one_predicate(p, x, y):
    assert evaluate(select(P, x, y), {"p": p}) == (y if p else x)


def test_comparisons_are_not_compared_with_one_again():
    less = sym_op("lt", A, 3)
    assert sym_op("eq", less, 1) is less and sym_op("ge", less, 1) is less and sym_op("ne", less, 0) is less
    assert sym_op("add", A, 0) is A and sym_op("mul", A, 0) == 0 and sym_op("add", 2, 3) == 5
