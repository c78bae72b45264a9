"""Rules for control flow and scopes: cond (pl.when, lax.cond, lax.switch), scan (fori_loop
and pl.loop with static bounds), while (traced bounds), jit-like calls, and run_scoped.

Known predicates and trip counts are the common case: the taken branch is lowered alone and
loops are unrolled, so most threads are straight-line code. A predicate known only at run
time (a `semaphore_read`) becomes IR branches; a loop whose condition is known only at run
time becomes an IR loop over registers. A branch on buffer contents explores every outcome
through a protocol input (when the branch synchronizes), since semcheck cannot know the data.
"""

from __future__ import annotations

import math

import numpy as np

from semcheck import ir
from semcheck.errors import LoadError
from semcheck.ir import SemKind, SemOrigin
from semcheck.lower.context import ThreadLowering, semaphore_kind
from semcheck.lower.data import ScalarMerge, element_operand
from semcheck.lower.interpreter import eval_closed, eval_jaxpr, operand, unwrap, const_value
from semcheck.lower.ref_names import helpers_allocations_shown_as, ref_names
from semcheck.lower.registry import rule
from semcheck.lower.values import Known, Opaque, RefValue, Sym, Value, sym_op, unknown_data

# A loop whose trip count is known but this long is unrolled only this far.
MAX_LOOP_ITERATIONS = 100_000


# --- calls --------------------------------------------------------------------------------


@rule("jit", "pjit", "closed_call", "eval_jaxpr", "core_call", "remat2", "checkpoint", "jaxpr_call",
      "custom_jvp_call", "custom_vjp_call")
def call(t: ThreadLowering, eqn, inputs):
    """Calls of a sub-jaxpr (jit, checkpoint, custom derivatives; newer JAX binds a plain call
    as `eval_jaxpr`): lower the body in place. The sub-jaxpr is `jaxpr` or `call_jaxpr`
    depending on the primitive."""
    body = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
    if body is None:
        raise t.error(eqn, "semcheck cannot find the called jaxpr in this primitive's params")
    return eval_closed(t, body, inputs)


# --- cond ---------------------------------------------------------------------------------


@rule("cond")
def cond(t: ThreadLowering, eqn, inputs):
    index, *operands = inputs
    branches = eqn.params["branches"]
    if isinstance(index, Known):
        # lax.cond clamps the index into range.
        chosen = min(max(int(index.value.reshape(())), 0), len(branches) - 1)
        t.used(eqn, index, "the branch taken")
        return eval_closed(t, branches[chosen], operands)
    if isinstance(index, Sym):
        return branch_on(t, eqn, index.op, branches, operands)
    if isinstance(index, Opaque):
        return _data_dependent_cond(t, eqn, index, branches, operands)
    raise t.error(eqn, "the branch index is a ref")


def branch_on(t: ThreadLowering, eqn, index: ir.Operand, branches, operands) -> list[Value]:
    """IR branches: evaluate every branch under its own label, merge outputs in registers."""
    em, loc = t.emitter, t.loc(eqn)
    labels = [em.label() for _ in branches[1:]]
    end = em.label()
    last = len(branches) - 1
    for k, label in enumerate(labels, start=1):
        # lax.switch clamps the index: below 0 runs branch 0, above the last runs the last.
        em.branch(sym_op("ge" if k == last else "eq", index, k), label, loc)
    results, slots = [], []
    before, after = t.memory.snapshot(), []
    for k, branch in enumerate(branches):
        if k:
            em.place(labels[k - 1])
        t.memory.restore(before)  # each branch starts from the buffers as they were
        results.append(eval_closed(t, branch, operands))
        after.append(t.memory.snapshot())
        slots.append(em.slot())
        if k < len(branches) - 1:
            em.jump(end, loc)
    em.place(end)
    t.memory.join(after, _BranchMerge(t, eqn, slots))
    return _merge(t, eqn, results, slots)


class _BranchMerge(ScalarMerge):
    """Buffer elements that differ between IR branches become registers, like outputs."""

    def __init__(self, t: ThreadLowering, eqn, slots):
        self.t, self.eqn, self.slots = t, eqn, slots

    def element(self, buffer, index, version):
        op = element_operand(version, index)
        if op is None:  # an input this branch left as it was: its register
            held = self.t.memory.held_input(buffer, index, version)
            op = None if held is None else held.op
        return op

    def assign(self, ops, dtype):
        register = self.t.fresh_reg("m")
        for op, slot in zip(ops, self.slots):
            slot.instrs.append(ir.Assign(self.t.loc(self.eqn), register, op))
        return Sym(ir.Reg(register), np.dtype(dtype))


