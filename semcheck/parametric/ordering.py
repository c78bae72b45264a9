"""What must happen before what, for every N: no data race and no early arrival.

A data race is a state in which an access (a load, a store, a copy's start) overlaps what a
copy in flight still reads or writes; an early arrival is a signal or copy reaching a device
before that device entered the kernel. Both are ruled out by one ordering, for every pair
of steps whose memory (or target) can meet:

* the copy's completion X must come before the access A (X ≺ A), or
* the access must come before the copy starts (A ≺ D); for an arrival, the target's entry
  must come before the signal or copy.

An ordering e ≺ f holds when some *blocking certificate* exists: positions β for a few
neighbouring devices (a window), each a wait, such that with e held back, what can reach
each of those waits from everything before the positions (and from every device outside the
window, taken to have done all it ever does) is less than the wait takes, and f lies at or
after the position of its device. No run with e held back passes any of the positions, so
f needs e (docs/parametric.md, "Blocking certificates"). Certificates are found by running
the window greedily at one N (`runs.window_run`), written relative to the rounds of the two
steps, and z3 checks for every N at once that some certificate of the collection holds at
every pair of rounds where the two steps meet: a counterexample point is run again and its
certificate added, until none is left (or none exists there).
"""

from __future__ import annotations


import z3

from semcheck import ir
from semcheck.parametric import runs
from semcheck.parametric.counting import Undecided, smallest_model
from semcheck.parametric.symbolic import Context, Where
from semcheck.parametric.template import Area, Op, Seg, Step, Template, counts_text
from semcheck.records import record
from semcheck.semantics import RECV, SEND

FORBID, CAP = "forbid", "cap"
MAX_RADIUS = 3  # how far beyond the two devices a window reaches
MAX_ROUNDS = 24  # certificates added to one obligation before it is given up


@record(frozen=True)
class Obligation:
    """The copy (or signal) D of device 0 in round k1 against the access (or entry) A of
    device `offset` in round k2."""

    kind: str  # "data_race" or "remote_before_entry"
    copy: Step
    access: Step
    offset: int
    side: ir.DmaSide | None = None  # a race: the completion that ends the copy's pending access
    pending: Area | None = None
    touching: Area | None = None

    @property
    def goals(self) -> tuple[str, ...]:
        return (FORBID, CAP) if self.kind == "data_race" else (CAP,)

    def text(self) -> str:
        where = "" if self.offset == 0 else f" on the device {self.offset:+d} away"
        if self.kind == "data_race":
            what = "writes" if self.pending and self.pending.write else "reads"
            return (f"{self.access.describe()}{where} against the copy started at {self.copy.loc} that still "
                    f"{what} {self.pending.buffer if self.pending else ''}")
        return f"{self.copy.describe()} reaching the device {self.offset:+d} away before it entered the kernel"


def obligations(template: Template) -> list[Obligation]:
    out = []
    copies = [s for s in template.steps if s.op is Op.DMA_START and (s.recv_inc or s.send_inc)]
    for d in copies:
        assert d.recv is not None
        pending = [(d.accesses[1], RECV), (d.accesses[0], SEND if d.send is not None else RECV)]
        for a in template.steps:
            for touching in a.accesses:
                for area, side in pending:
                    if area.buffer != touching.buffer or not (area.write or touching.write):
                        continue
                    offset = area.offset - touching.offset
                    if a is d and offset == 0 and d.seg is not Seg.BODY:
                        continue  # the copy's own start
                    out.append(Obligation("data_race", d, a, offset, side, area, touching))
    if template.pro and template.pro[0].op is Op.ENTRY and not template.entered_together:
        entry = template.pro[0]
        for s in template.steps:
            if s.op is Op.SIGNAL and s.sem is not None and s.sem.offset:
                if template.sem_decls[s.sem.alloc].origin not in ir.OUTLIVES_KERNEL:
                    out.append(Obligation("remote_before_entry", s, entry, s.sem.offset))
            elif s.op is Op.DMA_START and s.target:
                out.append(Obligation("remote_before_entry", s, entry, s.target))
    return out


# --- certificates ------------------------------------------------------------------------------------

# A device's position in a certificate: ("cap",) the held device at the access; or
# (segment, anchor, delta, j): the step j of the segment, in round anchor + delta for the
# loop ("k1", "k2": the rounds of the two steps; "abs": round delta; "last": round T-1-delta).
Point = tuple


@record(frozen=True)
class Certificate:
    goal: str
    points: tuple[tuple[int, Point], ...]  # window offset -> position; devices not named are outside

    @property
    def span(self) -> int:
        offsets = [o for o, _ in self.points]
        return max(offsets) - min(offsets) if offsets else 0


