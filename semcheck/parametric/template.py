"""One program for every device and every device count: the template a uniform family of
protocols follows, fitted from the protocols a kernel (or model) gave at a few device counts.

A family is uniform when, at every device count N it was captured at, every device runs the
same sequence of instructions (the same kinds, semaphores, buffers and source lines), laid
out as a prologue, a loop of T(N) = a*N + b rounds of one body, and an epilogue, and every
number in it (a device id, a semaphore index, a region's start or size, an amount) is one
expression (`expr.Expr`) in the device index d, the round k and N. The synchronization must
moreover not depend on which device runs it: a semaphore is named by the same index on every
device, a peer is `(d + c) mod N` for a constant c, and every amount is one constant.

Whatever is not uniform is said, with the instruction and the device count where it shows:
that is the `inconclusive: not parametric` reason.
"""

from __future__ import annotations

import enum
from dataclasses import field, fields, is_dataclass, replace
from typing import Any, Iterable, Mapping

from semcheck import ir
from semcheck.parametric import expr as ex
from semcheck.ir import DmaSide
from semcheck.parametric.expr import Expr
from semcheck.records import record
from semcheck.semantics import dma_increment


class NotParametric(Exception):
    """Why a family is not one template (said as `inconclusive: not parametric: ...`)."""


class Seg(enum.IntEnum):
    PRO = 0
    BODY = 1
    EPI = 2


class Op(str, enum.Enum):
    SIGNAL = "semaphore_signal"
    WAIT = "semaphore_wait"
    DMA_WAIT = "dma_wait"
    DMA_START = "dma_start"
    LOAD = "load"
    STORE = "store"
    ENTRY = "kernel entry"
    EXIT = "kernel exit"


_OPS = {
    ir.Signal: Op.SIGNAL, ir.Wait: Op.WAIT, ir.DmaWait: Op.DMA_WAIT, ir.DmaStart: Op.DMA_START,
    ir.Load: Op.LOAD, ir.Store: Op.STORE, ir.KernelEntry: Op.ENTRY, ir.KernelExit: Op.EXIT,
}


@record(frozen=True)
class SemUse:
    """A semaphore an instruction names: `alloc[index]` on the device `offset` places away."""

    alloc: str
    index: Expr
    offset: int


@record(frozen=True)
class Area:
    """A region of a buffer on the device `offset` places away, full rank."""

    buffer: str
    starts: tuple[Expr, ...]
    sizes: tuple[Expr, ...]
    offset: int
    write: bool


@record(frozen=True)
class Step:
    """One instruction of the template."""

    seg: Seg
    j: int
    op: Op
    loc: ir.Loc
    sem: SemUse | None = None  # a signal's target; a wait's own semaphore
    amount: int = 0  # what a signal adds, what a wait takes
    recv: SemUse | None = None  # a copy: the semaphore its landing adds to (on its target)
    recv_inc: int = 0
    send: SemUse | None = None  # a copy: the semaphore its send side adds to (its own)
    send_inc: int = 0
    accesses: tuple[Area, ...] = ()  # a load or store: its region; a copy: source, destination
    target: int = 0  # a copy: the device offset it writes to
    # A load or store whose window must lie inside its buffer (`ir.window_checked`), and inside
    # `view` where it has one (`ir.Load.view`, the box of its `.at[...]` views).
    checked: bool = False
    view: Area | None = None
    # A copy whose windows nothing checks (`ir.DmaStart.bounds_checked`): an empty one is no fault.
    bounds_checked: bool = True
    # every number of the instruction: its path in the instruction, its expression
    holes: tuple[tuple[Any, Expr], ...] = ()
    shape: Any = field(default=None, compare=False, repr=False)  # the instruction, every number left out

    @property
    def waits(self) -> bool:
        return self.op in (Op.WAIT, Op.DMA_WAIT)

    def adds(self) -> list[tuple[SemUse, int, DmaSide | None]]:
        """(semaphore, amount, side) of every addition this step makes or schedules; side
        None for the step itself, the completion's side for a copy's."""
        if self.op is Op.SIGNAL and self.sem is not None:
            return [(self.sem, self.amount, None)]
        out: list[tuple[SemUse, int, DmaSide | None]] = []
        if self.recv is not None:
            out.append((self.recv, self.recv_inc, DmaSide.RECV))
        if self.send is not None:
            out.append((self.send, self.send_inc, DmaSide.SEND))
        return out

    def describe(self) -> str:
        return f"{self.op.value} at {self.loc}"


