"""lower/folds.py: a kernel's integer folds (and its element-placing ones of any dtype)
evaluated through one JAX program per kernel must give exactly what binding each
primitive alone gives (`interpreter._bind`, JAX's eager evaluation), including XLA's
defined answers where C would trap (division by zero, INT_MIN / -1, shifts past the
width), and every fold batching cannot vouch for (floating-point arithmetic, other input
types, a primitive JAX refuses in the program) must go the eager way."""

from __future__ import annotations

from functools import partial

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from semcheck.lower import folds
from semcheck.lower.interpreter import _bind
from semcheck.lower.values import Known

INT32 = st.one_of(st.sampled_from([0, 1, -1, 2, 31, 32, 33, -2**31, 2**31 - 1]),
                  st.integers(-2**31, 2**31 - 1))


def integer_ops(a, b, c):
    """The scalar arithmetic kernels fold: indices, sizes, comparisons, selections."""
    out = [a + b, a - b, a * b, lax.div(a, b), lax.rem(a, b), lax.max(a, b), lax.min(a, b),
           lax.shift_left(a, b), lax.shift_right_logical(a, b), lax.shift_right_arithmetic(a, b),
           a & b, a | b, a ^ b, ~a, -a, lax.abs(a), lax.sign(a), a == b, a != b, a < b, a <= b,
           lax.clamp(b, a, c), lax.select(a < b, b, c), lax.integer_pow(a, 3), lax.population_count(a),
           lax.clz(a), a.astype(np.int8), a.astype(np.uint32), (a < c).astype(np.int32),
           lax.broadcast_in_dim(a, (3,), ()), lax.iota(np.int32, 4) + c,
           lax.dynamic_slice(lax.iota(np.int32, 8), (b,), (2,))]
    return out


def jaxpr_of(fn, *avals):
    return jax.make_jaxpr(fn)(*avals).jaxpr


INTEGER_JAXPR = jaxpr_of(integer_ops, np.int32(0), np.int32(0), np.int32(0))
BATCH = folds.KernelFolds()
BATCH.scan(INTEGER_JAXPR)


def known_inputs(eqn, env):
    from jax._src import core

    return [Known(np.asarray(a.val, a.aval.dtype)) if isinstance(a, core.Literal) else env[a] for a in eqn.invars]


def same(batched, eager):
    assert isinstance(eager, list), eager
    assert batched is not None
    assert len(batched) == len(eager)
    for x, y in zip(batched, eager):
        assert x.value.dtype == y.value.dtype and x.value.shape == y.value.shape
        assert x.value.tobytes() == y.value.tobytes()


@settings(max_examples=40, deadline=None)
@given(INT32, INT32, INT32)
def test_each_integer_fold_is_the_eager_binds_value(a, b, c):
    env = {v: Known(np.int32(x)) for v, x in zip(INTEGER_JAXPR.invars, (a, b, c))}
    for eqn in INTEGER_JAXPR.eqns:
        inputs = known_inputs(eqn, env)
        eager = _bind(eqn, inputs)
        assert folds.candidate(eqn) is not None, eqn
        same(BATCH.evaluate(eqn, inputs), eager)
        for var, value in zip(eqn.outvars, eager):
            env[var] = value
    assert BATCH.programs == 1  # every slot of the kernel in one program


FLOATS = st.sampled_from([0.0, -0.0, 1.5, np.nan, np.inf, -np.inf, 1e-45, -3.4e38]) | st.floats(width=32)


def float_ops(x, y):
    return [lax.broadcast_in_dim(x, (8, 128), ()), lax.select(x < y, x, y), lax.reshape(x, (1, 1)),
            lax.concatenate([lax.broadcast_in_dim(x, (2,), ()), lax.broadcast_in_dim(y, (3,), ())], 0),
            x * y + x, lax.exp(x)]


FLOAT_JAXPR = jaxpr_of(float_ops, np.float32(0), np.float32(0))


def test_floating_point_arithmetic_is_never_batched_but_placing_elements_is():
    kinds = {eqn.primitive.name: folds.candidate(eqn) is not None for eqn in FLOAT_JAXPR.eqns}
    assert kinds["mul"] is False and kinds["add"] is False and kinds["exp"] is False
    assert kinds["broadcast_in_dim"] and kinds["select_n"] and kinds["reshape"] and kinds["concatenate"]
    assert kinds["lt"] is False  # a comparison of floats computes: it stays eager too


@settings(max_examples=25, deadline=None)
@given(FLOATS, FLOATS)
def test_a_batched_float_fold_places_the_same_bits(x, y):
    batch = _FLOAT_BATCH
    env = {v: Known(np.float32(z)) for v, z in zip(FLOAT_JAXPR.invars, (x, y))}
    for eqn in FLOAT_JAXPR.eqns:
        inputs = known_inputs(eqn, env)
        eager = _bind(eqn, inputs)
        batched = batch.evaluate(eqn, inputs)
        if folds.candidate(eqn) is None:
            assert batched is None
        else:
            same(batched, eager)
        for var, value in zip(eqn.outvars, eager):
            env[var] = value


_FLOAT_BATCH = folds.KernelFolds()
_FLOAT_BATCH.scan(FLOAT_JAXPR)


