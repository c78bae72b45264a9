"""The variables of one encoded execution (encoding.py): an instruction occurrence's
(`NodeVars`), a copy side's completion (`Completion`), a change to a semaphore count
(`Change`), where a semaphore reference lands (`Target`) and what an access touches
(`SymAccess`), with the small functions over them that the encoding, its hazards and the
decoding of a model share."""

from __future__ import annotations

from dataclasses import field
from fractions import Fraction

import z3

from semcheck.engines.z3 import unroll as unrolling
from semcheck.ir import DmaSide
from semcheck.engines.z3.terms import AND, GE, ITE, LT, NOT, OR, SymBool, SymInt, apply, is_const
from semcheck.records import record


@record
class SymAccess:
    """`semantics.Access` with symbolic parts: the buffer instance is one of `candidates`
    (each with the condition under which it is the one)."""

    write: bool
    candidates: list[tuple[int, SymBool]]
    starts: tuple[SymInt, ...]
    sizes: tuple[SymInt, ...]


@record
class Target:
    """Where a semaphore reference lands: candidate instances, each with the condition under
    which it is the one, and the condition of each fault kind."""

    candidates: list[tuple[int, SymBool]]
    faults: dict[str, SymBool]

    @property
    def valid(self) -> SymBool:
        return AND(*(NOT(f) for f in self.faults.values()))


@record(eq=False)
class NodeVars:
    t: int
    node: unrolling.Node
    reach: SymBool = False
    fires: SymBool = False
    pos: z3.ArithRef | None = None
    valid: SymBool = True
    faults: dict[str, SymBool] = field(default_factory=dict)
    regs_out: dict[str, SymInt] = field(default_factory=dict)
    taken: dict[tuple[int, int], SymBool] = field(default_factory=dict)  # successor key -> guard
    target: Target | None = None  # the semaphore a wait, read or signal names
    need: SymInt | None = None  # what a wait needs
    read_value: z3.ArithRef | None = None
    regs_in: dict[str, SymInt] = field(default_factory=dict)
    completions: dict[DmaSide, "Completion"] = field(default_factory=dict)  # side -> its completion
    accesses: list[SymAccess] = field(default_factory=list)  # what a load, store or copy touches
    resets: dict[int, z3.ArithRef] = field(default_factory=dict)  # entry: sid -> -(count before)
    # entry: sid -> count before, of a semaphore the entry keeps (not checked at exit)
    held: dict[int, z3.ArithRef] = field(default_factory=dict)

    _done: SymBool | None = None
    _final: SymBool | None = None

    @property
    def done(self) -> SymBool:
        """Executed without fault."""
        if self._done is None:
            self._done = AND(self.fires, self.valid)
        return self._done

    @property
    def final(self) -> SymBool:
        """The thread stops here: reached, not executed."""
        if self._final is None:
            self._final = AND(self.reach, NOT(self.fires))
        return self._final


@record(eq=False)
class Change:
    """An event that may add to (or take from) a semaphore count."""

    thread: int  # the thread that executes it, or that started the DMA
    done: SymBool
    candidates: list[tuple[int, SymBool]]
    delta: SymInt
    pos: z3.ArithRef
    node: NodeVars  # the executing occurrence, or the DMA start for a completion
    completion: "Completion | None" = None


@record(eq=False)
class Completion:
    start: NodeVars
    side: DmaSide
    done: z3.BoolRef
    pos: z3.ArithRef
    change: Change | None = None
    empty: SymBool = False  # the copy moves 0 bytes: this side completes as it starts


def overlap(a: SymAccess, b: SymAccess) -> SymBool:
    """`semantics.overlap` of two symbolic accesses."""
    options = []
    for bid_a, cond_a in a.candidates:
        for bid_b, cond_b in b.candidates:
            if bid_a != bid_b:
                continue
            nonempty = [GE(size, 1) for size in a.sizes + b.sizes]
            if len(a.starts) != len(b.starts):
                options.append(AND(cond_a, cond_b, *nonempty))
                continue
            options.append(AND(cond_a, cond_b, *nonempty, *(
                AND(LT(sa, apply("add", sb, zb)), LT(sb, apply("add", sa, za)))
                for sa, za, sb, zb in zip(a.starts, a.sizes, b.starts, b.sizes)
            )))
    return OR(*options)


def position_var(name: str) -> z3.ArithRef:
    """Positions only need a total order, so they are rationals: linear real arithmetic is
    cheaper for the solver than integers, and between two positions there is always room."""
    return z3.Real(name)


def position_of(model: z3.ModelRef, pos: z3.ArithRef):
    value = model.eval(pos, model_completion=True)
    return Fraction(value.numerator_as_long(), value.denominator_as_long())


def positive_part(x: SymInt) -> SymInt:
    return max(x, 0) if is_const(x) else ITE(x > 0, x, 0)


def negative_part(x: SymInt) -> SymInt:
    return min(x, 0) if is_const(x) else ITE(x < 0, x, 0)


def negate(x: SymInt) -> SymInt:
    return -x


def named(nv: NodeVars) -> Target:
    """The semaphore a wait, read or signal node names (set when the node was encoded)."""
    assert nv.target is not None, "a node that names no semaphore"
    return nv.target


def event_of(change: Change) -> "NodeVars | Completion":
    """The event that makes `change`: its completion, or the occurrence that executes it."""
    return change.completion if change.completion is not None else change.node


def change_of(c: Completion) -> Change:
    """What a completion adds (set once its start was encoded)."""
    assert c.change is not None, "a completion whose start was not encoded"
    return c.change


def same(a: SymInt, b: SymInt) -> bool:
    if is_const(a) or is_const(b):
        return is_const(a) and is_const(b) and a == b
    return isinstance(a, z3.ExprRef) and a.eq(b)


def holds(model: z3.ModelRef, x: SymBool) -> bool:
    if isinstance(x, bool):
        return x
    return z3.is_true(model.eval(x, model_completion=True))


def int_value(model: z3.ModelRef, x: SymInt) -> int:
    if is_const(x):
        return int(x)
    return model.eval(x, model_completion=True).as_long()