def _merge(t: ThreadLowering, eqn, results: list[list[Value]], slots) -> list[Value]:
    merged = []
    for position, var in enumerate(eqn.outvars):
        values = [r[position] for r in results]
        first = values[0]
        known = [v for v in values if isinstance(v, Known)]
        if len(known) == len(values) and all(
            v.value.shape == known[0].value.shape and np.array_equal(v.value, known[0].value) for v in known
        ):
            merged.append(first)
            continue
        if _scalar_int(var.aval) and all(
            isinstance(v, Sym) or (isinstance(v, Known) and v.value.size == 1) for v in values
        ):
            register = t.fresh_reg("c")
            for v, slot in zip(values, slots):
                assert isinstance(v, (Sym, Known)), "checked above"
                op = v.op if isinstance(v, Sym) else int(v.value.reshape(()))
                slot.instrs.append(ir.Assign(t.loc(eqn), register, op))
            merged.append(Sym(ir.Reg(register), np.dtype(var.aval.dtype)))
            continue
        opaque = next((v for v in values if isinstance(v, Opaque)), None)
        merged.append(unknown_data(opaque) if opaque is not None else Opaque(f"a value chosen by the branch at {t.loc(eqn)}"))
    return merged


def _scalar_int(aval) -> bool:
    try:
        dtype = np.dtype(aval.dtype)
    except TypeError:
        return False
    return tuple(aval.shape) == () and (np.issubdtype(dtype, np.integer) or dtype == np.bool_)


def _data_dependent_cond(t: ThreadLowering, eqn, index: Opaque, branches, operands):
    """A branch on data semcheck does not track. If no branch synchronizes, every branch's
    memory accesses are kept (an over-approximation of what one run touches); otherwise
    each thread explores every branch through a protocol input."""
    em = t.emitter
    start = em.mark()
    before, after, results = t.memory.snapshot(), [], []
    for branch in branches:
        t.memory.restore(before)
        results.append(eval_closed(t, branch, operands))
        after.append(t.memory.snapshot())
    t.memory.join(after)
    if not em.has_sync_since(start):
        unchecked = em.widen_accesses_since(start, f"an access kept from every branch of the branch at {t.loc(eqn)}, "
                                                   f"which depends on {index.why}")
        t.kernel.note(
            f"the branch at {t.loc(eqn)} depends on {index.why}; it does not synchronize, so "
            "semcheck keeps the memory accesses of every branch"
            + ("; their loads' and stores' windows are not checked against their buffers, as a run may not "
               "make them" if unchecked else "")
        )
        return _merge_opaque(t, eqn, results)
    em.rollback(start)
    t.memory.restore(before)
    loc = t.loc(eqn)
    name = t.kernel.input_for_unknown_data(f"data@{loc.line}.d{t.device}c{t.core}", 0, len(branches) - 1, loc)
    t.kernel.note(
        f"the branch at {loc} depends on {index.why}; semcheck checks every outcome of it on "
        "every device and core"
    )
    return branch_on(t, eqn, ir.Reg(name), branches, operands)


def _merge_opaque(t: ThreadLowering, eqn, results):
    merged = []
    for position in range(len(eqn.outvars)):
        values = [r[position] for r in results]
        first = values[0]
        if all(isinstance(v, Known) for v in values) and all(
            v.value.shape == first.value.shape and np.array_equal(v.value, first.value) for v in values
        ):
            merged.append(first)
        else:
            merged.append(Opaque(f"a value chosen by the data-dependent branch at {t.loc(eqn)}"))
    return merged


# --- loops --------------------------------------------------------------------------------


@rule("scan")
def scan(t: ThreadLowering, eqn, inputs):
    params = eqn.params
    length = int(params["length"])
    num_consts, num_carry = _scan_counts(params, inputs)
    consts, carry, xs = inputs[:num_consts], inputs[num_consts:num_consts + num_carry], inputs[num_consts + num_carry:]
    body, body_consts = unwrap(params["jaxpr"])
    body_consts = [const_value(c) for c in body_consts]
    if length > MAX_LOOP_ITERATIONS:
        raise _too_long(t, eqn, length)
    steps = range(length - 1, -1, -1) if params.get("reverse") else range(length)
    ys_per_step: list[list[Value]] = []
    for i in steps:
        x_i = [_slice(x, i) for x in xs]
        outs = eval_jaxpr(t, body, body_consts, list(consts) + list(carry) + x_i)
        carry = [_settle(t, eqn, v) for v in outs[:num_carry]]
        ys_per_step.append(outs[num_carry:])
    if params.get("reverse"):
        ys_per_step.reverse()
    ys = [_stack([step[k] for step in ys_per_step]) for k in range(len(eqn.outvars) - num_carry)]
    return list(carry) + ys