def test_inputs_of_another_type_than_the_slot_are_bound_alone():
    batch = folds.KernelFolds()
    batch.scan(INTEGER_JAXPR)
    add = INTEGER_JAXPR.eqns[0]
    assert add.primitive.name == "add"
    assert batch.evaluate(add, [Known(np.int64(2)), Known(np.int64(3))]) is None
    assert batch.evaluate(add, [Known(np.array([2, 3], np.int32)), Known(np.int32(3))]) is None
    same(batch.evaluate(add, [Known(np.int32(2)), Known(np.int32(3))]), [Known(np.int32(5))])


def test_an_eqn_of_a_jaxpr_never_scanned_is_bound_alone():
    batch = folds.KernelFolds()
    eqn = INTEGER_JAXPR.eqns[0]
    assert batch.evaluate(eqn, [Known(np.int32(2)), Known(np.int32(3))]) is None
    assert batch.programs == 0


def _refused_primitive():
    """An integer primitive evaluated like JAX's own (apply_primitive) that has no CPU lowering."""
    from jax._src import core, dispatch

    p = core.Primitive("semcheck_test_no_cpu_lowering")
    p.def_impl(partial(dispatch.apply_primitive, p))
    p.def_abstract_eval(lambda x: core.ShapedArray((), np.int32))
    return p


def test_a_slot_jax_refuses_sends_every_fold_of_the_kernel_the_eager_way():
    refused = _refused_primitive()
    jaxpr = jaxpr_of(lambda a, b: [a + b, refused.bind(a)], np.int32(0), np.int32(0))
    batch = folds.KernelFolds()
    batch.scan(jaxpr)
    add, odd = jaxpr.eqns
    assert folds.candidate(odd) is not None
    assert batch.evaluate(add, [Known(np.int32(2)), Known(np.int32(3))]) is None
    assert batch.evaluate(add, [Known(np.int32(4)), Known(np.int32(3))]) is None
    assert batch.programs == 0  # tried once, never again
    assert isinstance(_bind(odd, [Known(np.int32(1))]), str)  # the eager bind says why, as before


def test_a_jaxpr_met_later_adds_its_slots_in_one_more_program():
    batch = folds.KernelFolds()
    first = jaxpr_of(lambda a, b: a + b, np.int32(0), np.int32(0))
    later = jaxpr_of(lambda a, b: a * b, np.int32(0), np.int32(0))
    batch.scan(first)
    same(batch.evaluate(first.eqns[0], [Known(np.int32(2)), Known(np.int32(3))]), [Known(np.int32(5))])
    batch.scan(later)
    same(batch.evaluate(later.eqns[0], [Known(np.int32(2)), Known(np.int32(3))]), [Known(np.int32(6))])
    same(batch.evaluate(first.eqns[0], [Known(np.int32(1)), Known(np.int32(1))]), [Known(np.int32(2))])
    assert batch.programs == 2


@pytest.mark.parametrize("name", ["scan", "cond", "while"])
def test_slots_inside_control_flow_are_found(name):
    def body(a, b):
        if name == "scan":
            return lax.fori_loop(0, 2, lambda i, x: x * b + i, a)
        if name == "cond":
            return lax.cond(a < b, lambda: a - b, lambda: a % b)
        return lax.while_loop(lambda x: x < b, lambda x: x + a, a)

    jaxpr = jaxpr_of(body, np.int32(0), np.int32(0))
    batch = folds.KernelFolds()
    batch.scan(jaxpr)
    inner = [e for e in _all_eqns(jaxpr) if e.primitive.name in ("mul", "sub", "rem", "add")]
    assert inner and all(folds.candidate(e) is not None for e in inner)
    eqn = inner[0]
    inputs = [Known(np.ones(v.aval.shape, v.aval.dtype)) for v in eqn.invars]
    same(batch.evaluate(eqn, inputs), _bind(eqn, inputs))


def _all_eqns(jaxpr):
    from semcheck.lower.jaxprs import subjaxprs

    for eqn in jaxpr.eqns:
        yield eqn
        for inner in subjaxprs(eqn.params):
            yield from _all_eqns(inner)


def test_a_fold_asked_again_with_the_same_inputs_does_not_run_the_program_again():
    """Every device's thread folds the same eqns on mostly the same values: the answer is
    kept by (slot, input bytes), and a different input is still computed."""
    batch = folds.KernelFolds()
    jaxpr = jaxpr_of(lambda a, b: [a + b, a * b], np.int32(0), np.int32(0))
    batch.scan(jaxpr)
    add = jaxpr.eqns[0]
    same(batch.evaluate(add, [Known(np.int32(2)), Known(np.int32(3))]), [Known(np.int32(5))])
    runs = []
    program = batch._program
    batch._program = lambda *args: runs.append(args) or program(*args)
    first = batch.evaluate(add, [Known(np.int32(2)), Known(np.int32(3))])
    same(first, [Known(np.int32(5))])
    assert runs == []
    first[0].value[...] = 7  # the caller's copy: the kept answer stays 5
    same(batch.evaluate(add, [Known(np.int32(2)), Known(np.int32(3))]), [Known(np.int32(5))])
    same(batch.evaluate(add, [Known(np.int32(2)), Known(np.int32(4))]), [Known(np.int32(6))])
    assert len(runs) == 1
