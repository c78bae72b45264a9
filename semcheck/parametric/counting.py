"""What counting alone decides for every N: whether any device blocks for good (a deadlock
or an unsatisfied wait), whether a semaphore is left non-zero, and whether a semaphore
index or a copy window leaves its allocation.

Every device runs the same program, so the run in which each device moves whenever it can
keeps them all at the same position, and a device's semaphore then receives from its
neighbours exactly what its own steps send to theirs (docs/parametric.md, "The symmetric
run"). Every maximal run ends where that run ends (persistence), so it decides: no device
blocks for good iff at each wait, what every step before it adds to that semaphore is at
least what the waits up to it take. That is one linear query per wait over symbolic N and
round, and one per semaphore for what is left at the end.
"""

from __future__ import annotations


import z3

from semcheck import ir
from semcheck.parametric.symbolic import Context
from semcheck.parametric.template import Op, Seg, Step, Template
from semcheck.records import record
from semcheck.semantics import must_be_zero_at_exit


@record(frozen=True)
class Gap:
    """A property the template does not have for every N: what fails, and the smallest N
    (at least the proof's start) at which it does."""

    what: str
    smallest: int


QUERY_TIMEOUT_MS = 30_000


class Undecided(Exception):
    """z3 gave no answer to a query (its time ran out): nothing is proved by it."""


def smallest_model(constraints: list, n) -> z3.ModelRef | None:
    """A model of `constraints` with the smallest N, or None when they have none (unsat: the
    one answer a proof rests on). Raises Undecided when z3 cannot tell."""
    opt = z3.Optimize()
    opt.set(timeout=QUERY_TIMEOUT_MS)
    opt.add(*constraints)
    opt.minimize(n)
    answer = opt.check()
    if answer == z3.unsat:
        return None
    if answer != z3.sat:
        raise Undecided(f"z3 gave no answer within {QUERY_TIMEOUT_MS // 1000} s ({opt.reason_unknown()})")
    return opt.model()


def smallest_n(constraints: list, n) -> int | None:
    """The smallest N satisfying `constraints`, or None when none does."""
    model = smallest_model(constraints, n)
    return None if model is None else model.eval(n, model_completion=True).as_long()


def _domain(template: Template, n, n_min: int) -> list:
    return [n >= n_min, template.trip_a * n + template.trip_b >= 0]


def blocking_gaps(template: Template, n_min: int) -> list[Gap]:
    """Every wait that the symmetric run cannot pass at some N >= n_min."""
    gaps = []
    for step in template.steps:
        if not step.waits or step.sem is None:
            continue
        n, k = z3.Int("N"), z3.Int("k")
        ctx = Context(template, n, n_min)
        where = ctx.where(step, k)
        alloc = step.sem.alloc
        i = ctx.value(step.sem.index, 0, k)
        supply = sum((ctx.supply(alloc, c, where, i) for c in ctx.senders(alloc)), z3.IntVal(0))
        demand = ctx.demand(alloc, where, i)
        found = smallest_n(_domain(template, n, n_min) + [ctx.in_loop(where), *ctx.side, supply < demand], n)
        if found is not None:
            gaps.append(Gap(f"every device blocks at {step.describe()}{_round_text(step)}: what reaches "
                            f"{alloc} before it is less than its waits take", found))
    return gaps


def leftover_gaps(template: Template, n_min: int) -> list[Gap]:
    """Every semaphore that must be 0 at exit and is not, in the symmetric run's end, at some N."""
    gaps = []
    for name, decl in template.sem_decls.items():
        if not must_be_zero_at_exit(ir.Backend.TPU, decl):
            continue
        n, i = z3.Int("N"), z3.Int("i")
        ctx = Context(template, n, n_min)
        end = ctx.end()
        supply = sum((ctx.supply(name, c, end, i) for c in ctx.senders(name)), z3.IntVal(0))
        demand = ctx.demand(name, end, i)
        size = ctx.value(template.sem_sizes[name], 0, 0)
        found = smallest_n(_domain(template, n, n_min) + [i >= 0, i < size, *ctx.side, supply != demand], n)
        if found is not None:
            gaps.append(Gap(f"semaphore {name} is not back to 0 when the kernel exits: what is added to it "
                            "differs from what its waits take", found))
    return gaps