@record(frozen=True, eq=False)  # compared (and hashed, for caches) by identity
class Template:
    """The program every device runs at every N: `pro`, `body` repeated `trips(N)` times,
    `epi`; semaphore array sizes and buffer shapes as functions of N."""

    name: str
    loc: ir.Loc
    frontend: str
    pro: tuple[Step, ...]
    body: tuple[Step, ...]
    epi: tuple[Step, ...]
    trip_a: int  # T(N) = trip_a * N + trip_b
    trip_b: int
    sem_sizes: Mapping[str, Expr]
    sem_decls: Mapping[str, ir.SemDecl]
    buffer_shapes: Mapping[str, tuple[Expr, ...]]
    fitted_at: tuple[int, ...]
    confirmed_at: tuple[int, ...]
    holds_from: int  # the smallest captured N from which every capture fits
    # The default device barrier runs before the body (`without_default_barrier`): no signal
    # or copy of the body can reach a device that has not entered the kernel.
    entered_together: bool = False

    def trips(self, n: int) -> int:
        return self.trip_a * n + self.trip_b

    def segment(self, seg: Seg) -> tuple[Step, ...]:
        return (self.pro, self.body, self.epi)[seg]

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.pro + self.body + self.epi

    def length(self, n: int) -> int:
        return len(self.pro) + len(self.body) * self.trips(n) + len(self.epi)

    def offsets(self) -> set[int]:
        """Every device offset the program names."""
        found = {0}
        for s in self.steps:
            for use in (s.sem, s.recv, s.send):
                if use is not None:
                    found.add(use.offset)
            found.update(a.offset for a in s.accesses)
        return found

    def shape_text(self) -> str:
        rounds = f"{self.trip_a}*N" if self.trip_a not in (0, 1) else ("N" if self.trip_a == 1 else "")
        if self.trip_b:
            rounds = f"{rounds} {'+' if self.trip_b > 0 else '-'} {abs(self.trip_b)}" if rounds else str(self.trip_b)
        loop = f"a loop of {rounds or 0} rounds of {len(self.body)}" if self.body else "no loop"
        return f"a prologue of {len(self.pro)} instructions, {loop}, an epilogue of {len(self.epi)}"


# --- which protocols a template can describe ------------------------------------------------------


def class_problem(p: ir.Protocol) -> str | None:
    """Why `p` is outside the class of protocols a template describes, or None."""
    if p.backend is not ir.Backend.TPU:
        return "only TPU protocols are covered (GPU kernels are checked one device count at a time)"
    if p.cores != 1 or len(p.threads) != p.devices or any(t.sub for t in p.threads):
        return f"the kernel runs {len(p.threads)} threads on {p.devices} devices: only one thread per device is covered"
    if p.inputs:
        return "the protocol has inputs (" + ", ".join(i.name for i in p.inputs) + "): only fixed programs are covered"
    if p.data_uses:
        use = p.data_uses[0]
        return f"{use.what} at {use.loc} was computed from the script's data: the template would hold for this data only"
    if p.kernels:
        return "a program of several kernels is not covered"
    for t in p.threads:
        for instr in t.body:
            problem = _instr_problem(instr)
            if problem:
                return f"{problem} at {instr.loc}"
    return None


def _instr_problem(instr: ir.Instr) -> str | None:
    if type(instr) not in _OPS:
        return f"{type(instr).__name__} (control flow or semaphore reads that depend on values) is not covered"
    if isinstance(instr, ir.Wait) and not instr.decrement:
        return "a non-decrementing wait is not covered"
    if isinstance(instr, (ir.Load, ir.Store)) and instr.device is not None:
        return "a load or store of another device's memory is not covered"
    if isinstance(instr, ir.DmaStart) and (instr.dst_device is not None or instr.core not in (None, 0)):
        return "a copy to another core or into a third device's memory is not covered"
    for ref in _semrefs(instr):
        if ref.core not in (None, 0):  # one core per device: core 0 is the device's only one
            return "a semaphore of another core is not covered"
    for value in _leaves(instr):
        if isinstance(value, (ir.Reg, ir.BinOp)):
            return f"a value computed at run time ({value}) is not covered"
    return None


