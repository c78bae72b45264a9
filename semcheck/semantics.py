"""The one definition of behaviour: states, enabled actions and successors of a Protocol.

Shaped like a stateright model: `initial_states()`, `enabled(state)`, `step(state, action)`.
Engines explore it; `properties.py` judges its states; nothing else decides what an
instruction does. Every rule follows ../shared/reference/pallas-semantics.md:

* signal: atomically add `inc` to the target semaphore; never blocks. Without a core
  index the target core is the signaller's own (JAX's TPU interpreter uses core 0 instead;
  see the note in the README).
* wait: enabled iff `count >= value`; a decrementing wait then subtracts `value`.
* dma_start: schedules a receive-side completion on the target's receive semaphore and,
  for a remote copy, a send-side completion on the issuer's send semaphore. Completions are
  environment events that happen in any order, at any later point, so two copies in flight
  on one semaphore may finish either way round. DMA semaphores count bytes; a REGULAR
  semaphore given to a DMA gains 1 (TPU v6+).
* dma_wait: a decrementing wait for `nbytes` on a local DMA semaphore.

A state is a tuple of immutable parts, so it hashes and compares by value.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, NamedTuple

from semcheck import intervals, ir
from semcheck.ir import Backend, Scope, SemKind, SemOrigin


class ProtocolError(Exception):
    """The protocol is malformed (undeclared semaphore, undefined register, bad jump)."""

    def __init__(self, message: str, loc: ir.Loc | None = None):
        super().__init__(f"{loc}: {message}" if loc else message)
        self.loc = loc


# --- faults: what a thread hits when an instruction names something that does not exist -------

INVALID_DEVICE = "invalid_device_id"
INVALID_CORE = "invalid_core_index"
INVALID_SEM_INDEX = "invalid_semaphore_index"


class _Fault(Exception):
    def __init__(self, kind: str, detail: str):
        self.kind, self.detail = kind, detail


# --- state and actions -----------------------------------------------------------------------

FAULTED = -1  # the pc of a thread that executed an instruction naming a non-existent target

SEND, RECV = 0, 1


class Event(NamedTuple):
    """A pending DMA completion. Identical events are interchangeable (a multiset)."""

    side: int  # SEND or RECV
    issuer: int  # thread index that started the copy
    start_pc: int  # where it started (for messages and the graph)
    sem: int  # semaphore instance that completion adds to
    inc: int


class State(NamedTuple):
    pcs: tuple[int, ...]
    regs: tuple[tuple[int, ...], ...]
    sems: tuple[int, ...]
    events: tuple[Event, ...]  # sorted
    faults: tuple[tuple[int, int, str, str], ...]  # (thread, pc, kind, detail), sorted
    inputs: tuple[int, ...]


# An action is ("t", thread index) for the thread's next instruction, or ("e", Event).
Action = tuple


def thread_action(t: int) -> Action:
    return ("t", t)


def event_action(e: Event) -> Action:
    return ("e", e)


# --- footprints: which semaphore instances an action may touch, as bitmasks --------------------


class Footprint(NamedTuple):
    inc: int = 0  # may add to
    dec: int = 0  # decrementing wait on
    wait: int = 0  # non-decrementing wait on
    read: int = 0  # reads

    def __or__(self, other: "Footprint") -> "Footprint":  # type: ignore[override]
        return Footprint(
            self.inc | other.inc,
            self.dec | other.dec,
            self.wait | other.wait,
            self.read | other.read,
        )


EMPTY = Footprint()


def conflict(a: Footprint, b: Footprint) -> bool:
    """True when two actions of different actors may not commute.

    Additions commute with each other and with waits (an addition never disables a wait);
    a read does not commute with anything that changes the count; a decrementing wait does
    not commute with another wait or a read of the same semaphore (competing waiters).
    """
    return bool(
        (a.inc & b.read)
        | (a.read & (b.inc | b.dec))
        | (a.dec & (b.dec | b.wait | b.read))
        | (b.dec & (a.wait | a.read))
    )


# --- semaphore instances ----------------------------------------------------------------------


@dataclass(frozen=True)
class SemInstance:
    decl: ir.SemDecl
    index: int
    device: int
    core: int | None  # None for device-scope allocations
    cores: int = 1  # cores per device; names leave the core out when there is one

    @property
    def label(self) -> str:
        idx = f"[{self.index}]" if self.decl.size > 1 else ""
        return f"{self.decl.name}{idx} on {ir.thread_name(self.device, self.core, 0, self.cores)}"

    @property
    def short(self) -> str:
        idx = f"[{self.index}]" if self.decl.size > 1 else ""
        core = f"c{self.core}" if self.core is not None and self.cores > 1 else ""
        return f"{self.decl.name}{idx}@d{self.device}{core}"


# --- the system --------------------------------------------------------------------------------


class System:
    """A Protocol compiled for fast exploration."""

    def __init__(self, protocol: ir.Protocol):
        self.protocol = protocol
        self.threads = protocol.threads
        self.bodies = [t.body for t in protocol.threads]
        self.backend = protocol.backend
        self._allocs: dict[str, tuple[ir.SemDecl, int]] = {}
        self.instances: list[SemInstance] = []
        for decl in protocol.semaphores:
            if decl.name in self._allocs:
                raise ProtocolError(f"semaphore {decl.name!r} declared twice", decl.loc)
            self._allocs[decl.name] = (decl, len(self.instances))
            for device in range(protocol.devices):
                cores = range(protocol.cores) if decl.scope is Scope.CORE else (None,)
                for core in cores:
                    for index in range(decl.size):
                        self.instances.append(SemInstance(decl, index, device, core, protocol.cores))
        self.input_index = {inp.name: i for i, inp in enumerate(protocol.inputs)}
        self.registers: list[dict[str, int]] = [
            _registers_written(t.body) for t in protocol.threads
        ]
        for t, thread in enumerate(self.threads):
            self._validate(t, thread)
        self.footprints = [
            [self._static_footprint(t, instr) for instr in body]
            for t, body in enumerate(self.bodies)
        ]
        self.futures = [
            _future_footprints(body, fps) for body, fps in zip(self.bodies, self.footprints)
        ]

    # -- construction helpers --

    def _validate(self, t: int, thread: ir.Thread) -> None:
        p = self.protocol
        if not (0 <= thread.device < p.devices and 0 <= thread.core < p.cores):
            raise ProtocolError(f"thread {thread.name} lies outside {p.devices}x{p.cores}")
        for pc, instr in enumerate(thread.body):
            for ref in _sem_refs(instr):
                if ref.alloc not in self._allocs:
                    raise ProtocolError(f"undeclared semaphore {ref.alloc!r}", instr.loc)
            for name in _registers_read(instr):
                if name not in self.registers[t] and name not in self.input_index:
                    raise ProtocolError(f"register {name!r} is read but never set", instr.loc)
            if isinstance(instr, (ir.Branch, ir.Jump)) and not (
                0 <= instr.target <= len(thread.body)
            ):
                raise ProtocolError(f"jump target {instr.target} out of range", instr.loc)

    def _candidates(self, t: int, ref: ir.SemRef) -> int:
        """Bitmask of every instance `ref` may resolve to (exact when it is constant)."""
        decl, base = self._allocs[ref.alloc]
        thread = self.threads[t]
        devices = (
            [thread.device if ref.device is None else ref.device]
            if ir.is_constant(ref.device)
            else range(self.protocol.devices)
        )
        if decl.scope is Scope.DEVICE:
            cores: list = [None]
        elif ir.is_constant(ref.core):
            cores = [thread.core if ref.core is None else ref.core]
        else:
            cores = list(range(self.protocol.cores))
        indices = [ref.index] if isinstance(ref.index, int) else range(decl.size)
        mask = 0
        for device, core, index in itertools.product(devices, cores, indices):
            sid = self._instance_id(decl, base, device, core, index)
            if sid is not None:
                mask |= 1 << sid
        return mask

    def _instance_id(self, decl, base, device, core, index) -> int | None:
        p = self.protocol
        if not (0 <= device < p.devices and 0 <= index < decl.size):
            return None
        if decl.scope is Scope.DEVICE:
            return base + device * decl.size + index
        if not (0 <= core < p.cores):
            return None
        return base + (device * p.cores + core) * decl.size + index

    def _static_footprint(self, t: int, instr: ir.Instr) -> Footprint:
        rule = FOOTPRINT_RULES.get(type(instr))
        return rule(self, t, instr) if rule else EMPTY

    # -- evaluation --

    def eval(self, op: ir.Operand, t: int, state: State) -> int:
        if isinstance(op, int):
            return op
        if isinstance(op, ir.Reg):
            slot = self.registers[t].get(op.name)
            if slot is not None:
                return state.regs[t][slot]
            return state.inputs[self.input_index[op.name]]
        return _apply(op.op, self.eval(op.a, t, state), self.eval(op.b, t, state))

    def resolve(self, t: int, ref: ir.SemRef, state: State) -> int:
        """The instance id `ref` names for thread `t` in `state`, or a _Fault."""
        decl, base = self._allocs[ref.alloc]
        thread = self.threads[t]
        device = thread.device if ref.device is None else self.eval(ref.device, t, state)
        core = thread.core if ref.core is None else self.eval(ref.core, t, state)
        index = self.eval(ref.index, t, state)
        p = self.protocol
        if not 0 <= device < p.devices:
            raise _Fault(
                INVALID_DEVICE,
                f"device id {device} is outside the mesh of {p.devices} devices (0..{p.devices - 1})",
            )
        if decl.scope is Scope.CORE and not 0 <= core < p.cores:
            raise _Fault(
                INVALID_CORE,
                f"core index {core} does not exist: each device has {p.cores} core(s)",
            )
        if not 0 <= index < decl.size:
            raise _Fault(
                INVALID_SEM_INDEX,
                f"index {index} is outside semaphore array {decl.name} of size {decl.size}",
            )
        sid = self._instance_id(decl, base, device, core, index)
        assert sid is not None
        return sid

    # -- the transition system --

    def initial_states(self) -> list[State]:
        return list(self.iter_initial_states())

    def iter_initial_states(self):
        """One start state per combination of input values, lazily (there may be billions)."""
        ranges = [range(inp.lo, inp.hi + 1) for inp in self.protocol.inputs]
        return (self.initial_state(values) for values in _lazy_product(ranges))

    def initial_state(self, inputs: tuple[int, ...]) -> State:
        """The start state for one value of every input (in `protocol.inputs` order)."""
        pcs = tuple(0 for _ in self.threads)
        regs = tuple(tuple(0 for _ in r) for r in self.registers)
        sems = tuple(0 for _ in self.instances)
        return State(pcs, regs, sems, (), (), tuple(inputs))

    def current(self, state: State, t: int) -> ir.Instr | None:
        pc = state.pcs[t]
        body = self.bodies[t]
        return body[pc] if 0 <= pc < len(body) else None

    def finished(self, state: State, t: int) -> bool:
        return state.pcs[t] == len(self.bodies[t])

    def blocked_wait(self, state: State, t: int) -> tuple[int, int, int] | None:
        """(semaphore, needed, current count) when thread t sits at a wait it cannot pass."""
        instr = self.current(state, t)
        rule = WAIT_RULES.get(type(instr))
        if rule is None:
            return None
        try:
            sid, need = rule(self, t, instr, state)
        except _Fault:
            return None  # executing it will fault: that is a move, not a block
        have = state.sems[sid]
        return None if have >= need else (sid, need, have)

    def enabled(self, state: State) -> list[Action]:
        actions: list[Action] = []
        for t, body in enumerate(self.bodies):
            pc = state.pcs[t]
            if 0 <= pc < len(body) and self.blocked_wait(state, t) is None:
                actions.append(("t", t))
        actions.extend(("e", e) for e in _distinct(state.events))
        return actions

    def step(self, state: State, action: Action) -> State:
        kind, what = action
        if kind == "e":
            return _complete(state, what)
        t = what
        instr = self.bodies[t][state.pcs[t]]
        try:
            return EXEC_RULES[type(instr)](self, t, instr, state)
        except _Fault as fault:
            pcs = list(state.pcs)
            pcs[t] = FAULTED
            faults = tuple(sorted(state.faults + ((t, state.pcs[t], fault.kind, fault.detail),)))
            return state._replace(pcs=tuple(pcs), faults=faults)

    # -- what the reduction and the properties need --

    def action_footprint(self, state: State, action: Action) -> Footprint:
        kind, what = action
        if kind == "e":  # a negative size lowers the count: it can disable a wait
            return Footprint(inc=1 << what.sem, dec=(1 << what.sem) if what.inc < 0 else 0)
        return self.footprints[what][state.pcs[what]]

    def future_footprint(self, state: State, t: int) -> Footprint:
        """Everything thread t may still do, from its current instruction on."""
        pc = state.pcs[t]
        if not 0 <= pc < len(self.bodies[t]):
            return EMPTY
        return self.futures[t][pc]

    def thread_name(self, t: int) -> str:
        th = self.threads[t]
        return ir.thread_name(th.device, th.core, th.sub, self.protocol.cores)


# --- helpers over states ---------------------------------------------------------------------


def _lazy_product(ranges: list[range]):
    """itertools.product without materializing its arguments (a range may be huge)."""
    if not ranges:
        yield ()
        return
    for head in ranges[0]:
        for tail in _lazy_product(ranges[1:]):
            yield (head, *tail)


def _distinct(events: tuple[Event, ...]):
    previous = None
    for e in events:
        if e != previous:
            yield e
        previous = e


def _complete(state: State, event: Event) -> State:
    events = list(state.events)
    events.remove(event)
    sems = list(state.sems)
    sems[event.sem] += event.inc
    return state._replace(sems=tuple(sems), events=tuple(events))


def _advance(state: State, t: int, *, to: int | None = None, sems=None, regs=None, events=None):
    pcs = list(state.pcs)
    pcs[t] = pcs[t] + 1 if to is None else to
    return State(
        tuple(pcs),
        state.regs if regs is None else regs,
        state.sems if sems is None else sems,
        state.events if events is None else events,
        state.faults,
        state.inputs,
    )


def _add(sems: tuple[int, ...], sid: int, delta: int) -> tuple[int, ...]:
    lst = list(sems)
    lst[sid] += delta
    return tuple(lst)


def _set_reg(system: System, state: State, t: int, name: str, value: int):
    regs = list(state.regs)
    row = list(regs[t])
    row[system.registers[t][name]] = value
    regs[t] = tuple(row)
    return tuple(regs)


_OPS: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b if b else 0,
    "mod": lambda a, b: a % b if b else 0,
    "min": min,
    "max": max,
    "eq": lambda a, b: int(a == b),
    "ne": lambda a, b: int(a != b),
    "lt": lambda a, b: int(a < b),
    "le": lambda a, b: int(a <= b),
    "gt": lambda a, b: int(a > b),
    "ge": lambda a, b: int(a >= b),
    "and": lambda a, b: int(bool(a) and bool(b)),
    "or": lambda a, b: int(bool(a) or bool(b)),
}


def _apply(op: str, a: int, b: int) -> int:
    return _OPS[op](a, b)


def dma_increment(decl: ir.SemDecl, nbytes: int) -> int:
    """What one DMA completion adds: bytes on a DMA semaphore, 1 on a REGULAR one (v6+)."""
    return nbytes if decl.kind is SemKind.DMA else 1


# --- execution rules: one small function per instruction ----------------------------------------


def _exec_signal(system: System, t: int, instr: ir.Signal, state: State) -> State:
    sid = system.resolve(t, instr.sem, state)
    return _advance(state, t, sems=_add(state.sems, sid, system.eval(instr.inc, t, state)))


def _exec_wait(system: System, t: int, instr: ir.Wait, state: State) -> State:
    sid = system.resolve(t, instr.sem, state)
    if not instr.decrement:
        return _advance(state, t)
    return _advance(state, t, sems=_add(state.sems, sid, -system.eval(instr.value, t, state)))


def _exec_dma_wait(system: System, t: int, instr: ir.DmaWait, state: State) -> State:
    sid = system.resolve(t, instr.sem, state)
    return _advance(state, t, sems=_add(state.sems, sid, -system.eval(instr.nbytes, t, state)))


def _exec_read(system: System, t: int, instr: ir.Read, state: State) -> State:
    sid = system.resolve(t, instr.sem, state)
    return _advance(state, t, regs=_set_reg(system, state, t, instr.dst, state.sems[sid]))


def _exec_assign(system: System, t: int, instr: ir.Assign, state: State) -> State:
    value = system.eval(instr.value, t, state)
    return _advance(state, t, regs=_set_reg(system, state, t, instr.dst, value))


def _exec_dma_start(system: System, t: int, instr: ir.DmaStart, state: State) -> State:
    target = ir.SemRef(instr.recv_sem.alloc, instr.recv_sem.index, instr.device, instr.core)
    recv = system.resolve(t, target, state)
    nbytes = system.eval(instr.nbytes, t, state)
    pc = state.pcs[t]
    new = [Event(RECV, t, pc, recv, dma_increment(system.instances[recv].decl, nbytes))]
    if instr.send_sem is not None:
        send = system.resolve(t, instr.send_sem, state)
        new.append(Event(SEND, t, pc, send, dma_increment(system.instances[send].decl, nbytes)))
    return _advance(state, t, events=tuple(sorted(state.events + tuple(new))))


def _exec_nothing(system: System, t: int, instr: ir.Instr, state: State) -> State:
    return _advance(state, t)


def _exec_branch(system: System, t: int, instr: ir.Branch, state: State) -> State:
    taken = system.eval(instr.cond, t, state) != 0
    return _advance(state, t, to=instr.target if taken else None)


def _exec_jump(system: System, t: int, instr: ir.Jump, state: State) -> State:
    return _advance(state, t, to=instr.target)


EXEC_RULES: dict[type, Callable[..., State]] = {
    ir.Signal: _exec_signal,
    ir.Wait: _exec_wait,
    ir.DmaWait: _exec_dma_wait,
    ir.Read: _exec_read,
    ir.Assign: _exec_assign,
    ir.DmaStart: _exec_dma_start,
    ir.Load: _exec_nothing,
    ir.Store: _exec_nothing,
    ir.KernelEntry: _exec_nothing,
    ir.KernelExit: _exec_nothing,
    ir.Branch: _exec_branch,
    ir.Jump: _exec_jump,
}


# --- when a thread is blocked: (semaphore, amount needed) of the wait it sits at ----------------


def _wait_need(system: System, t: int, instr: ir.Wait, state: State):
    return system.resolve(t, instr.sem, state), system.eval(instr.value, t, state)


def _dma_wait_need(system: System, t: int, instr: ir.DmaWait, state: State):
    return system.resolve(t, instr.sem, state), system.eval(instr.nbytes, t, state)


WAIT_RULES: dict[type, Callable[..., tuple[int, int]]] = {
    ir.Wait: _wait_need,
    ir.DmaWait: _dma_wait_need,
}


# --- static footprints: one small function per instruction that touches a semaphore ------------


# An amount that may be negative (over the inputs' ranges; registers are unbounded) turns an
# addition into a possible subtraction, which can disable a wait, and a decrement into a
# possible addition, which can enable one: such an action counts as both.
def _may_be_negative(system: System, t: int, amount: ir.Operand) -> bool:
    if isinstance(amount, int):
        return amount < 0
    inputs = system.protocol.inputs

    def reg_bounds(name: str):
        if name in system.registers[t] or name not in system.input_index:
            return intervals.UNBOUNDED
        inp = inputs[system.input_index[name]]
        return (inp.lo, inp.hi)

    return intervals.bounds(amount, reg_bounds)[0] < 0


def _fp_signal(system: System, t: int, instr: ir.Signal) -> Footprint:
    mask = system._candidates(t, instr.sem)
    return Footprint(inc=mask, dec=mask if _may_be_negative(system, t, instr.inc) else 0)


def _fp_wait(system: System, t: int, instr: ir.Wait) -> Footprint:
    mask = system._candidates(t, instr.sem)
    if not instr.decrement:
        return Footprint(wait=mask)
    return Footprint(dec=mask, inc=mask if _may_be_negative(system, t, instr.value) else 0)


def _fp_dma_wait(system: System, t: int, instr: ir.DmaWait) -> Footprint:
    mask = system._candidates(t, instr.sem)
    return Footprint(dec=mask, inc=mask if _may_be_negative(system, t, instr.nbytes) else 0)


def _fp_read(system: System, t: int, instr: ir.Read) -> Footprint:
    return Footprint(read=system._candidates(t, instr.sem))


def _fp_dma_start(system: System, t: int, instr: ir.DmaStart) -> Footprint:
    # The start itself touches no count; its completions will. Counting them here is what
    # lets the reduction see a thread's *future* additions through the copies it starts.
    target = ir.SemRef(instr.recv_sem.alloc, instr.recv_sem.index, instr.device, instr.core)
    mask = system._candidates(t, target)
    if instr.send_sem is not None:
        mask |= system._candidates(t, instr.send_sem)
    return Footprint(inc=mask, dec=mask if _may_be_negative(system, t, instr.nbytes) else 0)


FOOTPRINT_RULES: dict[type, Callable[..., Footprint]] = {
    ir.Signal: _fp_signal,
    ir.Wait: _fp_wait,
    ir.DmaWait: _fp_dma_wait,
    ir.Read: _fp_read,
    ir.DmaStart: _fp_dma_start,
}


def _future_footprints(body: tuple[ir.Instr, ...], fps: list[Footprint]) -> list[Footprint]:
    """future[pc] = union of the footprints of every instruction reachable from pc."""
    n = len(body)
    future = list(fps)
    succs = [_successors(pc, instr, n) for pc, instr in enumerate(body)]
    changed = True
    while changed:  # one backward pass suffices for straight-line code; loops need more
        changed = False
        for pc in range(n - 1, -1, -1):
            acc = fps[pc]
            for s in succs[pc]:
                if s < n:
                    acc = acc | future[s]
            if acc != future[pc]:
                future[pc] = acc
                changed = True
    return future


def _successors(pc: int, instr: ir.Instr, n: int) -> tuple[int, ...]:
    if isinstance(instr, ir.Jump):
        return (instr.target,)
    if isinstance(instr, ir.Branch):
        return (pc + 1, instr.target)
    return (pc + 1,)


# --- static facts about instructions ------------------------------------------------------------


def _sem_refs(instr: ir.Instr) -> list[ir.SemRef]:
    if isinstance(instr, ir.DmaStart):
        return [instr.recv_sem] + ([instr.send_sem] if instr.send_sem else [])
    sem = getattr(instr, "sem", None)
    return [sem] if isinstance(sem, ir.SemRef) else []


def _operands(instr: ir.Instr) -> list[ir.Operand | None]:
    ops: list[ir.Operand | None] = []
    for ref in _sem_refs(instr):
        ops += [ref.index, ref.device, ref.core]
    for name in ("inc", "value", "nbytes", "cond", "device", "core"):
        if hasattr(instr, name):
            ops.append(getattr(instr, name))
    for name in ("region", "src", "dst"):
        region = getattr(instr, name, None)
        if isinstance(region, ir.Region):
            ops.extend(region.start)
    return ops


def _registers_read(instr: ir.Instr) -> frozenset[str]:
    names: frozenset[str] = frozenset()
    for op in _operands(instr):
        names |= ir.registers_of(op)
    return names


def _registers_written(body: tuple[ir.Instr, ...]) -> dict[str, int]:
    names = sorted({i.dst for i in body if isinstance(i, (ir.Read, ir.Assign))})
    return {name: slot for slot, name in enumerate(names)}


def must_be_zero_at_exit(backend: Backend, decl: ir.SemDecl) -> bool:
    """TPU: scratch, scoped and barrier semaphores must be 0 when the kernel ends (the
    runtime crashes otherwise); semaphores handed to another kernel are exempt. GPU: GMEM
    semaphores are zero-filled before each launch, so nothing is required."""
    if backend is Backend.GPU:
        return False
    return decl.origin in (SemOrigin.SCRATCH, SemOrigin.SCOPED, SemOrigin.BARRIER)