def fault_gaps(template: Template, n_min: int) -> list[Gap]:
    """Every semaphore index outside its array, every copy window outside its buffer and
    every checked load's or store's window outside its buffer or its `.at[...]` view
    (`Step.checked`, `Step.view`), at some N >= n_min (device ids are (d + c) mod N: always
    inside the mesh)."""
    gaps = []
    for step in template.steps:
        for use in (step.sem, step.recv, step.send):
            if use is None:
                continue
            n, k = z3.Int("N"), z3.Int("k")
            ctx = Context(template, n, n_min)
            index = ctx.value(use.index, 0, k)
            size = ctx.value(template.sem_sizes[use.alloc], 0, 0)
            found = smallest_n(_domain(template, n, n_min) + [ctx.in_loop(ctx.where(step, k)), *ctx.side,
                                                               z3.Or(index < 0, index >= size)], n)
            if found is not None:
                gaps.append(Gap(f"{step.describe()} indexes semaphore array {use.alloc} outside its size", found))
        if step.checked:
            gaps.extend(_access_gaps(template, step, n_min))
        if step.op is not Op.DMA_START:
            continue
        for area in step.accesses:
            n, k, d = z3.Int("N"), z3.Int("k"), z3.Int("d")
            ctx = Context(template, n, n_min)
            shape = template.buffer_shapes[area.buffer]
            outside = [z3.Or(ctx.value(s, d, k) < 0, ctx.value(s, d, k) + ctx.value(z, d, k) > ctx.value(e, 0, 0))
                       for s, z, e in zip(area.starts, area.sizes, shape)]
            if not outside:
                continue
            # where nothing checks the windows, an empty one is no fault (`semantics.rules._check_window`)
            moves = [] if step.bounds_checked else [z3.And(*(ctx.value(z, d, k) != 0 for z in area.sizes))]
            found = smallest_n(_domain(template, n, n_min) + [d >= 0, d < n, ctx.in_loop(ctx.where(step, k)),
                                                               *ctx.side, z3.Or(*outside), *moves], n)
            if found is not None:
                side = "source" if not area.write else "destination"
                gaps.append(Gap(f"{step.describe()}: the copy's {side} window leaves buffer {area.buffer}", found))
    return gaps


def _access_gaps(template: Template, step: Step, n_min: int) -> list[Gap]:
    """A checked load's or store's window outside its buffer, or outside its view, at some
    N >= n_min (`semantics.races.plain_access`)."""
    [area] = step.accesses
    n, k, d = z3.Int("N"), z3.Int("k"), z3.Int("d")
    ctx = Context(template, n, n_min)
    starts = [ctx.value(s, d, k) for s in area.starts]
    sizes = [ctx.value(z, d, k) for z in area.sizes]
    shape = template.buffer_shapes[area.buffer]
    domain = _domain(template, n, n_min) + [d >= 0, d < n, ctx.in_loop(ctx.where(step, k)), *ctx.side]
    gaps = []
    outside = [z3.Or(s < 0, s + z > ctx.value(e, 0, 0)) for s, z, e in zip(starts, sizes, shape)]
    found = smallest_n(domain + [z3.Or(*outside)], n) if outside else None
    if found is not None:
        gaps.append(Gap(f"{step.describe()}: the window leaves buffer {area.buffer}", found))
    if step.view is not None:
        box = [(ctx.value(s, d, k), ctx.value(z, d, k)) for s, z in zip(step.view.starts, step.view.sizes)]
        outside = [z3.Or(s < lo, s + z > lo + extent) for s, z, (lo, extent) in zip(starts, sizes, box)]
        found = smallest_n(domain + [z3.Or(*outside)], n) if outside else None
        if found is not None:
            gaps.append(Gap(f"{step.describe()}: the window leaves its .at[...] view of buffer {area.buffer}", found))
    return gaps


def _round_text(step: Step) -> str:
    return " (in some round of the loop)" if step.seg is Seg.BODY else ""
