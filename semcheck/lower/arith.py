"""Rules for index arithmetic: axis_index, program_id, num_programs, and integer operations
on values known only at run time.

When every input is known the generic fold (JAX itself) computes the result. The rules here
only add what JAX cannot do at trace time: carrying a `semaphore_read` value (or a loop
counter of a data-dependent loop) through integer arithmetic as an IR expression, so that
a branch, a wait amount or a device id computed from it stays exact.
"""

from __future__ import annotations

import numpy as np

from semcheck.lower.context import ThreadLowering
from semcheck.lower.interpreter import generic
from semcheck.lower.registry import rule
from semcheck.lower.values import Known, Opaque, RefValue, Sym, known, select, sym_op, trunc_div, trunc_rem

# --- values fixed by the thread and the grid step ------------------------------------------


@rule("axis_index")
def axis_index(t: ThreadLowering, eqn, inputs):
    names = eqn.params["axis_name"]
    if not isinstance(names, tuple):
        names = (names,)
    # A tuple of axes is one linearized axis, major to minor.
    index = 0
    for name in names:
        size = _axis_size(t, eqn, name)
        index = index * size + t.axis_value(name, eqn)
    return [known(np.int32(index))]


def _axis_size(t: ThreadLowering, eqn, name) -> int:
    try:
        return t.axis_size(name)
    except KeyError:
        t.axis_value(name, eqn)  # raises the explanatory error
        raise


@rule("program_id")
def program_id(t: ThreadLowering, eqn, inputs):
    axis = eqn.params["axis"]
    if axis >= len(t.program_ids):
        raise t.error(eqn, f"program_id({axis}) in a kernel whose grid has {len(t.program_ids)} dimension(s)")
    return [known(np.int32(t.program_ids[axis]))]


@rule("num_programs")
def num_programs(t: ThreadLowering, eqn, inputs):
    axis = eqn.params["axis"]
    grid = t.kernel.grid
    if axis >= len(grid):
        raise t.error(eqn, f"num_programs({axis}) in a kernel whose grid has {len(grid)} dimension(s)")
    return [known(np.int32(grid[axis]))]


# --- symbolic integer arithmetic -------------------------------------------------------------


def _symbolic(fn):
    """Wrap a symbolic rule: fold when all inputs are known, go opaque when any is opaque or
    not an integer scalar, else build the IR expression."""

    def lowering_rule(t: ThreadLowering, eqn, inputs):
        if all(isinstance(x, Known) for x in inputs) or any(isinstance(x, RefValue) for x in inputs):
            return generic(t, eqn, inputs)
        out_aval = eqn.outvars[0].aval
        scalar = getattr(out_aval, "shape", None) == () or _size1(out_aval)
        if any(isinstance(x, Opaque) for x in inputs) or not scalar or not _integer(out_aval.dtype):
            return generic(t, eqn, inputs)
        ops = []
        for x in inputs:
            if isinstance(x, Sym):
                ops.append(x.op)
            elif x.value.size == 1 and _integer(x.value.dtype):
                ops.append(int(x.value.reshape(())))
            else:
                return generic(t, eqn, inputs)
        result = fn(eqn, *ops)
        if result is None:
            return generic(t, eqn, inputs)
        return [Sym(result, np.dtype(out_aval.dtype))]

    return lowering_rule


def _size1(aval) -> bool:
    try:
        return int(np.prod(aval.shape)) == 1
    except (TypeError, AttributeError):
        return False


def _integer(dtype) -> bool:
    try:
        d = np.dtype(dtype)
    except TypeError:
        return False
    return np.issubdtype(d, np.integer) or d == np.bool_


def _is_bool(eqn) -> bool:
    return np.dtype(eqn.outvars[0].aval.dtype) == np.bool_


def _binary(op):
    return _symbolic(lambda eqn, a, b: sym_op(op, a, b))


for _name, _op in {
    "add": "add", "sub": "sub", "mul": "mul", "max": "max", "min": "min",
    "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
}.items():
    rule(_name)(_binary(_op))

rule("div")(_symbolic(lambda eqn, a, b: trunc_div(a, b)))
rule("rem")(_symbolic(lambda eqn, a, b: trunc_rem(a, b)))
rule("neg")(_symbolic(lambda eqn, a: sym_op("sub", 0, a)))
rule("abs")(_symbolic(lambda eqn, a: select(sym_op("lt", a, 0), a, sym_op("sub", 0, a))))
rule("clamp")(_symbolic(lambda eqn, lo, x, hi: sym_op("max", sym_op("min", x, hi), lo)))


# Logical operations are only exact on booleans; bitwise ones on integers become opaque.
rule("and")(_symbolic(lambda eqn, a, b: sym_op("and", a, b) if _is_bool(eqn) else None))
rule("or")(_symbolic(lambda eqn, a, b: sym_op("or", a, b) if _is_bool(eqn) else None))
rule("not")(_symbolic(lambda eqn, a: sym_op("eq", a, 0) if _is_bool(eqn) else None))


@rule("select_n")
@_symbolic
def select_n(eqn, which, *cases):
    # which == k picks cases[k]; a boolean predicate picks cases[1] when true.
    result = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        result = select(sym_op("eq", which, k), result, cases[k])
    return result


@rule("convert_element_type")
def convert_element_type(t: ThreadLowering, eqn, inputs):
    [x] = inputs
    if isinstance(x, Sym):
        new = np.dtype(eqn.params["new_dtype"]) if _integer(eqn.params["new_dtype"]) else None
        if new is None:
            return [Opaque(f"a float conversion at {t.loc(eqn)} of a value known only at run time")]
        op = sym_op("ne", x.op, 0) if new == np.bool_ else x.op
        return [Sym(op, new)]
    return generic(t, eqn, inputs)


def _passthrough(t: ThreadLowering, eqn, inputs):
    """Shape-only operations on a scalar, and hints, keep a run-time value as it is."""
    x = inputs[0]
    if isinstance(x, Sym) and _size1(eqn.outvars[0].aval):
        return [x]
    return generic(t, eqn, inputs)


for _name in ("reshape", "squeeze", "broadcast_in_dim", "expand_dims", "copy", "copy_p"):
    rule(_name)(_passthrough)


@rule("optimization_barrier")
def optimization_barrier(t: ThreadLowering, eqn, inputs):
    return list(inputs)


@rule("multiple_of")
def multiple_of(t: ThreadLowering, eqn, inputs):
    return [inputs[0]]