def concrete_certificates(template: Template, ob: Obligation, n: int, k1: int, k2: int) -> list[Certificate]:
    """Certificates for `ob` at N = n and rounds k1, k2, written in the ways that may hold
    for other N and rounds; empty when the window runs find none."""
    prog = runs.program(template, n)
    p_copy = runs.position(template, ob.copy, k1, n)
    p_access = runs.position(template, ob.access, k2, n)
    t = ob.offset
    for goal in ob.goals:
        held = runs.Held(0, p_copy, ob.side) if goal == FORBID else runs.Held(t, p_access)
        for radius in range(MAX_RADIUS + 1):
            window = tuple(range(min(0, t) - radius, max(0, t) + radius + 1))
            if window[-1] - window[0] >= n:
                break
            pcs = runs.window_run(template, n, window, held)
            if goal == FORBID and not pcs[t] < p_access:
                continue
            if goal == CAP and not pcs[0] <= p_copy:
                continue
            return _describe(template, ob, goal, pcs, prog, n, k1, k2, p_access)
    return []


def _describe(template, ob, goal, pcs, prog, n, k1, k2, p_access) -> list[Certificate]:
    trips = template.trips(n)
    anchors = {}
    if ob.access.seg is Seg.BODY:
        anchors["k2"] = k2
    if ob.copy.seg is Seg.BODY:
        anchors["k1"] = k1
    placed: dict[int, tuple[Step, int] | None] = {}
    for o, pc in pcs.items():
        if pc >= len(prog):
            continue  # finished: no different from a device outside the window
        if goal == CAP and o == ob.offset and pc == p_access:
            placed[o] = None
            continue
        step, k = prog[pc]
        placed[o] = (step, k)
    variants = []
    for choice in ("nearest", *anchors):
        points: list[tuple[int, Point]] = []
        for o, found in sorted(placed.items()):
            if found is None:
                points.append((o, ("cap",)))
                continue
            step, k = found
            if step.seg is not Seg.BODY:
                points.append((o, (int(step.seg), "abs", 0, step.j)))
                continue
            options = [(name, k - value) for name, value in anchors.items()] + [("abs", k), ("last", trips - 1 - k)]
            if choice != "nearest":
                options = [opt for opt in options if opt[0] == choice]
            anchor, delta = min(options, key=lambda opt: abs(opt[1]))
            points.append((o, (int(step.seg), anchor, delta, step.j)))
        cert = Certificate(goal, tuple(points))
        if cert not in variants:
            variants.append(cert)
    return variants


# --- the symbolic check -----------------------------------------------------------------------------