def _semrefs(instr: ir.Instr) -> list[ir.SemRef]:
    return [getattr(instr, f.name) for f in fields(instr) if isinstance(getattr(instr, f.name), ir.SemRef)]


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, (ir.Reg, ir.BinOp)):
        yield value
    elif is_dataclass(value) and not isinstance(value, (ir.Loc, type)):
        for f in fields(value):
            if f.name != "loc":
                yield from _leaves(getattr(value, f.name))
    elif isinstance(value, tuple):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


# --- the default device barrier ---------------------------------------------------------------------

# The semaphores of the barrier XLA runs before the body when a kernel sets no collective_id,
# as semcheck/lower/tpu_kernel.py models it (its semaphores named in ir.py):
# every device signals `arrive` on device 0, device 0 waits for all and signals `release` on
# each, every device waits for its `release`. Device 0 runs more of it than the others, so the
# programs are not rotations of one another; but it is one global barrier whatever N is.
BARRIER_ARRIVE, BARRIER_RELEASE = ir.DEVICE_BARRIER_ARRIVE, ir.DEVICE_BARRIER_RELEASE


def without_default_barrier(p: ir.Protocol) -> tuple[ir.Protocol, bool]:
    """`p` with the default device barrier taken out of every thread, and whether it had one.

    Taking it out only removes synchronization: every schedule of `p` is one of the result's
    (so a race or block the proof excludes there is excluded in `p`), and it never blocks (every
    device reaches it right after entering), so the two end where the other ends. What it adds
    is that no device runs any of the body before every device entered: the early arrivals it
    rules out are not asked of the proof (`Template.entered_together`)."""
    names = {d.name for d in p.semaphores}
    if not {BARRIER_ARRIVE, BARRIER_RELEASE} <= names or p.cores != 1:
        return p, False
    threads = []
    for t in p.threads:
        body = t.body
        expected: list[ir.Instr] = [ir.Signal(body[0].loc, ir.SemRef(BARRIER_ARRIVE, 0, 0, 0), 1)]
        if t.device == 0:
            expected.append(ir.Wait(body[0].loc, ir.SemRef(BARRIER_ARRIVE), p.devices))
            expected += [ir.Signal(body[0].loc, ir.SemRef(BARRIER_RELEASE, 0, e, 0), 1) for e in range(p.devices)]
        expected.append(ir.Wait(body[0].loc, ir.SemRef(BARRIER_RELEASE), 1))
        head = len(expected)
        if not isinstance(body[0], ir.KernelEntry) or list(body[1:1 + head]) != [
                replace(e, loc=i.loc) for e, i in zip(expected, body[1:1 + head])]:
            return p, False
        uses = [i for i in body[1 + head:] for ref in _semrefs(i) if ref.alloc in (BARRIER_ARRIVE, BARRIER_RELEASE)]
        if uses:
            return p, False
        threads.append(replace(t, body=body[:1] + body[1 + head:]))
    semaphores = tuple(d for d in p.semaphores if d.name not in (BARRIER_ARRIVE, BARRIER_RELEASE))
    return replace(p, threads=tuple(threads), semaphores=semaphores), True


# --- shapes and holes -----------------------------------------------------------------------------


Path = tuple[Any, ...]


def _full_rank(region: ir.Region, shape: tuple[int, ...]) -> ir.Region:
    """`region` with a start and a size in every dim, as the semantics reads it."""
    rank = len(shape)
    starts = tuple(region.start) + (0,) * (rank - len(region.start))
    sizes = tuple(region.size) + tuple(shape[len(region.size):])
    return ir.Region(region.buffer, starts[:rank], sizes[:rank], widened=region.widened)


def _normalized(instr: ir.Instr, shapes: Mapping[str, tuple[int, ...]]) -> ir.Instr:
    changes: dict[str, Any] = {f.name: _full_rank(v, shapes[v.buffer]) for f in fields(instr)
                               if isinstance(v := getattr(instr, f.name), ir.Region)}
    return replace(instr, **changes) if changes else instr  # type: ignore[type-var]


