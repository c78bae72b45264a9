"""A kernel's operand placed, element by element, from one earlier kernel's output.

A script often puts element-placing operations between two kernels: it slices a metadata
kernel's output into per-device tables, reshapes or transposes it, pads it with constants,
widens its integers. The capture replaced that output with zeros, so such an operand is
withheld (frontends/provenance.py); semcheck's lowering of the earlier kernel may know the
output's elements, though (lower/produced.py). Where every op between the output and the
operand only places elements (each element of its result is one element of its operands,
or of a constant), the operand's elements are known exactly where the elements they came
from are: the same ops applied to the output's values and to its mask of known elements
give the operand's (`Placement.apply`).

`place_operand` follows the operand's value back through the program (one MLIR module, as
the capture lowered it) to one kernel output, with constants beside it. Each StableHLO op
it may pass has a rule (`_RULES`, one small function each) that reads the op's attributes
into the JAX operation computing it (`jax.lax`, applied to numpy arrays: semcheck does not
reimplement a primitive). Any other op (arithmetic, a gather at run-time indices, a
reduction), a dynamic slice at run-time starts, a value from outside the program or from a
second output stops the walk (`Stop`): the operand stays withheld, and its note names the
op and its line.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np

from semcheck import ir
from semcheck.records import record


@record(frozen=True, eq=False)
class Output:
    """The kernel output the operand is placed from."""


@record(frozen=True, eq=False)
class Constant:
    """A value the program holds as a constant: every element known."""

    value: np.ndarray


@record(frozen=True, eq=False)
class Placing:
    """One element-placing op: `lax` (a `jax.lax` function) with `params` computes its result
    from its operands' arrays, and the same operation on their masks of known elements says
    which elements of the result came from known ones. `round_trip`: the op converts each
    element to another type, and an element stays known only where converting it back gives
    the element it came from (its value is kept). `variadic`: `lax` takes the operands as one
    sequence (`lax.concatenate`)."""

    op: str
    loc: ir.Loc | None
    operands: tuple  # of Output, Constant or Placing
    lax: str
    params: dict
    round_trip: bool = False
    variadic: bool = False

    def where(self) -> str:
        return f"{self.op} at {self.loc}" if self.loc is not None else self.op


@record(frozen=True)
class Stop:
    """Why an operand is not placed from the output: the op that computes it otherwise, or
    that takes a value that is neither the output nor a constant (`op` None: the operand is
    such a value itself, or the op taking it is yet to be named)."""

    op: str | None
    loc: ir.Loc | None
    why: str

    def sentence(self) -> str:
        if self.op is None:
            return f"it {self.why}"
        return f"{self.op}{f' at {self.loc}' if self.loc is not None else ''} {self.why}"


@record(frozen=True, eq=False)
class Placement:
    """Operand placed from output `output` of the kernel at place `producer` in the capture
    order, by `tree` (the output itself, when nothing is between them)."""

    producer: int
    output: int
    tree: object  # Output or Placing

    def ops(self) -> tuple[str, ...]:
        """The ops between the output and the operand, each with its line, output first."""
        out: list[str] = []

        def walk(node) -> None:
            if isinstance(node, Placing):
                for operand in node.operands:
                    walk(operand)
                out.append(node.where())

        walk(self.tree)
        return tuple(dict.fromkeys(out))

    def apply(self, elements):
        """The operand's KnownElements from the output's (lower/produced.py)."""
        from semcheck.lower.produced import KnownElements

        value, known = _evaluate(self.tree, elements.value, elements.known)
        return KnownElements(value, known)


def _evaluate(node, value: np.ndarray, known: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`node`'s values and mask of known elements, from the output's."""
    if isinstance(node, Output):
        return value, np.asarray(known, bool)
    if isinstance(node, Constant):
        return node.value, np.ones(node.value.shape, bool)
    assert isinstance(node, Placing)
    values, masks = zip(*(_evaluate(o, value, known) for o in node.operands))
    result = _lax(node, values)
    if node.round_trip:  # known where converting back gives the element it came from
        back = _lax(Placing(node.op, node.loc, (), node.lax, {"new_dtype": values[0].dtype}), (result,))
        return result, masks[0] & (back == values[0])
    return result, _lax(node, masks).astype(bool)


def _lax(node: Placing, arrays) -> np.ndarray:
    """`node`'s `jax.lax` operation on numpy arrays, as numpy."""
    from jax import lax

    operation = getattr(lax, node.lax)
    return np.asarray(operation(list(arrays), **node.params) if node.variadic else operation(*arrays, **node.params))


# --- the rules: StableHLO op -> the JAX operation computing it ---------------------------------


Rule = Callable[[object, ir.Loc | None, tuple], "Placing | Stop"]


def _ints(op, name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in op.attributes[name])


def _result_shape(op) -> tuple[int, ...]:
    return tuple(int(d) for d in op.results[0].type.shape)


def _slice(op, loc, operands) -> Placing | Stop:
    return Placing(op.name, loc, operands[:1], "slice", {
        "start_indices": _ints(op, "start_indices"), "limit_indices": _ints(op, "limit_indices"),
        "strides": _ints(op, "strides")})


def _reshape(op, loc, operands) -> Placing | Stop:
    return Placing(op.name, loc, operands[:1], "reshape", {"new_sizes": _result_shape(op)})


def _transpose(op, loc, operands) -> Placing | Stop:
    return Placing(op.name, loc, operands[:1], "transpose", {"permutation": _ints(op, "permutation")})


def _broadcast_in_dim(op, loc, operands) -> Placing | Stop:
    return Placing(op.name, loc, operands[:1], "broadcast_in_dim", {
        "shape": _result_shape(op), "broadcast_dimensions": _ints(op, "broadcast_dimensions")})


