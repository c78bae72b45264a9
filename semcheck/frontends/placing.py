"""A kernel's operand placed, element by element, from one earlier kernel's output.

A script often puts element-placing operations between two kernels: it slices a metadata
kernel's output into per-device tables, reshapes or transposes it, pads it with constants,
widens its integers, adds an offset or clips it. The capture replaced that output with zeros,
so such an operand is withheld (frontends/provenance.py); semcheck's lowering of the earlier
kernel may know the output's elements, though (lower/produced.py). Where every op between the
output and the operand either places elements (each element of its result is one element of
its operands, or of a constant) or computes it from known places of its operands (integer
elementwise arithmetic, comparisons, `select`; integer sums, products, maxima and minima,
whole or over windows, as `jnp.cumsum`), the operand's elements are known exactly where all
the elements they came from are: the same ops applied to the output's values, and to its
mask of known elements as each op's `Known` says, give the operand's (`Placement.apply`).

`place_operand` follows the operand's value back through the program (one MLIR module, as
the capture lowered it) to one kernel output, with constants beside it, and into the private
functions the program calls (`jnp.clip`, `jnp.where` are such calls). Each StableHLO op it may
pass has a rule (`_RULES`, one small function each) that reads the op's attributes into the
JAX operation computing it (`jax.lax`, applied to numpy arrays: semcheck does not reimplement
a primitive). Arithmetic is followed on integers only, which every backend computes alike; a
float result may round differently on the chip. Any other op (float arithmetic, a sort, an
argmax), a gather or a dynamic slice at run-time indices, a value from outside the program
or from a second output stops the walk (`Stop`): the operand stays withheld, and its
note names the op and its line.
"""

from __future__ import annotations

import enum
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


class Known(enum.Enum):
    """Where an op's result is known, from where its operands are."""

    PLACED = "placed"  # each element is one element of an operand: the same op on the masks
    ELEMENTWISE = "elementwise"  # each element from the elements at its place in every operand
    REDUCED = "reduced"  # each element from a window (or the whole) of the operand: known where all of it is


@record(frozen=True, eq=False)
class Placing:
    """One op the operand's elements pass through: `lax` (a `jax.lax` function) with
    `params` computes its result from its operands' arrays. For an op that places elements,
    the same operation on their masks of known elements says which elements of the result
    came from known ones; `known` says how an op that computes its elements decides it.
    `round_trip`: the op converts each element to another type, and an element stays known
    only where converting it back gives the element it came from (its value is kept).
    `variadic`: `lax` takes the operands as one sequence (`lax.concatenate`)."""

    op: str
    loc: ir.Loc | None
    operands: tuple  # of Output, Constant or Placing
    lax: str
    params: dict
    round_trip: bool = False
    variadic: bool = False
    known: Known = Known.PLACED


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

    def steps(self) -> tuple[ir.ComputedBy, ...]:
        """The ops between the output and the operand, each with its line, output first."""
        out: list[ir.ComputedBy] = []

        def walk(node) -> None:
            if isinstance(node, Placing):
                for operand in node.operands:
                    walk(operand)
                out.append(ir.ComputedBy(node.op, node.loc))

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
    if node.known is Known.ELEMENTWISE:  # operands of rank 0 (a clamp's bounds) stand for every place
        return result, np.logical_and.reduce([np.broadcast_to(m, result.shape) for m in masks])
    if node.known is Known.REDUCED:  # the same windows of the mask, each reduced by `and`; padding is known
        from jax import lax

        params = {**node.params, "computation": lax.bitwise_and}
        return result, _lax(Placing(node.op, node.loc, (), node.lax, params), (masks[0], np.bool_(True)))
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


Rule = Callable[[object, str, ir.Loc | None, tuple], "Placing | Stop"]  # (op, its name as said, line, operands)


def _ints(op, name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in op.attributes[name])


def _result_shape(op) -> tuple[int, ...]:
    return tuple(int(d) for d in op.results[0].type.shape)


def _slice(op, name, loc, operands) -> Placing | Stop:
    return Placing(name, loc, operands[:1], "slice", {
        "start_indices": _ints(op, "start_indices"), "limit_indices": _ints(op, "limit_indices"),
        "strides": _ints(op, "strides")})


def _reshape(op, name, loc, operands) -> Placing | Stop:
    return Placing(name, loc, operands[:1], "reshape", {"new_sizes": _result_shape(op)})


def _transpose(op, name, loc, operands) -> Placing | Stop:
    return Placing(name, loc, operands[:1], "transpose", {"permutation": _ints(op, "permutation")})


def _reverse(op, name, loc, operands) -> Placing | Stop:
    return Placing(name, loc, operands[:1], "rev", {"dimensions": _ints(op, "dimensions")})


def _broadcast_in_dim(op, name, loc, operands) -> Placing | Stop:
    return Placing(name, loc, operands[:1], "broadcast_in_dim", {
        "shape": _result_shape(op), "broadcast_dimensions": _ints(op, "broadcast_dimensions")})