def _flatten(value: Any, path: Path, holes: list[tuple[Path, int]]) -> Any:
    """The value's shape (every int replaced by a placeholder), its ints appended to `holes`."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, ir.Loc)):
        return value
    if isinstance(value, int):
        holes.append((path, value))
        return "#"
    if isinstance(value, tuple):
        return tuple(_flatten(v, path + (i,), holes) for i, v in enumerate(value))
    if is_dataclass(value):
        return (type(value).__name__,) + tuple(
            (f.name, _flatten(getattr(value, f.name), path + (f.name,), holes)) for f in fields(value)
            if f.name != "widened"
        )
    raise NotParametric(f"a value of type {type(value).__name__} is not covered")


def _shapes_and_holes(p: ir.Protocol):
    shapes = {b.name: b.shape for b in p.buffers}
    out = []
    for t in sorted(p.threads, key=lambda t: t.device):
        row = []
        for instr in t.body:
            holes: list[tuple[Path, int]] = []
            shape = _flatten(_normalized(instr, shapes), (), holes)
            row.append((shape, holes))
        out.append(row)
    return out


# --- the loop ---------------------------------------------------------------------------------------


@record(frozen=True)
class Layout:
    pro: int
    body: int
    epi: int


def find_layout(shapes: list) -> Layout:
    """Prologue, body and epilogue lengths that cover the longest stretch of `shapes` by
    repeats of one body (the shortest such body)."""
    length = len(shapes)
    best = (0, 0, 0)  # (covered, -body, start)
    for period in range(1, length // 2 + 1):
        i = 0
        while i + period < length:
            if shapes[i] != shapes[i + period]:
                i += 1
                continue
            start = i
            while i + period < length and shapes[i] == shapes[i + period]:
                i += 1
            rounds = (i - start + period) // period
            if rounds >= 2 and (rounds * period, -period) > best[:2]:
                best = (rounds * period, -period, start)
    covered, negative_period, start = best
    if not covered:
        return Layout(length, 0, 0)
    return Layout(start, -negative_period, length - start - covered)


# --- fitting ------------------------------------------------------------------------------------------


def fit_template(protocols: Mapping[int, ir.Protocol], fit_at: Iterable[int]) -> Template:
    """The template of the family, fitted at the counts `fit_at` and confirmed at every
    other count of `protocols` from the smallest that fits on (`holds_from`)."""
    fit_at = sorted(fit_at)
    stripped = {n: without_default_barrier(p) for n, p in protocols.items()}
    protocols = {n: p for n, (p, _) in stripped.items()}
    barrier = {had for _, had in stripped.values()}
    if len(barrier) != 1:
        raise NotParametric("the default device barrier runs at some device counts and not at others")
    for n in sorted(protocols):
        problem = class_problem(protocols[n])
        if problem:
            raise NotParametric(f"{problem} (at N = {n})")
    rows = {n: _shapes_and_holes(protocols[n]) for n in protocols}
    for n in fit_at:
        _check_same_program(rows[n], n, protocols[n])
    biggest = fit_at[-1]
    layout = find_layout([shape for shape, _ in rows[biggest][0]])
    trips = {n: _trips(rows[n][0], layout, n) for n in fit_at}
    trip_a, trip_b = _fit_trips(trips)
    template = _fit_steps(protocols, rows, layout, fit_at, trip_a, trip_b)
    confirmed, holds_from = [], min(fit_at)
    for n in sorted(set(protocols) - set(fit_at), reverse=True):
        problem = _mismatch(template, protocols[n])
        if problem is None:
            confirmed.append(n)
            if n < holds_from:
                holds_from = n
        elif n > min(fit_at):
            raise NotParametric(f"the template fitted at N = {counts_text(fit_at)} does not hold at N = {n}: {problem}")
        else:
            break  # small counts may differ (N = 2: both neighbours are one device): checked one by one
    return replace(template, confirmed_at=tuple(sorted(confirmed)), holds_from=holds_from,
                   entered_together=barrier.pop())


def counts_text(ns: Iterable[int]) -> str:
    """Device counts as a person reads them: "2..8", or "2, 3, 8"."""
    ns = sorted(ns)
    if len(ns) > 2 and ns == list(range(ns[0], ns[-1] + 1)):
        return f"{ns[0]}..{ns[-1]}"
    return ", ".join(map(str, ns))


def _check_same_program(row, n: int, p: ir.Protocol) -> None:
    first = [shape for shape, _ in row[0]]
    for device, other in enumerate(row[1:], 1):
        theirs = [shape for shape, _ in other]
        if theirs == first:
            continue
        at = next((i for i, (a, b) in enumerate(zip(first, theirs)) if a != b), min(len(first), len(theirs)))
        sides = [_instr_text(p, d, at) if at < len(row) else f"device {d}: its end"
                 for d, row in ((0, first), (device, theirs))]
        raise NotParametric(
            f"at N = {n}, device {device} does not run device 0's program: they part at instruction {at} "
            f"({sides[0]}; {sides[1]})"
        )


def _instr_text(p: ir.Protocol, device: int, at: int) -> str:
    thread = next(t for t in p.threads if t.device == device)
    instr = thread.body[at]
    return f"device {device}: {_OPS.get(type(instr), Op.SIGNAL).value} at {instr.loc}"


def _trips(row, layout: Layout, n: int) -> int:
    middle = len(row) - layout.pro - layout.epi
    if layout.body == 0:
        if middle != 0:
            raise NotParametric(f"the program's length changes with N (device 0 runs {len(row)} instructions at N = {n}) but no loop repeats")
        return 0
    if middle < 0 or middle % layout.body:
        raise NotParametric(
            f"at N = {n} device 0's program ({len(row)} instructions) is not the prologue of {layout.pro}, "
            f"a loop of rounds of {layout.body} and the epilogue of {layout.epi} found at the largest count")
    return middle // layout.body


def _fit_trips(trips: Mapping[int, int]) -> tuple[int, int]:
    found = ex.fit([(0, 0, n, t) for n, t in trips.items()])
    if found is None or found.scale or found.k or found.d:
        raise NotParametric("the loop's number of rounds is not a*N + b: " + ", ".join(
            f"{t} at N = {n}" for n, t in sorted(trips.items())))
    return found.n, found.const


def _positions(layout: Layout, trips: int) -> list[tuple[Seg, int, int]]:
    """(segment, round, index in segment) of every position of a program."""
    out = [(Seg.PRO, 0, j) for j in range(layout.pro)]
    out += [(Seg.BODY, k, j) for k in range(trips) for j in range(layout.body)]
    out += [(Seg.EPI, 0, j) for j in range(layout.epi)]
    return out


def _fit_steps(protocols, rows, layout: Layout, fit_at, trip_a: int, trip_b: int) -> Template:
    first = protocols[fit_at[-1]]
    shape_of: dict[tuple[Seg, int], Any] = {}
    samples: dict[tuple[Seg, int, Path], list[ex.Sample]] = {}
    protos: dict[tuple[Seg, int], ir.Instr] = {}
    device0 = next(t for t in first.threads if t.device == 0)
    for n in fit_at:
        trips = trip_a * n + trip_b
        for d, row in enumerate(rows[n]):
            for position, (shape, holes) in zip(_positions(layout, trips), row):
                seg, k, j = position
                key = (seg, j)
                if shape_of.setdefault(key, shape) != shape:
                    raise NotParametric(
                        f"at N = {n}, round {k} of device {d} differs from the loop body at instruction {j} "
                        f"({_instr_text(protocols[n], d, _index(layout, seg, k, j))})")
                for path, value in holes:
                    samples.setdefault((seg, j, path), []).append((d, k, n, value))
    shapes = {b.name: b.shape for b in first.buffers}
    for seg, k, j in _positions(layout, trip_a * fit_at[-1] + trip_b):
        protos.setdefault((seg, j), _normalized(device0.body[_index(layout, seg, k, j)], shapes))
    fitted: dict[tuple[Seg, int], dict[Path, Expr]] = {}
    for (seg, j, path), values in samples.items():
        found = ex.fit(values)
        if found is None:
            instr = protos[(seg, j)]
            raise NotParametric(
                f"{_OPS[type(instr)].value} at {instr.loc}: its {_path_text(path)} is no expression in d, k and N "
                f"of the forms covered (values " + _values_text(values) + ")")
        fitted.setdefault((seg, j), {})[path] = found
    sem_sizes, sem_decls = _fit_decls(protocols, fit_at)
    buffer_shapes = _fit_buffers(protocols, fit_at)
    steps = {seg: tuple(_step(seg, j, protos[(seg, j)], fitted.get((seg, j), {}), sem_decls, shape_of[(seg, j)])
                        for j in range((layout.pro, layout.body, layout.epi)[seg])) for seg in Seg}
    return Template(
        name=first.name, loc=first.loc, frontend=first.frontend,
        pro=steps[Seg.PRO], body=steps[Seg.BODY], epi=steps[Seg.EPI], trip_a=trip_a, trip_b=trip_b,
        sem_sizes=sem_sizes, sem_decls=sem_decls, buffer_shapes=buffer_shapes,
        fitted_at=tuple(fit_at), confirmed_at=(), holds_from=min(fit_at),
    )


def _index(layout: Layout, seg: Seg, k: int, j: int) -> int:
    return j if seg is Seg.PRO else layout.pro + k * layout.body + j if seg is Seg.BODY else -layout.epi + j


def _path_text(path: Path) -> str:
    return ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in path).replace(".[", "[")


def _values_text(values: list[ex.Sample]) -> str:
    shown = ", ".join(f"{v} at d={d} k={k} N={n}" for d, k, n, v in values[:4])
    return shown + (", ..." if len(values) > 4 else "")


def _fit_decls(protocols, fit_at) -> tuple[dict[str, Expr], dict[str, ir.SemDecl]]:
    sizes: dict[str, Expr] = {}
    decls: dict[str, ir.SemDecl] = {}
    names = [tuple(s.name for s in protocols[n].semaphores) for n in fit_at]
    if len(set(names)) != 1:
        raise NotParametric("the kernel allocates different semaphores at different device counts")
    for decl in protocols[fit_at[-1]].semaphores:
        same = {replace(protocols[n].semaphore(decl.name), size=0, loc=ir.UNKNOWN_LOC) for n in fit_at}
        if len(same) != 1:
            raise NotParametric(f"semaphore {decl.name} changes kind or origin with N")
        size = ex.fit([(0, 0, n, protocols[n].semaphore(decl.name).size) for n in fit_at])
        if size is None or size.uses_d or size.uses_k:
            raise NotParametric(f"semaphore array {decl.name}'s size is not a*N + b")
        sizes[decl.name], decls[decl.name] = size, decl
    return sizes, decls


def _fit_buffers(protocols, fit_at) -> dict[str, tuple[Expr, ...]]:
    out: dict[str, tuple[Expr, ...]] = {}
    names = [tuple(b.name for b in protocols[n].buffers) for n in fit_at]
    if len(set(names)) != 1:
        raise NotParametric("the kernel allocates different buffers at different device counts")
    for i, decl in enumerate(protocols[fit_at[-1]].buffers):
        shapes = {n: protocols[n].buffers[i].shape for n in fit_at}
        if len({len(s) for s in shapes.values()}) != 1:
            raise NotParametric(f"buffer {decl.name}'s rank changes with N")
        dims = []
        for dim in range(len(decl.shape)):
            found = ex.fit([(0, 0, n, s[dim]) for n, s in shapes.items()])
            if found is None or found.uses_d or found.uses_k:
                raise NotParametric(f"buffer {decl.name}'s shape is not a*N + b in every dim")
            dims.append(found)
        out[decl.name] = tuple(dims)
    return out


def _step(seg: Seg, j: int, instr: ir.Instr, holes: Mapping[Path, Expr], decls: Mapping[str, ir.SemDecl],
          shape: Any) -> Step:
    return replace(_typed_step(seg, j, instr, holes, decls), holes=tuple(holes.items()), shape=shape)


def _typed_step(seg: Seg, j: int, instr: ir.Instr, holes: Mapping[Path, Expr],
                decls: Mapping[str, ir.SemDecl]) -> Step:
    op = _OPS[type(instr)]

    def value(*path) -> Expr:
        return holes[path]

    def constant(*path) -> int:
        found = holes[path].constant
        if found is None:
            raise NotParametric(f"{op.value} at {instr.loc}: its {_path_text(path)} ({holes[path]}) must be one number "
                                "for every device, round and N")
        return found

    def sem(name: str, device: Any) -> SemUse:
        ref = getattr(instr, name)
        index = value(name, "index")
        if index.uses_d:
            raise NotParametric(f"{op.value} at {instr.loc}: semaphore {ref.alloc}'s index ({index}) depends on the "
                                "device: the devices' programs are not rotations of one another")
        if index.scale and index.modulus == ex.N_MOD:
            raise NotParametric(f"{op.value} at {instr.loc}: semaphore {ref.alloc}'s index ({index}) wraps mod N")
        return SemUse(ref.alloc, index, _offset(device, instr, op))

    def area(name: str, offset: int, write: bool) -> Area:
        region = getattr(instr, name)
        rank = len(region.start)
        return Area(region.buffer, tuple(value(name, "start", i) for i in range(rank)),
                    tuple(value(name, "size", i) for i in range(rank)), offset, write)

    if op is Op.SIGNAL:
        ref = instr.sem  # type: ignore[attr-defined]
        device = None if ref.device is None else value("sem", "device")
        return Step(seg, j, op, instr.loc, sem=sem("sem", device), amount=constant("inc"))
    if op is Op.WAIT:
        return Step(seg, j, op, instr.loc, sem=sem("sem", None), amount=constant("value"))
    if op is Op.DMA_WAIT:
        return Step(seg, j, op, instr.loc, sem=sem("sem", None), amount=constant("nbytes"))
    if op is Op.DMA_START:
        assert isinstance(instr, ir.DmaStart)
        target = 0 if instr.device is None else _offset(value("device"), instr, op)
        nbytes = constant("nbytes")
        recv = sem("recv_sem", None)
        recv = replace(recv, offset=target)
        send = sem("send_sem", None) if instr.send_sem is not None else None
        return Step(
            seg, j, op, instr.loc, recv=recv, recv_inc=dma_increment(decls[recv.alloc], nbytes),
            send=send, send_inc=dma_increment(decls[send.alloc], nbytes) if send else 0,
            accesses=(area("src", 0, False), area("dst", target, True)), target=target,
            bounds_checked=instr.bounds_checked,
        )
    if op in (Op.LOAD, Op.STORE):
        assert isinstance(instr, (ir.Load, ir.Store))
        checked = ir.window_checked(instr)
        view = area("view", 0, False) if checked and instr.view is not None else None
        return Step(seg, j, op, instr.loc, accesses=(area("region", 0, op is Op.STORE),), checked=checked, view=view)
    return Step(seg, j, op, instr.loc)


def _offset(device: Expr | None, instr: ir.Instr, op: Op) -> int:
    if device is None:
        return 0
    offset = device.device_offset()
    if offset is None:
        raise NotParametric(
            f"{op.value} at {instr.loc} names device {device}: only a ring neighbour (d + c) mod N, "
            "for one constant c, is covered")
    return offset


# --- confirming ----------------------------------------------------------------------------------------


def _mismatch(template: Template, p: ir.Protocol) -> str | None:
    """How `p` departs from the template at its N, or None when it is the template there."""
    n = p.devices
    p, _ = without_default_barrier(p)
    problem = class_problem(p)
    if problem:
        return problem
    trips = template.trips(n)
    if trips < 0:
        return f"the loop would run {trips} rounds"
    rows = _shapes_and_holes(p)
    layout = Layout(len(template.pro), len(template.body), len(template.epi))
    expected = template.length(n)
    for d, row in enumerate(rows):
        if len(row) != expected:
            return f"device {d} runs {len(row)} instructions, the template {expected}"
        for (seg, k, j), (shape, holes) in zip(_positions(layout, trips), row):
            step = template.segment(seg)[j]
            instr = next(t for t in p.threads if t.device == d).body[_index(layout, seg, k, j)]
            if shape != step.shape:
                return f"device {d}, instruction {_index(layout, seg, k, j)} is {type(instr).__name__} at {instr.loc}"
            fitted = dict(step.holes)
            for path, value in holes:
                form = fitted.get(path)
                if form is None or form.value(d, k, n) != value:
                    return (f"device {d}, {step.describe()} (round {k}): its {_path_text(path)} is {value}, "
                            f"the template gives {form.value(d, k, n) if form else 'none'}")
    for decl in p.semaphores:
        size = template.sem_sizes.get(decl.name)
        if size is None or size.value(0, 0, n) != decl.size:
            return f"semaphore {decl.name} has size {decl.size}"
    for buffer in p.buffers:
        dims = template.buffer_shapes.get(buffer.name)
        if dims is None or tuple(e.value(0, 0, n) for e in dims) != buffer.shape:
            return f"buffer {buffer.name} has shape {buffer.shape}"
    return None