def _concatenate(op, loc, operands) -> Placing | Stop:
    return Placing(op.name, loc, operands, "concatenate", {"dimension": int(op.attributes["dimension"].value)},
                   variadic=True)


def _convert(op, loc, operands) -> Placing | Stop:
    source, target = _element_dtype(op.operands[0].type), _element_dtype(op.results[0].type)
    if not (_integer(source) and _integer(target)):
        return Stop(op.name, loc, f"converts {source} to {target}, which may change its values")
    return Placing(op.name, loc, operands[:1], "convert_element_type", {"new_dtype": target}, round_trip=True)


def _dynamic_slice(op, loc, operands) -> Placing | Stop:
    starts = operands[1:]
    if not all(isinstance(s, Constant) for s in starts):
        return Stop(op.name, loc, "starts at an index that is not a constant of the program")
    return Placing(op.name, loc, operands[:1], "dynamic_slice", {
        "start_indices": tuple(int(s.value) for s in starts), "slice_sizes": _ints(op, "slice_sizes")})


_RULES: dict[str, Rule] = {
    "stablehlo.slice": _slice,
    "stablehlo.reshape": _reshape,
    "stablehlo.transpose": _transpose,
    "stablehlo.broadcast_in_dim": _broadcast_in_dim,
    "stablehlo.concatenate": _concatenate,
    "stablehlo.convert": _convert,
    "stablehlo.dynamic_slice": _dynamic_slice,
}


def _integer(dtype) -> bool:
    return dtype is not None and (np.issubdtype(dtype, np.integer) or dtype == np.bool_)


_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
           "float32", "float64")


def _element_dtype(tensor_type):
    """The numpy dtype of a tensor type's elements, as JAX's lowering maps dtypes to MLIR
    types (None: none of `_DTYPES`)."""
    import jax.numpy as jnp

    from semcheck.jax_compat import jax_internal

    mlir = jax_internal("mlir")
    element = tensor_type.element_type
    with element.context:
        for name in _DTYPES:
            dtype = np.dtype(getattr(jnp, name))
            if mlir.dtype_to_ir_type(dtype) == element:
                return dtype
    return None


# --- the walk ------------------------------------------------------------------------------------


def place_operand(value, outputs: dict) -> Placement | Stop:
    """How `value` (an MLIR value: a kernel's operand) is placed from one kernel output
    (`outputs`: MLIR value -> (place of its kernel in the capture order, output index)), or
    why it is not."""
    found: dict = {}
    tree = _follow(value, outputs, found, {})
    if isinstance(tree, Stop):
        return tree
    if not found:  # constants only: no kernel output reaches it
        return Stop(None, None, "holds no kernel output")
    (producer, output), = found
    return Placement(producer, output, tree)


def _follow(value, outputs: dict, found: dict, memo: dict):
    """`value` as a tree of Output, Constant and Placing nodes, or the Stop that ends it.
    `found`: the outputs reached so far."""
    key = value
    if key in memo:
        return memo[key]
    node: Output | Constant | Placing | Stop
    source = outputs.get(value)
    if source is not None:
        found[source] = None
        node = Output() if len(found) == 1 else Stop(None, None, "places elements of two kernel outputs")
        memo[key] = node
        return node
    owner = value.owner
    op = getattr(owner, "operation", None)
    if op is None:  # a block argument: the program's, or a region's
        node = Stop(None, None, "places a value from outside the kernels before it (an argument of the program "
                                "or of a region)")
        memo[key] = node
        return node
    loc = _op_loc(op)
    if op.name == "stablehlo.constant":
        constant = _constant(op)
        node = Constant(constant) if constant is not None else Stop(op.name, loc, "holds values semcheck does not read")
        memo[key] = node
        return node
    rule = _RULES.get(op.name)
    if rule is None:
        why = (f"calls @{op.attributes['callee'].value}, a function semcheck does not follow an operand's elements "
               "through" if op.name == "func.call" else "computes its elements rather than placing them")
        node = Stop(op.name, loc, why)
        memo[key] = node
        return node
    operands = []
    for operand in op.operands:
        child = _follow(operand, outputs, found, memo)
        if isinstance(child, Stop):
            if child.op is None:  # the op that took the value is this one
                child = Stop(op.name, loc, child.why)
            memo[key] = child
            return child
        operands.append(child)
    node = rule(op, loc, tuple(operands))
    if isinstance(node, Placing) and all(isinstance(o, Constant) for o in node.operands):
        node = Constant(_lax(node, [o.value for o in node.operands]))
    memo[key] = node
    return node


def _constant(op) -> np.ndarray | None:
    attr = op.attributes["value"]
    dtype = _element_dtype(op.results[0].type)
    if dtype is None:
        return None
    shape = _result_shape(op)
    if getattr(attr, "is_splat", False):
        return np.full(shape, np.asarray(attr.get_splat_value().value), dtype)
    return np.asarray(np.array(attr), dtype).reshape(shape)


# MLIR's printed location of an op: JAX names each op's location by its primitive and nests
# the Python frames, `"file":line:col`, inside (mlir._source_info_to_location); this jaxlib's
# bindings have no accessor for a file location, so its printed form is read.
_FILE_LINE = re.compile(r'"([^"]+)":(\d+):\d+')


def _op_loc(op) -> ir.Loc | None:
    """The innermost user line of an op's location (None where it has none)."""
    import os

    from semcheck.lower.source import is_user_file

    for file, line in _FILE_LINE.findall(str(op.location)):
        if is_user_file(file):
            return ir.Loc(os.path.abspath(file), int(line))
    return None
