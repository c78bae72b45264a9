"""What a jaxpr variable holds while a kernel is lowered for one thread.

Lowering evaluates the kernel jaxpr once per thread (device, core) and grid step, so most
values are simply known:

* `Known`: a concrete numpy value (axis_index, program_id, loop counters, arithmetic on
  them, literals, and buffer contents the lowering follows: see data.py), with the buffers
  it was computed from.
* `Sym`: an integer scalar known only when the protocol runs (a `semaphore_read`, a loop
  carry in a data-dependent loop); it holds an IR operand over registers.
* `Opaque`: anything semcheck does not track (buffer contents, floats); it remembers why,
  so that if it ever decides a semaphore, a device id or a branch, the error can say
  where precision was lost. `RunTimeElements` is one that indexing can still pick `Sym`
  elements out of (an array loaded from a buffer holding an assumed element).
* `RefValue`: a semaphore or a buffer allocation, plus the ref transforms (`.at[...]`)
  applied so far.

Nothing here knows about primitives; the rules in this package do.
"""

from __future__ import annotations

from typing import Any, Union

import numpy as np

from semcheck import ir
from semcheck.ir import apply_op
from semcheck.records import record


@record(frozen=True)
class DataSource:
    """A buffer a value was read from: `from_script` when its contents there were the
    operand values the script passed (not only what the kernel itself stored)."""

    buffer: str
    from_script: bool


@record(frozen=True, eq=False)
class Known:
    value: np.ndarray
    # The buffers the value was computed from (empty: it follows from axis_index,
    # program_id, loop counters and constants alone, the same for every input).
    sources: frozenset = frozenset()

    @property
    def is_scalar(self) -> bool:
        return self.value.size == 1

    def as_int(self) -> int:
        return int(self.value.reshape(()))


def fill_of(value: "Value") -> ir.Fill | None:
    """The fill a write of `value` makes: one value in every element, computed from none of
    the values the script passed (constants, axis indices, and what the kernel stored of
    those: `DataSource.from_script`), so the same whatever the inputs; None otherwise."""
    if not isinstance(value, Known) or any(s.from_script for s in value.sources) or value.value.size == 0:
        return None
    flat = np.ascontiguousarray(value.value).reshape(-1)
    elements = flat.view(np.uint8).reshape(flat.size, flat.dtype.itemsize)
    if not (elements == elements[0]).all():
        return None
    return ir.Fill(flat.dtype.str, elements[0].tobytes().hex(), repr(flat[0].item()))


@record(frozen=True)
class Sym:
    """An integer (or 0/1 boolean) scalar decided at protocol run time."""

    op: ir.Operand
    dtype: np.dtype


@record(frozen=True)
class Opaque:
    why: str  # e.g. "the value loaded from x_ref at kernel.py:12"


@record(frozen=True, eq=False)
class RunTimeElements(Opaque):
    """An integer array read from a buffer, some of whose elements are known only at run
    time: an element `semcheck.assume` names (its initial value is a protocol input), or a
    register the kernel stored. `value` holds the other elements, `symbolic` maps the flat
    position of each run-time one to its `Sym`.

    It is an `Opaque` on purpose: a rule that does not look inside it treats it as data
    semcheck does not know (`why` says what it holds), which is sound, and never sees the
    placeholders in `value`. Only primitives that move elements without computing on them
    pick elements out of it (`interpreter.pick`)."""

    value: np.ndarray
    symbolic: dict  # flat position -> Sym
    sources: frozenset = frozenset()

    def pick(self, positions: np.ndarray, lost: str) -> Value:
        """The elements at flat `positions` (what a primitive that only moves elements made of
        their positions), or Opaque(lost) when a position is not one of them."""
        flat = positions.ravel()
        if positions.dtype != np.int32 or flat.size and (flat.min() < 0 or flat.max() >= self.value.size):
            return Opaque(lost)
        value = self.value.ravel()[flat].reshape(positions.shape)
        symbolic = {i: self.symbolic[int(p)] for i, p in enumerate(flat) if int(p) in self.symbolic}
        if not symbolic:
            return Known(value, self.sources)
        if positions.shape == ():
            return symbolic[0]
        return RunTimeElements(self.why, value, symbolic, self.sources)


def unknown_data(x: Opaque) -> Opaque:
    """`x` as plain unknown data, for a value that is not `x` itself (one branch's result of
    several, a loop carry on every iteration, a part of `x`, a value handed to another
    thread): it must not keep the elements a `RunTimeElements` holds, which are not its own."""
    return Opaque(x.why) if isinstance(x, RunTimeElements) else x


@record(frozen=True)
class RefValue:
    """A ref: `space` is "semaphore" or the buffer's memory space."""

    alloc: str  # SemDecl or BufferDecl name
    is_semaphore: bool
    shape: tuple[int, ...]  # of the underlying allocation
    dtype: Any
    transforms: tuple = ()  # state transforms (NDIndexer, ...) applied in order


Value = Union[Known, Sym, Opaque, RefValue]


def known(x) -> Known:
    return Known(np.asarray(x))


# --- symbolic integer arithmetic over IR operands, folding what is constant -------------------


_BOOLEAN_OPS = frozenset("eq ne lt le gt ge and or".split())
_IS_TRUE = (("eq", 1), ("ne", 0), ("ge", 1), ("gt", 0))  # of a 0/1 value: the value itself


def sym_op(op: str, a: ir.Operand, b: ir.Operand) -> ir.Operand:
    if isinstance(a, int) and isinstance(b, int):
        return apply_op(op, a, b)  # the one operator table (ir.OPERATORS), so folding cannot differ
    if isinstance(a, ir.BinOp) and a.op in _BOOLEAN_OPS and (op, b) in _IS_TRUE:
        return a  # a comparison is already 0 or 1
    if op == "add" and b == 0 or op == "sub" and b == 0 or op == "mul" and b == 1:
        return a
    if op == "add" and a == 0 or op == "mul" and a == 1:
        return b
    if op == "mul" and (a == 0 or b == 0) or op == "mod" and b in (1, -1):
        return 0
    if op == "floordiv" and b == 1:
        return a
    if op == "and" and (a == 0 or b == 0):
        return 0
    return ir.BinOp(op, a, b)


def trunc_rem(a: ir.Operand, b: ir.Operand) -> ir.Operand:
    """`lax.rem` (C semantics: the sign of the dividend) from the IR's floor `mod`.

    m = a mod b lies in b's sign; when m != 0 and a, b differ in sign, C's remainder is
    m - b.
    """
    if isinstance(a, int) and isinstance(b, int):
        return int(np.fmod(a, b)) if b else 0
    m = sym_op("mod", a, b)
    signs_differ = sym_op("ne", sym_op("lt", a, 0), sym_op("lt", b, 0))
    fix = sym_op("and", sym_op("ne", m, 0), signs_differ)
    return sym_op("sub", m, sym_op("mul", fix, b))


def trunc_div(a: ir.Operand, b: ir.Operand) -> ir.Operand:
    """`lax.div` on integers (rounds toward zero)."""
    if isinstance(a, int) and isinstance(b, int):
        return int(a / b) if b else 0
    return sym_op("floordiv", sym_op("sub", a, trunc_rem(a, b)), b)


def select(pred: ir.Operand, if_false: ir.Operand, if_true: ir.Operand) -> ir.Operand:
    """`pred ? if_true : if_false` for a 0/1 predicate."""
    if isinstance(pred, int):
        return if_true if pred else if_false
    if if_false == if_true:
        return if_true
    return sym_op("add", if_false, sym_op("mul", pred, sym_op("sub", if_true, if_false)))
