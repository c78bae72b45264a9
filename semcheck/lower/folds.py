"""A kernel's exact folds through one JAX program instead of one program per primitive.

The interpreter folds an eqn whose inputs are known by binding its primitive on them
(`interpreter._bind`, under `ensure_compile_time_eval`): JAX evaluates a primitive eagerly
by compiling a program of that primitive alone (`dispatch.apply_primitive`, jax/_src/dispatch.py,
JAX 0.10.2), a jit trace, a lowering to StableHLO in a fresh MLIR context and a read of
JAX's persistent cache, 5-7 ms of CPU each in a capture child, which starts with none of
them compiled. A TPU example folds about six primitives, so its capture paid about 35 ms
for them (benchmarks/startup.py): 0.58 CPU s of the 1.45 s the 20 TPU examples of its
folder spend lowering at 2 devices; through one program per kernel, 0.19 s.

`KernelFolds` collects, from every jaxpr the kernel's threads evaluate, the eqns that may
be folded on integer values (`candidate`), one slot per distinct (primitive, params, input
types), and has JAX compile one program that binds every slot's primitive on inputs of its
own. A fold of a slot's eqn runs that program with its inputs in the slot and fixed inputs
(ones) in the others, and takes the slot's results. The program is compiled once per
kernel (again only when a jaxpr with new slots comes later, at most `_REBUILDS` times), and
JAX's persistent cache keeps it like any other.

Why the values are those of the eqn bound alone: each slot binds the same primitive with
the same params on inputs of the same dtypes and shapes as the eager bind (inputs of any
other dtype or shape go the eager way), so JAX traces and lowers the same operation; the
program's slots share no value, and every slot is integer or boolean, inputs and results,
where XLA's arithmetic is exact (two's complement; division by zero and the INT_MIN / -1
case are defined, not trapped: the operation semantics of XLA, and the fixed inputs are
ones), or a primitive that only places elements (`_PLACES_ELEMENTS`: a broadcast, a
reshape, a slice, a select), which computes no value of any dtype. So no rewrite XLA may
make of the larger program (fusion, simplification) can give a slot another value. Other
floating-point folds are never batched: a fused program could round differently (XLA's CPU
backend always lets LLVM contract a multiply and an add into an FMA: `AllowFPOpFusion =
Fast` in xla/service/cpu/cpu_compiler.cc, CompilerTargetOptions; and it vectorizes some
functions), so they stay one eager bind each. Only primitives whose eager evaluation is
`apply_primitive` are batched (one with an implementation of its own is bound eagerly).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from semcheck.jax_compat import JaxInternalMissing, jax_internal
from semcheck.lower.jaxprs import has_subjaxprs, subjaxprs
from semcheck.lower.values import Known

# Past this many programs for one kernel (a jaxpr with new slots after the first), folds
# outside the last program are bound one by one again.
_REBUILDS = 3
# Inputs and results larger than this are data: such an eqn is bound alone when folded.
SLOT_LIMIT = 4096


# Primitives that compute no value, only place their operands' elements (or pick between
# them): their results are the same bits in any program, floating-point ones included.
_PLACES_ELEMENTS = frozenset(
    "broadcast_in_dim reshape squeeze expand_dims transpose rev slice dynamic_slice dynamic_update_slice "
    "concatenate select_n copy copy_p".split()
)


def _small_array(aval, any_dtype: bool) -> tuple[tuple[int, ...], np.dtype] | None:
    """(shape, dtype) of an array aval of at most SLOT_LIMIT elements, integer or boolean
    unless `any_dtype`."""
    shape, dtype = getattr(aval, "shape", None), getattr(aval, "dtype", None)
    if shape is None or dtype is None:
        return None
    try:
        dtype = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
    except TypeError:  # an extended dtype (a semaphore, a PRNG key) or a symbolic shape
        return None
    exact = np.issubdtype(dtype, np.integer) or dtype == np.bool_
    if not (exact or (any_dtype and np.issubdtype(dtype, np.number))) or math.prod(shape) > SLOT_LIMIT:
        return None
    return shape, dtype


def _params_key(params: dict):
    try:
        key = tuple(sorted(params.items()))
        hash(key)
    except TypeError:  # an unhashable param: the eqn gets no shared slot
        return None
    return key


def candidate(eqn):
    """The slot key of an eqn that may be folded on integers in a batch, or None."""
    if eqn.effects or has_subjaxprs(eqn.params) or not _evaluated_alone(eqn.primitive):
        return None
    any_dtype = eqn.primitive.name in _PLACES_ELEMENTS
    ins = [_small_array(v.aval, any_dtype) for v in eqn.invars]
    outs = [_small_array(v.aval, any_dtype) for v in eqn.outvars]
    if not outs or any(x is None for x in ins + outs):
        return None
    params = _params_key(eqn.params)
    if params is None:
        return None
    return (eqn.primitive, params, tuple(ins))


def _evaluated_alone(primitive) -> bool:
    """The primitive's eager evaluation is JAX compiling it alone (apply_primitive, as in
    JAX 0.10.2 and its newest source); a JAX that evaluates otherwise batches nothing."""
    try:
        apply_primitive = jax_internal("dispatch").apply_primitive
    except JaxInternalMissing:
        return False
    impl = primitive.impl if hasattr(primitive, "impl") else None
    return getattr(impl, "func", None) is apply_primitive


class _Slot:
    """One primitive of the program: its arguments from `argument` on, its results from `first` on."""

    __slots__ = ("eqn", "inputs", "argument", "first", "outputs")

    def __init__(self, eqn, inputs: tuple, argument: int, first: int):
        self.eqn, self.inputs, self.argument, self.first = eqn, inputs, argument, first
        self.outputs = len(eqn.outvars)


class KernelFolds:
    """The batch of one kernel (lower/context.py, `KernelContext.folds`)."""

    def __init__(self) -> None:
        self._seen: set[int] = set()  # ids of the jaxprs scanned
        self._pending: dict = {}  # slot key -> an eqn of it, in the order met
        self._slots: dict = {}  # slot key -> _Slot, of the compiled program
        self._program: Callable | None = None
        self._fillers: list = []
        self._builds = 0
        self.programs = 0  # programs built (compiled) for this kernel
        # (slot key, the inputs' bytes) -> the slot's results: every device's thread folds
        # the same eqns on mostly the same values, and each run of the program binds every
        # slot (hundreds in a fused MoE kernel), so a fold found once is not run again.
        self._answers: dict[tuple, list[np.ndarray]] = {}

    def scan(self, jaxpr) -> None:
        """Note the slots of `jaxpr` and of every jaxpr inside it."""
        if id(jaxpr) in self._seen:
            return
        self._seen.add(id(jaxpr))
        for eqn in jaxpr.eqns:
            key = candidate(eqn)
            if key is not None and key not in self._pending:
                self._pending[key] = eqn
            for inner in subjaxprs(eqn.params):
                self.scan(inner)

    def evaluate(self, eqn, inputs: list[Known]) -> list[Known] | None:
        """The eqn's results from the kernel's program, or None: not a slot of it (or JAX
        could not build it), or inputs of other types than the slot's; bind it alone then."""
        key = candidate(eqn)
        if key is None or key not in self._pending:
            return None
        if key not in self._slots:
            if self._builds >= _REBUILDS:
                return None
            self._build()
        slot = self._slots.get(key)
        if slot is None or self._program is None:
            return None
        if len(inputs) != len(slot.inputs) or any(
                x.value.shape != shape or x.value.dtype != dtype for x, (shape, dtype) in zip(inputs, slot.inputs)):
            return None
        asked = (key, *(np.asarray(x.value).tobytes() for x in inputs))  # shapes and dtypes: the slot's
        answers = self._answers.get(asked)
        if answers is None:
            args = list(self._fillers)
            args[slot.argument:slot.argument + len(inputs)] = [x.value for x in inputs]
            import jax

            try:
                with jax.ensure_compile_time_eval():
                    results = self._program(*args)
            except Exception:  # noqa: BLE001 - the eager bind says why, where the value is needed
                return None
            answers = self._answers[asked] = [np.asarray(r) for r in results[slot.first:slot.first + slot.outputs]]
        return [Known(a.copy()) for a in answers]

    def _build(self) -> None:
        """One jitted program binding every pending slot's primitive on inputs of its own."""
        import jax

        self._builds += 1
        slots: dict = {}
        argument = first = 0
        for key, eqn in self._pending.items():
            slots[key] = _Slot(eqn, key[2], argument, first)
            argument, first = argument + len(key[2]), first + len(eqn.outvars)
        order = list(slots.values())

        def program(*flat):
            results = []
            for slot in order:
                ins = flat[slot.argument:slot.argument + len(slot.inputs)]
                out = slot.eqn.primitive.bind(*ins, **slot.eqn.params)
                results += list(out) if slot.eqn.primitive.multiple_results else [out]
            return results

        fillers = [np.ones(shape, dtype) for slot in order for shape, dtype in slot.inputs]
        compiled = jax.jit(program)
        try:
            with jax.ensure_compile_time_eval():
                compiled(*fillers)  # compiles it, or says JAX cannot
        except Exception:  # noqa: BLE001 - some slot JAX refuses: every fold is bound alone
            self._slots, self._program = {}, None
            self._builds = _REBUILDS
            return
        self._slots, self._program, self._fillers = slots, compiled, fillers
        self.programs += 1
