"""The template's counting, as z3 terms over a symbolic device count N: where a position is,
how many instances of a step run before it, and what they add to or take from one semaphore.

Every count is linear integer arithmetic in N and the rounds (with division and remainder by
constants only), so each query the proof asks is decidable and z3 answers it exactly.
"""

from __future__ import annotations

from typing import Any

import z3

from semcheck.parametric.expr import N_MOD, Expr
from semcheck.parametric.template import NotParametric, Seg, Step, Template
from semcheck.records import record

END = 3  # the segment of a finished program


@record(frozen=True)
class Where:
    """A position in one device's program: a segment (or END), the round (a z3 term; 0
    outside the loop) and the index in the segment."""

    seg: int
    round: Any
    j: int


class Context:
    """Terms for one template at the symbolic device count `n` (N >= n_min)."""

    def __init__(self, template: Template, n, n_min: int):
        self.template = template
        self.n = n
        self.n_min = n_min
        self.trips = template.trip_a * n + template.trip_b
        self.side: list = []  # constraints that define the mod-N remainders the terms use

    def value(self, e: Expr, d, k):
        return e.term(d, k, self.n, self.side, self.n_min, (self.template.trip_a, self.template.trip_b))

    def where(self, step: Step, k) -> Where:
        return Where(int(step.seg), k if step.seg is Seg.BODY else 0, step.j)

    def end(self) -> Where:
        return Where(END, 0, 0)

    def before(self, a: Where, b: Where, strict: bool = True):
        """Whether position a comes before position b (or is it, when not strict)."""
        if a.seg != b.seg:
            return z3.BoolVal(a.seg < b.seg)
        if a.seg == END:
            return z3.BoolVal(not strict)
        if a.seg != Seg.BODY:
            return z3.BoolVal(a.j < b.j or (not strict and a.j == b.j))
        same = a.j < b.j or (not strict and a.j == b.j)
        return z3.Or(a.round < b.round, z3.And(a.round == b.round, z3.BoolVal(same)))

    def in_loop(self, w: Where):
        return z3.And(w.round >= 0, w.round < self.trips) if w.seg == Seg.BODY else z3.BoolVal(True)

    def rounds_before(self, step: Step, w: Where, inclusive: bool):
        """How many instances of the body step `step` run before position w (or at it)."""
        if w.seg == Seg.PRO:
            return z3.IntVal(0)
        if w.seg != Seg.BODY:
            return self.trips
        return w.round + (1 if (step.j < w.j or (inclusive and step.j == w.j)) else 0)

    def count(self, step: Step, index: Expr, w: Where, i, inclusive: bool = False):
        """How many instances of `step` before position w (at it too, when `inclusive`) name
        index i of a semaphore, `index` being the index they name."""
        if step.seg != Seg.BODY:
            if w.seg == END:
                runs = True
            elif step.seg != w.seg:
                runs = step.seg < w.seg
            else:
                runs = step.j < w.j or (inclusive and step.j == w.j)
            if not runs:
                return z3.IntVal(0)
            return z3.If(self.value(index, 0, 0) == i, 1, 0)
        rounds = self.rounds_before(step, w, inclusive)
        return self._matching(index, rounds, i)

    def _matching(self, index: Expr, rounds, i):
        """#{k in [0, rounds): index(k) == i}."""
        if not index.uses_k:
            return z3.If(self.value(index, 0, 0) == i, rounds, 0)
        if not index.scale:
            rest = i - (index.const + index.n * self.n)
            step = index.k
            k = rest / step if step > 0 else (-rest) / (-step)
            divides = rest % abs(step) == 0 if abs(step) != 1 else z3.BoolVal(True)
            return z3.If(z3.And(divides, k >= 0, k < rounds), 1, 0)
        if index.k or index.modulus == N_MOD:
            raise NotParametric(f"a semaphore index of the form {index} is not covered")
        q = index.modulus
        total = z3.IntVal(0)
        for rho in range(q):
            at = self.value(index, 0, rho)  # the index of every round k = rho (mod q)
            runs = z3.If(rounds > rho, (rounds - rho - 1) / q + 1, 0)
            total = total + z3.If(at == i, runs, 0)
        return total

    def adds_to(self, alloc: str, offset: int):
        """(step, amount, side, index) of every addition to `alloc` on the device `offset`
        places from the step's own."""
        for step in self.template.steps:
            for use, amount, side in step.adds():
                if use.alloc == alloc and use.offset == offset:
                    yield step, amount, side, use.index

    def senders(self, alloc: str) -> set[int]:
        """The offsets from which some step adds to `alloc`."""
        return {use.offset for step in self.template.steps for use, _, _ in step.adds() if use.alloc == alloc}

    def supply(self, alloc: str, offset: int, w: Where, i):
        """What a device's steps before w add to index i of `alloc` on the device `offset`
        places away (its own and its copies' completions)."""
        total = z3.IntVal(0)
        for step, amount, _side, index in self.adds_to(alloc, offset):
            total = total + amount * self.count(step, index, w, i)
        return total

    def demand(self, alloc: str, w: Where, i):
        """What a device's waits up to w (inclusive) take from index i of its own `alloc`."""
        total = z3.IntVal(0)
        for step in self.template.steps:
            if step.waits and step.sem is not None and step.sem.alloc == alloc:
                total = total + step.amount * self.count(step, step.sem.index, w, i, inclusive=True)
        return total