def _scan_counts(params, inputs) -> tuple[int, int]:
    if "num_consts" in params:
        return int(params["num_consts"]), int(params["num_carry"])
    # Newer JAX describes the inputs with flat trees (docs/semantics.md, "Newer JAX").
    consts, carry, _xs = (len(g) for g in params["ft_in"].unpack())
    return consts, carry


def _slice(x: Value, i: int) -> Value:
    if isinstance(x, Known):
        return Known(x.value[i], x.sources)
    return unknown_data(x) if isinstance(x, Opaque) else Opaque("a scanned-over value")


def _stack(values: list[Value]) -> Value:
    known = [v for v in values if isinstance(v, Known)]
    if values and len(known) == len(values):
        return Known(np.stack([v.value for v in known]), frozenset().union(*(v.sources for v in known)))
    opaque = next((v for v in values if isinstance(v, Opaque)), None)
    return unknown_data(opaque) if opaque is not None else Opaque("a value stacked by a loop")


def _settle(t: ThreadLowering, eqn, value: Value) -> Value:
    """A loop carry that is an expression over registers is stored in a register, so that
    unrolled iterations do not build ever larger expressions."""
    if isinstance(value, Sym) and isinstance(value.op, ir.BinOp):
        register = t.fresh_reg("k")
        t.emitter.emit(ir.Assign(t.loc(eqn), register, value.op))
        return Sym(ir.Reg(register), value.dtype)
    return value


def _too_long(t: ThreadLowering, eqn, n) -> LoadError:
    return t.error(
        eqn,
        f"a loop of {n:,} iterations is too long to unroll (limit {MAX_LOOP_ITERATIONS:,})",
        hint="check a smaller problem size",
    )


@rule("while")
def while_loop(t: ThreadLowering, eqn, inputs):
    params = eqn.params
    cn, bn = int(params["cond_nconsts"]), int(params["body_nconsts"])
    cond_consts, body_consts, carry = inputs[:cn], inputs[cn:cn + bn], list(inputs[cn + bn:])
    for _ in range(MAX_LOOP_ITERATIONS):
        [c] = eval_closed(t, params["cond_jaxpr"], list(cond_consts) + carry)
        if isinstance(c, Known):
            t.used(eqn, c, "the loop condition")
            if not bool(c.value.reshape(())):
                return carry
            outs = eval_closed(t, params["body_jaxpr"], list(body_consts) + carry)
            carry = [_settle(t, eqn, v) for v in outs]
            continue
        if isinstance(c, Sym):
            return _ir_loop(t, eqn, cond_consts, body_consts, carry)
        raise t.error(
            eqn,
            f"the loop condition depends on {c.why if isinstance(c, Opaque) else 'a reference'}, which semcheck cannot know",
            hint="bound the loop by values derived from axis_index, program_id, constants "
            "or semaphore_read",
        )
    raise _too_long(t, eqn, MAX_LOOP_ITERATIONS)