def _concatenate(op, name, loc, operands) -> Placing | Stop:
    return Placing(name, loc, operands, "concatenate", {"dimension": int(op.attributes["dimension"].value)},
                   variadic=True)


def _convert(op, name, loc, operands) -> Placing | Stop:
    source, target = _element_dtype(op.operands[0].type), _element_dtype(op.results[0].type)
    if not (_integer(source) and _integer(target)):
        return Stop(name, loc, f"converts {source} to {target}, which may change its values")
    return Placing(name, loc, operands[:1], "convert_element_type", {"new_dtype": target}, round_trip=True)


def _dynamic_slice(op, name, loc, operands) -> Placing | Stop:
    starts = operands[1:]
    if not all(isinstance(s, Constant) for s in starts):
        return Stop(name, loc, "starts at an index that is not a constant of the program")
    return Placing(name, loc, operands[:1], "dynamic_slice", {
        "start_indices": tuple(int(s.value) for s in starts), "slice_sizes": _ints(op, "slice_sizes")})


def _elementwise(lax: str) -> Rule:
    """The rule of an integer elementwise op that `jax.lax.<lax>` computes."""

    def rule(op, name, loc, operands) -> Placing | Stop:
        return _on_integers(op, name, loc) or Placing(name, loc, operands, lax, {}, known=Known.ELEMENTWISE)

    return rule


def _compare(op, name, loc, operands) -> Placing | Stop:
    from semcheck.jax_compat import jax_internal

    direction = jax_internal("hlo").ComparisonDirectionAttr(op.attributes["comparison_direction"]).value
    return _on_integers(op, name, loc) or Placing(name, loc, operands, direction.lower(), {}, known=Known.ELEMENTWISE)


def _on_integers(op, name: str, loc) -> Stop | None:
    """Why semcheck does not follow `op`'s arithmetic (None: all its operands and its result
    hold integers or booleans, which every backend computes alike)."""
    for value in (*op.operands, *op.results):
        dtype = _element_dtype(value.type)
        if not _integer(dtype):
            return Stop(name, loc, f"computes on {dtype or value.type} elements: semcheck follows only integer "
                                      "arithmetic, which a TPU computes as the CPU does")
    return None


def _reduce(op, name, loc, operands) -> Placing | Stop:
    computation = _computation(op)
    if isinstance(computation, str):
        return Stop(name, loc, computation)
    return _on_integers(op, name, loc) or Placing(name, loc, operands, "reduce", {
        "computation": computation, "dimensions": _ints(op, "dimensions")}, known=Known.REDUCED)


def _reduce_window(op, name, loc, operands) -> Placing | Stop:
    computation = _computation(op)
    if isinstance(computation, str):
        return Stop(name, loc, computation)
    padding = np.array(op.attributes["padding"]) if "padding" in op.attributes else None
    rank = len(op.operands[0].type.shape)

    def ints(attribute: str) -> tuple[int, ...]:
        return _ints(op, attribute) if attribute in op.attributes else (1,) * rank

    return _on_integers(op, name, loc) or Placing(name, loc, operands, "reduce_window", {
        "computation": computation, "window_dimensions": ints("window_dimensions"),
        "window_strides": ints("window_strides"), "base_dilation": ints("base_dilations"),
        "window_dilation": ints("window_dilations"),
        "padding": tuple((int(lo), int(hi)) for lo, hi in padding) if padding is not None else ((0, 0),) * rank,
    }, known=Known.REDUCED)


def _computation(op):
    """The `jax.lax` function a reduction's body applies (a `str`: why it is none semcheck
    reads: a body of more than one op, or reducing several operands at once, as an argmax)."""
    from jax import lax

    body = op.regions[0].blocks[0]
    inner = [o.operation for o in body.operations]
    if len(op.results) != 1 or len(inner) != 2 or inner[0].name.removeprefix("stablehlo.") not in _REDUCERS \
            or [getattr(v, "arg_number", None) for v in inner[0].operands] not in ([0, 1], [1, 0]):
        return "reduces with a body that is not one add, multiply, maximum, minimum, and, or"
    return getattr(lax, _REDUCERS[inner[0].name.removeprefix("stablehlo.")])


_REDUCERS = {"add": "add", "multiply": "mul", "maximum": "max", "minimum": "min", "and": "bitwise_and",
             "or": "bitwise_or"}


def _gather(op, name, loc, operands) -> Placing | Stop:
    from jax import lax

    from semcheck.jax_compat import jax_internal

    if not isinstance(operands[1], Constant):
        return Stop(name, loc, "gathers at indices that are not constants of the program")
    numbers = jax_internal("hlo").GatherDimensionNumbers(op.attributes["dimension_numbers"])
    if numbers.index_vector_dim != len(op.operands[1].type.shape) - 1:
        return Stop(name, loc, "holds its indices in a dimension other than the last, which semcheck does not read")
    dimension_numbers = lax.GatherDimensionNumbers(
        offset_dims=tuple(numbers.offset_dims), collapsed_slice_dims=tuple(numbers.collapsed_slice_dims),
        start_index_map=tuple(numbers.start_index_map), operand_batching_dims=tuple(numbers.operand_batching_dims),
        start_indices_batching_dims=tuple(numbers.start_indices_batching_dims))
    # the op's own clamping of each start into the operand, as XLA's gather does
    return Placing(name, loc, operands[:1], "gather", {
        "start_indices": operands[1].value, "dimension_numbers": dimension_numbers, "slice_sizes": _ints(op, "slice_sizes"),
        "mode": lax.GatherScatterMode.CLIP})