class _Symbols:
    def __init__(self, template: Template, ob: Obligation, n_min: int):
        self.n, self.d0, self.k1, self.k2 = z3.Ints("N d0 k1 k2")
        self.ctx = Context(template, self.n, n_min)
        self.template, self.ob = template, ob
        self.copy_at = self.ctx.where(ob.copy, self.k1)
        self.access_at = self.ctx.where(ob.access, self.k2)

    def round_of(self, point: Point):
        _seg, anchor, delta, _j = point
        return {"k1": self.k1 + delta, "k2": self.k2 + delta, "abs": z3.IntVal(delta),
                "last": self.ctx.trips - 1 - delta}[anchor]

    def where(self, point: Point) -> Where:
        if point == ("cap",):
            return self.access_at
        seg, _anchor, _delta, j = point
        return Where(seg, self.round_of(point) if seg == Seg.BODY else 0, j)

    def domain(self, n_start: int) -> list:
        ctx, ob = self.ctx, self.ob
        out = [self.n >= n_start, ctx.trips >= 0, self.d0 >= 0, self.d0 < self.n,
               ctx.in_loop(self.copy_at), ctx.in_loop(self.access_at)]
        if ob.copy is ob.access and ob.offset == 0:
            out.append(self.k1 != self.k2)
        if ob.kind == "data_race":
            out.append(self._overlap())
        return out

    def _overlap(self):
        ctx, ob = self.ctx, self.ob
        assert ob.pending is not None and ob.touching is not None
        d_access = z3.FreshInt("d_access")
        ctx.side.append(z3.And(d_access >= 0, d_access < self.n,
                               z3.Or(*[d_access == self.d0 + ob.offset - q * self.n for q in range(-2, 3)])))
        conds = []
        for sp, zp, sa, za in zip(ob.pending.starts, ob.pending.sizes, ob.touching.starts, ob.touching.sizes):
            s1, z1 = ctx.value(sp, self.d0, self.k1), ctx.value(zp, self.d0, self.k1)
            s2, z2 = ctx.value(sa, d_access, self.k2), ctx.value(za, d_access, self.k2)
            conds += [z1 > 0, z2 > 0, s1 < s2 + z2, s2 < s1 + z1]
        return z3.And(*conds)

    def valid(self, cert: Certificate):
        ctx, ob = self.ctx, self.ob
        places = {o: self.where(p) for o, p in cert.points}
        conds = [self.n > cert.span]
        for o, point in cert.points:
            if point == ("cap",):
                continue
            w = places[o]
            conds.append(ctx.in_loop(w))
            step = self.template.segment(Seg(point[0]))[point[3]]
            if not step.waits or step.sem is None:
                return z3.BoolVal(False)
            conds.append(self._blocked(cert, places, o, step, w))
        t = ob.offset
        if cert.goal == FORBID:
            if t not in places or dict(cert.points)[t] == ("cap",):
                return z3.BoolVal(False)
            conds.append(ctx.before(places[t], self.access_at))
        else:
            if 0 not in places or dict(cert.points).get(t) != ("cap",):
                return z3.BoolVal(False)
            conds.append(ctx.before(places[0], self.copy_at, strict=False))
        return z3.And(*conds)

    def _blocked(self, cert: Certificate, places: dict, o: int, step: Step, w: Where):
        """What can reach the wait `step` of device o at w is less than the waits up to it take."""
        ctx = self.ctx
        assert step.sem is not None
        alloc = step.sem.alloc
        i = ctx.value(step.sem.index, 0, w.round)
        supply = z3.IntVal(0)
        for c in ctx.senders(alloc):
            sender = o - c
            supply = supply + ctx.supply(alloc, c, places.get(sender, ctx.end()), i)
        if cert.goal == FORBID:
            for use, amount, side in self.ob.copy.adds():
                if side != self.ob.side or use.alloc != alloc or use.offset != o:
                    continue
                started = ctx.before(self.copy_at, places[0]) if 0 in places else z3.BoolVal(True)
                supply = supply - z3.If(z3.And(started, ctx.value(use.index, 0, self.k1) == i), amount, 0)
        return supply < ctx.demand(alloc, w, i)


@record(frozen=True)
class Outcome:
    obligation: Obligation
    proved_from: int | None  # the smallest N from which it is proved; None: not proved
    certificates: int
    queries: int
    window: int  # the widest window a certificate used (devices)
    failure: str | None = None  # why it is not proved


def prove(template: Template, ob: Obligation, n_min: int, give_up_above: int = 12) -> Outcome:
    """Prove `ob` for every N >= some start; the start is raised past each N at which no
    certificate exists (those counts are left to the explicit search), up to `give_up_above`."""
    certs: list[Certificate] = []
    queries = 0
    n_start = max(n_min, abs(ob.offset) + 1)
    missing: list[int] = []  # counts at which no certificate was found (left to the explicit search)
    for _ in range(MAX_ROUNDS):
        sym = _Symbols(template, ob, n_start)
        constraints = sym.domain(n_start)
        valid = [sym.valid(c) for c in certs]
        constraints += sym.ctx.side
        if valid:
            constraints.append(z3.Not(z3.Or(*valid)))
        queries += 1
        try:
            model = _smallest_point(constraints, sym)
        except Undecided as e:
            return Outcome(ob, None, len(certs), queries, 0, failure=f"{ob.text()}: {e}")
        if model is None:
            window = max((c.span + 1 for c in certs), default=1)
            return Outcome(ob, n_start, len(certs), queries, window)
        n, k1, k2 = model
        found = concrete_certificates(template, ob, n, k1, k2)
        new = [c for c in found if c not in certs]
        if not new:
            if found or n >= give_up_above:
                missing.append(n)
                rounds = f" (rounds {k1} and {k2} at N = {n})" if template.body else ""
                return Outcome(ob, None, len(certs), queries, 0,
                               failure=f"no blocking certificate for {ob.text()} at N = {counts_text(missing)}{rounds}")
            missing.append(n)
            n_start = n + 1
            continue
        certs.extend(new)
    return Outcome(ob, None, len(certs), queries, 0,
                   failure=f"{ob.text()}: no proof after {MAX_ROUNDS} certificates")


def _smallest_point(constraints: list, sym: _Symbols) -> tuple[int, int, int] | None:
    m = smallest_model(constraints, sym.n)
    if m is None:
        return None
    return tuple(m.eval(v, model_completion=True).as_long() for v in (sym.n, sym.k1, sym.k2))  # type: ignore[return-value]