def _ir_loop(t: ThreadLowering, eqn, cond_consts, body_consts, carry):
    """A loop whose condition is known only at run time: carries live in registers.

    A carry the body turns into untracked data cannot be a register; the body is lowered
    again with that carry opaque until the set of register carries is stable.
    """
    params, em, loc = eqn.params, t.emitter, t.loc(eqn)
    opaque = {i for i, v in enumerate(carry) if not _register_candidate(eqn.outvars[i].aval, v)}
    while True:
        start = em.mark()
        entry = t.memory.snapshot()
        registers: dict[int, str] = {}
        values: list[Value] = []
        for i, v in enumerate(carry):
            if i in opaque:
                values.append(unknown_data(v) if isinstance(v, Opaque) else Opaque(f"a value carried by the loop at {loc}"))
                continue
            registers[i] = t.fresh_reg("l")
            em.emit(ir.Assign(loc, registers[i], operand(t, eqn, v, "a loop carry")))
            values.append(Sym(ir.Reg(registers[i]), np.dtype(eqn.outvars[i].aval.dtype)))
        head, done = em.label(), em.label()
        em.place(head)
        [c] = eval_closed(t, params["cond_jaxpr"], list(cond_consts) + values)
        if isinstance(c, Opaque):
            raise t.error(
                eqn,
                f"the loop condition depends on {c.why}, which semcheck cannot know",
                hint="bound the loop by values derived from axis_index, program_id, constants "
                "or semaphore_read",
            )
        em.branch(sym_op("eq", operand(t, eqn, c, "the loop condition"), 0), done, loc)
        outs = eval_closed(t, params["body_jaxpr"], list(body_consts) + values)
        lost = {i for i in registers if not _register_candidate(eqn.outvars[i].aval, outs[i])}
        # The body runs any number of times: what it stores is known at the head only where
        # every iteration leaves it unchanged (data.py joins the two; it only shrinks).
        t.memory.join([entry, t.memory.snapshot()])
        changed = not t.memory.knows_as_much(entry)
        if lost or changed:
            em.rollback(start)
            opaque |= lost
            continue
        temps = {}
        for i in registers:  # parallel assignment through temporaries
            temps[i] = t.fresh_reg("t")
            em.emit(ir.Assign(loc, temps[i], operand(t, eqn, outs[i], "a loop carry")))
        for i, register in registers.items():
            em.emit(ir.Assign(loc, register, ir.Reg(temps[i])))
        em.jump(head, loc)
        em.place(done)
        t.kernel.note(
            f"the loop at {loc} runs until a value known only at run time changes: the explicit "
            "engine reports it if it can spin forever (a state no schedule lets it leave); z3 "
            "unrolls it only to --unroll"
        )
        return values


def _register_candidate(aval, value: Value) -> bool:
    return _scalar_int(aval) and (isinstance(value, Sym) or (isinstance(value, Known) and value.value.size == 1))


# --- run_scoped -----------------------------------------------------------------------------


@rule("run_scoped")
def run_scoped(t: ThreadLowering, eqn, inputs):
    params = eqn.params
    if params.get("collective_axes"):
        raise t.error(
            eqn,
            "run_scoped(collective_axes=...) is not supported on TPU",
            hint="allocate per-core scratch without collective_axes",
        )
    jaxpr, consts = unwrap(params["jaxpr"])
    # 0.10.2 binds the closed-over refs (the eqn's inputs) to the jaxpr's constvars and the
    # new allocations to its invars; newer JAX attaches consts to the jaxpr (docs/semantics.md, "Newer JAX").
    closed_over = [const_value(c) for c in consts] + list(inputs)
    transforms = params.get("ref_transforms") or ()
    refs = []
    for k, ref in enumerate(_allocations(t, eqn, jaxpr)):
        extra = tuple(transforms[k]) if k < len(transforms) and transforms[k] else ()
        refs.append(RefValue(ref.alloc, ref.is_semaphore, ref.shape, ref.dtype, ref.transforms + extra))
    return eval_jaxpr(t, jaxpr, closed_over[:len(jaxpr.constvars)], refs)


def _allocations(t: ThreadLowering, eqn, jaxpr) -> list[RefValue]:
    """One allocation per run_scoped allocation site, shared by every thread and every
    time the scope runs (the hardware reuses the same scoped slot)."""
    key = (id(eqn),)
    cached = t.kernel.scoped.get(key)
    if isinstance(cached, list):
        return cached
    names = ref_names(jaxpr, "scoped")
    loc = t.loc(eqn)
    avals = [v.aval for v in jaxpr.invars]
    kinds = [semaphore_kind(aval.dtype) for aval in avals]
    said = [None if kind is None else ("DMA semaphore" if kind is SemKind.DMA else "semaphore") + ("s" if math.prod(aval.shape) > 1 else "")
            for kind, aval in zip(kinds, avals)]
    shown_as = helpers_allocations_shown_as(eqn, jaxpr, names, said, loc)
    allocs = [t.kernel.declare_ref(n, aval, SemOrigin.SCOPED, loc, shown_as=shown)
              for n, aval, shown in zip(names, avals, shown_as)]
    t.kernel.scoped[key] = allocs
    return allocs


@rule("emit_pipeline", "pipeline_body")
def pipeline_primitive(t: ThreadLowering, eqn, inputs):
    raise t.error(
        eqn,
        "emit_pipeline was traced as one primitive (jax_use_emit_pipeline_primitive is on); "
        "semcheck lowers the pipeline from its inline form",
        hint="leave jax_use_emit_pipeline_primitive at its default (False) when checking",
    )