_ARITHMETIC = {
    "add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "remainder": "rem", "maximum": "max",
    "minimum": "min", "negate": "neg", "abs": "abs", "sign": "sign", "and": "bitwise_and", "or": "bitwise_or",
    "xor": "bitwise_xor", "not": "bitwise_not", "shift_left": "shift_left",
    "shift_right_arithmetic": "shift_right_arithmetic", "shift_right_logical": "shift_right_logical",
    "clamp": "clamp", "select": "select",
}

_RULES: dict[str, Rule] = {
    "stablehlo.slice": _slice,
    "stablehlo.reshape": _reshape,
    "stablehlo.transpose": _transpose,
    "stablehlo.reverse": _reverse,
    "stablehlo.broadcast_in_dim": _broadcast_in_dim,
    "stablehlo.concatenate": _concatenate,
    "stablehlo.convert": _convert,
    "stablehlo.dynamic_slice": _dynamic_slice,
    "stablehlo.compare": _compare,
    "stablehlo.gather": _gather,
    "stablehlo.reduce": _reduce,
    "stablehlo.reduce_window": _reduce_window,
    **{f"stablehlo.{op}": _elementwise(lax) for op, lax in _ARITHMETIC.items()},
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
    tree = _follow(value, (), outputs, found, {})
    if isinstance(tree, Stop):
        return tree
    if not found:  # constants only: no kernel output reaches it
        return Stop(None, None, "holds no kernel output")
    (producer, output), = found
    return Placement(producer, output, tree)


def _follow(value, calls: tuple, outputs: dict, found: dict, memo: dict):
    """`value` as a tree of Output, Constant and Placing nodes, or the Stop that ends it.
    `calls`: the `func.call` ops whose functions `value` is in, outermost first. `found`: the
    outputs reached so far."""
    key = (value, calls)
    if key not in memo:
        memo[key] = _node(value, calls, outputs, found, memo)
    return memo[key]


def _node(value, calls: tuple, outputs: dict, found: dict, memo: dict):
    source = outputs.get(value) if not calls else None
    if source is not None:
        found[source] = None
        return Output() if len(found) == 1 else Stop(None, None, "places elements of two kernel outputs")
    op = getattr(value.owner, "operation", None)
    if op is None:  # a block argument: of the function called, or the program's, or a region's
        if calls and value.owner == _body(calls[-1]):
            return _follow(calls[-1].operands[value.arg_number], calls[:-1], outputs, found, memo)
        return Stop(None, None, "places a value from outside the kernels before it (an argument of the program "
                                "or of a region)")
    loc = _op_loc(op) or (_op_loc(calls[0]) if calls else None)  # a called function's ops: at the user's call
    name = f"{op.name} in @{calls[-1].attributes['callee'].value}" if calls else op.name
    if op.name == "stablehlo.constant":
        constant = _constant(op)
        return Constant(constant) if constant is not None else Stop(name, loc, "holds values semcheck does not read")
    if op.name == "stablehlo.iota":
        return _iota(op, name, loc)
    if op.name == "func.call":
        returned = list(_body(op).operations)[-1].operation.operands[value.result_number]
        return _follow(returned, (*calls, op), outputs, found, memo)
    rule = _RULES.get(op.name)
    if rule is None:
        return Stop(name, loc, "is none of the ops semcheck follows elements through (those that place them, "
                               "and integer arithmetic element by element)")
    operands = []
    for operand in op.operands:
        child = _follow(operand, calls, outputs, found, memo)
        if isinstance(child, Stop):
            return Stop(name, loc, child.why) if child.op is None else child  # None: this op took the value
        operands.append(child)
    node = rule(op, name, loc, tuple(operands))
    if isinstance(node, Placing) and all(isinstance(o, Constant) for o in node.operands):
        return Constant(_lax(node, [o.value for o in node.operands]))
    return node


def _body(call):
    """The entry block of the function `call` (a `func.call` op) calls, in its module."""
    from semcheck.jax_compat import jax_internal

    module = call.parent
    while module.name != "builtin.module":
        module = module.parent
    return jax_internal("mlir_ir").SymbolTable(module)[call.attributes["callee"].value].regions[0].blocks[0]


def _iota(op, name: str, loc) -> Constant | Stop:
    from jax import lax

    dtype = _element_dtype(op.results[0].type)
    if dtype is None:
        return Stop(name, loc, "holds values semcheck does not read")
    dimension = int(op.attributes["iota_dimension"].value)
    return Constant(np.asarray(lax.broadcasted_iota(dtype, _result_shape(op), dimension)))


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
