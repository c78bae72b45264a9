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
* memory: a copy reads its source from its start until its send side completes (its
  receive side, for a local copy) and writes its destination until its receive side
  completes. A load, store or copy start that overlaps a pending copy's access, one of the
  two a write, is a data race (the two are unordered in some execution).
* kernel entry and exit: entering resets the core's scratch and scoped semaphores (a fresh
  allocation per invocation); from the second invocation on, entering first requires them
  to be 0 with no copy of an earlier invocation still landing on them (TPU). A signal or
  copy that reaches a (device, core) before it entered the sender's invocation, or after it
  moved on to a later one, is `remote_before_entry`; barrier and argument semaphores
  outlive kernels and are exempt. Something that arrives after the target exited adds to a
  count nobody will wait for again: the end state (or the next entry) reports it as a
  leftover, which is why exit itself needs no check and commutes with everything.
* cut (`ir.Cut`, where lowering stopped): never enabled; the thread stays there for good.
  A state with a thread at its cut is not an end of the program (the rest of that thread is
  unknown), so properties judge no hang or leftover in it; hazards and faults recorded
  before are real, since the thread may simply be slow to go on.

Transitions that detect a hazard (race, early arrival, leftover at exit) record it in the
state, permanently, and never block. Every such check reads only state that the footprints
below declare, so the reduction, which keeps every terminal state, keeps every hazard.

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
INVALID_REGION = "invalid_region"


class _Fault(Exception):
    def __init__(self, kind: str, detail: str):
        self.kind, self.detail = kind, detail


# --- state and actions -----------------------------------------------------------------------

FAULTED = -1  # the pc of a thread that executed an instruction naming a non-existent target

SEND, RECV = 0, 1


class Access(NamedTuple):
    """A rectangular region of one buffer instance, read or written."""

    write: bool
    buffer: int  # buffer instance
    starts: tuple[int, ...]
    sizes: tuple[int, ...]


class Event(NamedTuple):
    """A pending DMA completion. Identical events are interchangeable (a multiset)."""

    side: int  # SEND or RECV
    issuer: int  # thread index that started the copy
    start_pc: int  # where it started (for messages and the graph)
    sem: int  # semaphore instance that completion adds to
    inc: int
    accesses: tuple[Access, ...] = ()  # what the copy still reads/writes until this completes
    invocation: int = 0  # the issuer's kernel invocation when it started (0: no lifecycle)


DATA_RACE = "data_race"
REMOTE_BEFORE_ENTRY = "remote_before_entry"
BARRIER_PHASE_OVERRUN = "barrier_phase_overrun"
LEFTOVER_AT_EXIT = "semaphore_leftover"


class Hazard(NamedTuple):
    """Something wrong that a transition saw happen; recorded in the state for good.

    (thread, pc) is the instruction that saw it (for an arriving copy: the copy's start);
    (other_thread, other_pc) the other party, or -1.
    """

    kind: str
    thread: int
    pc: int
    other_thread: int
    other_pc: int
    detail: str


class State(NamedTuple):
    pcs: tuple[int, ...]
    regs: tuple[tuple[int, ...], ...]
    sems: tuple[int, ...]
    events: tuple[Event, ...]  # sorted
    faults: tuple[tuple[int, int, str, str], ...]  # (thread, pc, kind, detail), sorted
    inputs: tuple[int, ...]
    hazards: tuple[Hazard, ...] = ()  # sorted


# An action is ("t", thread index) for the thread's next instruction, or ("e", Event).
Action = tuple


def thread_action(t: int) -> Action:
    return ("t", t)


def event_action(e: Event) -> Action:
    return ("e", e)


# --- footprints: which semaphore instances an action may touch, as bitmasks --------------------


class Footprint(NamedTuple):
    """Semaphore instances (inc/dec/wait/read) and memory cells (mread/mwrite) an action may
    touch. Memory cells are buffer instances plus one "lifecycle" cell per (device, core):
    entry and exit write it, and whatever checks whether a core is inside the kernel
    reads it."""

    inc: int = 0  # may add to
    dec: int = 0  # decrementing wait on (or reset)
    wait: int = 0  # non-decrementing wait on
    read: int = 0  # reads
    mread: int = 0  # memory cells read
    mwrite: int = 0  # memory cells written
    mnear: int = 0  # every cell that overlaps a cell read or written

    def __or__(self, other: "Footprint") -> "Footprint":  # type: ignore[override]
        return Footprint(*(a | b for a, b in zip(self, other)))


EMPTY = Footprint()


def conflict(a: Footprint, b: Footprint) -> bool:
    """True when two actions of different actors may not commute.

    Additions commute with each other and with waits (an addition never disables a wait);
    a read does not commute with anything that changes the count; a decrementing wait does
    not commute with another wait or a read of the same semaphore (competing waiters). On
    memory, a write does not commute with a read or write of the same cell (the race and
    entry checks see the difference).
    """
    return bool(
        (a.inc & b.read)
        | (a.read & (b.inc | b.dec))
        | (a.dec & (b.dec | b.wait | b.read))
        | (b.dec & (a.wait | a.read))
        | (a.mwrite & b.mnear)
        | (b.mwrite & a.mnear)
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


@dataclass(frozen=True)
class BufferInstance:
    decl: ir.BufferDecl
    device: int
    core: int | None  # None for device-scope buffers (HBM), shared by every core
    cores: int = 1

    @property
    def label(self) -> str:
        return f"{self.decl.name} on {ir.thread_name(self.device, self.core, 0, self.cores)}"


def overlap(a: Access, b: Access) -> bool:
    """Whether two accesses share an element. An empty access (a size of 0 in some dim)
    shares none, even when it starts inside the other (a 0-row copy at row 2 of rows 0:4)."""
    if a.buffer != b.buffer or 0 in a.sizes or 0 in b.sizes:
        return False
    if len(a.starts) != len(b.starts):
        return True  # shapes disagree: cannot tell, assume the worst
    return all(
        sa < sb + zb and sb < sa + za for sa, za, sb, zb in zip(a.starts, a.sizes, b.starts, b.sizes)
    )


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
        self._buffers: dict[str, tuple[ir.BufferDecl, int]] = {}
        self.buffer_instances: list[BufferInstance] = []
        for decl in protocol.buffers:
            if decl.name in self._buffers:
                raise ProtocolError(f"buffer {decl.name!r} declared twice", decl.loc)
            self._buffers[decl.name] = (decl, len(self.buffer_instances))
            for device in range(protocol.devices):
                cores = range(protocol.cores) if decl.scope is Scope.CORE else (None,)
                for core in cores:
                    self.buffer_instances.append(BufferInstance(decl, device, core, protocol.cores))
        self._lifecycle_tables()
        self.input_index = {inp.name: i for i, inp in enumerate(protocol.inputs)}
        self.registers: list[dict[str, int]] = [
            _registers_written(t.body) for t in protocol.threads
        ]
        for t, thread in enumerate(self.threads):
            self._validate(t, thread)
        self._memory_cells()
        self.footprints = [
            [self._static_footprint(t, instr) for instr in body]
            for t, body in enumerate(self.bodies)
        ]
        self.futures = [
            _future_footprints(body, fps) for body, fps in zip(self.bodies, self.footprints)
        ]
        self._width = max(len(self.instances), self.lifecycle_base + self.protocol.devices * self.protocol.cores, 1)
        self.silenced: set[ir.Loc] = set()  # lines no longer watched for races
        self._buffer_cells = (1 << self.lifecycle_base) - 1
        self._signatures()

    def _signatures(self) -> None:
        self.signatures = [[self.signature(fp) for fp in fps] for fps in self.footprints]
        self.future_signatures = [[self.signature(fp) for fp in fps] for fps in self.futures]
        self._event_signatures: dict[Event, tuple[int, int]] = {}
        self._guard_tables()

    # -- guards: what a pending completion is sure to precede ----------------------------------

    def _guard_tables(self) -> None:
        """For each thread, each copy completion that guards some of its waits: the
        signatures of its futures cut at those waits (see `guarded_future_signature`).

        A semaphore whose only possible adder is one side of one copy started once (not in
        a loop) stays at 0 until that completion; a wait for at least 1 on it cannot pass
        before the completion happens."""
        adders: dict[int, list] = {}
        for t, body in enumerate(self.bodies):
            looping = _looping_pcs(body)
            for pc, instr in enumerate(body):
                if isinstance(instr, ir.DmaStart):
                    target = ir.SemRef(instr.recv_sem.alloc, instr.recv_sem.index, instr.device, instr.core)
                    sides = [(RECV, self._candidates(t, target))]
                    if instr.send_sem is not None:
                        sides.append((SEND, self._candidates(t, instr.send_sem)))
                    for side, mask in sides:
                        for sid in _bits(mask):
                            adders.setdefault(sid, []).append(None if pc in looping else (t, pc, side))
                else:
                    for sid in _bits(self.footprints[t][pc].inc):
                        adders.setdefault(sid, []).append(None)
        only = {sid: found[0] for sid, found in adders.items() if len(found) == 1 and found[0] is not None}
        self._guarded: list[dict[tuple, list[tuple[int, int]]]] = []
        for t, body in enumerate(self.bodies):
            stops: dict[tuple, set[int]] = {}
            for pc, instr in enumerate(body):
                sid = self._blocking_sem(t, instr)
                if sid in only:
                    stops.setdefault(only[sid], set()).add(pc)
            self._guarded.append({
                guard: [self.signature(fp) for fp in _future_footprints(body, self.footprints[t], stop=pcs)]
                for guard, pcs in stops.items()
            })

    def _blocking_sem(self, t: int, instr: ir.Instr) -> int | None:
        """The one semaphore a wait needs at least 1 of, when both are constants."""
        if isinstance(instr, ir.Wait):
            ref, need = instr.sem, instr.value
        elif isinstance(instr, ir.DmaWait):
            ref, need = instr.sem, instr.nbytes
        else:
            return None
        if not (isinstance(need, int) and need >= 1 and isinstance(ref.index, int)
                and ir.is_constant(ref.device) and ir.is_constant(ref.core)):
            return None
        bits = list(_bits(self._candidates(t, ref)))
        return bits[0] if len(bits) == 1 else None

    def guarded_future_signature(self, t: int, pc: int, event: Event) -> tuple[int, int]:
        """What thread t may still do before `event` happens: its future up to any wait that
        only `event`'s completion can satisfy. A pending completion need not be ordered
        against what lies behind such a wait (the reduction's sharpest saving on collectives
        with one semaphore per step)."""
        table = self._guarded[t].get((event.issuer, event.start_pc, event.side))
        return table[pc] if table is not None else self.future_signatures[t][pc]

    def silence(self, *locs: ir.Loc) -> bool:
        """Stop watching these source lines for data races (an engine calls this once it
        has reported a race there): their accesses no longer record races and no longer
        order the search. Everything else stays exact, since the dependencies that remain
        are still a superset of what the other properties need."""
        new = {loc for loc in locs if loc is not None} - self.silenced
        if not new:
            return False
        self.silenced |= new
        keep = ~self._buffer_cells
        for t, body in enumerate(self.bodies):
            touched = False
            for pc, instr in enumerate(body):
                if instr.loc in new:
                    fp = self.footprints[t][pc]
                    self.footprints[t][pc] = fp._replace(
                        mread=fp.mread & keep, mwrite=fp.mwrite & keep, mnear=fp.mnear & keep
                    )
                    touched = True
            if touched:
                self.futures[t] = _future_footprints(body, self.footprints[t])
        self._signatures()
        return True

    def race_possible(self) -> bool:
        """Whether some watched access and some watched copy touch neighbouring cells of one
        memory, one of them writing: a cheap over-approximation of where a data race can be."""
        return next(self.racing_pairs(), None) is not None

    def racing_pairs(self):
        """(t, pc, copy_t, copy_pc): each watched access (load, store or copy start) that may
        race with the watched copy started at (copy_t, copy_pc): one of the two writes a
        cell the other touches or overlaps. Copies are indexed by cell, so a collective with
        thousands of copies is not compared pair by pair."""
        writing: dict[int, list[tuple[int, int]]] = {}  # cell -> copies that write it
        near: dict[int, list[tuple[int, int]]] = {}  # cell -> copies that touch or overlap it
        for t, body in enumerate(self.bodies):
            for pc, instr in enumerate(body):
                if isinstance(instr, ir.DmaStart) and self.watched(t, pc):
                    copy = self.footprints[t][pc]
                    for cell in _bits(copy.mwrite & self._buffer_cells):
                        writing.setdefault(cell, []).append((t, pc))
                    for cell in _bits(copy.mnear & self._buffer_cells):
                        near.setdefault(cell, []).append((t, pc))
        for t, body in enumerate(self.bodies):
            looping = _looping_pcs(body)
            for pc, instr in enumerate(body):
                if not self.watched(t, pc):
                    continue
                fp = self.footprints[t][pc]
                found: set[tuple[int, int]] = set()
                for cell in _bits(fp.mwrite & self._buffer_cells):
                    found.update(near.get(cell, ()))
                for cell in _bits(fp.mnear & self._buffer_cells):
                    found.update(writing.get(cell, ()))
                for ct, cpc in sorted(found):
                    if (ct, cpc) == (t, pc) and pc not in looping:
                        continue  # a copy started once is never in flight when it starts
                    yield t, pc, ct, cpc

    def watched(self, t: int, pc: int) -> bool:
        return self.bodies[t][pc].loc not in self.silenced

    def normalize(self, state: State) -> State:
        """Drop races recorded at lines that are no longer watched."""
        if not self.silenced or not state.hazards:
            return state
        kept = tuple(
            h for h in state.hazards
            if h.kind != DATA_RACE or (self.watched(h.thread, h.pc) and self.watched(h.other_thread, h.other_pc))
        )
        return state if len(kept) == len(state.hazards) else state._replace(hazards=kept)

    def signature(self, fp: Footprint) -> tuple[int, int]:
        """(x, y) with conflict(a, b) == bool(x_a & y_b or x_b & y_a): the same relation as
        `conflict`, as two integer ANDs (the reduction asks it millions of times).

        Channels of `width` bits each: x = inc | read | dec | mwrite and
        y = read | inc+dec | dec+wait+read | mnear, so channel by channel x_a & y_b is
        inc-read, read-inc/dec, dec-dec/wait/read and a written cell against any cell
        overlapping what b touches."""
        w = self._width
        x = fp.inc | fp.read << w | fp.dec << 2 * w | fp.mwrite << 3 * w
        y = (
            fp.read
            | (fp.inc | fp.dec) << w
            | (fp.dec | fp.wait | fp.read) << 2 * w
            | fp.mnear << 3 * w
        )
        return x, y

    def event_signature(self, event: Event) -> tuple[int, int]:
        sig = self._event_signatures.get(event)
        if sig is None:
            sig = self._event_signatures[event] = self.signature(event_footprint(self, event))
        return sig

    # -- construction helpers --

    def _lifecycle_tables(self) -> None:
        """Per thread and pc: which kernel invocation it is in, and whether it is inside."""
        self.has_lifecycle = [any(isinstance(i, ir.KernelEntry) for i in b) for b in self.bodies]
        self.invocation_at: list[list[int]] = []
        self.inside_at: list[list[bool]] = []
        self.core_threads: dict[tuple[int, int], list[int]] = {}
        for t, body in enumerate(self.bodies):
            thread = self.threads[t]
            self.core_threads.setdefault((thread.device, thread.core), []).append(t)
            invocation, inside = 0, not self.has_lifecycle[t]
            inv_row, inside_row = [], []
            for instr in body + (None,):  # the extra slot is "finished"
                inv_row.append(invocation)
                inside_row.append(inside)
                if isinstance(instr, ir.KernelEntry):
                    invocation, inside = invocation + 1, True
                elif isinstance(instr, ir.KernelExit):
                    inside = False
            self.invocation_at.append(inv_row)
            self.inside_at.append(inside_row)

    def _validate(self, t: int, thread: ir.Thread) -> None:
        p = self.protocol
        if not (0 <= thread.device < p.devices and 0 <= thread.core < p.cores):
            raise ProtocolError(f"thread {thread.name} lies outside {p.devices}x{p.cores}")
        for pc, instr in enumerate(thread.body):
            for ref in _sem_refs(instr):
                if ref.alloc not in self._allocs:
                    raise ProtocolError(f"undeclared semaphore {ref.alloc!r}", instr.loc)
            for region in _regions(instr):
                if region.buffer not in self._buffers:
                    raise ProtocolError(f"undeclared buffer {region.buffer!r}", instr.loc)
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

    def _buffer_instance_id(self, decl, base, device, core) -> int | None:
        p = self.protocol
        if not 0 <= device < p.devices:
            return None
        if decl.scope is Scope.DEVICE:
            return base + device
        if not 0 <= core < p.cores:
            return None
        return base + device * p.cores + core

    # -- memory cells: the reduction's unit of memory dependency --------------------------------

    def _memory_cells(self) -> None:
        """One cell per distinct region an instruction names with constant starts, per
        buffer instance, plus one "anywhere" cell per instance for regions whose starts are
        known only at run time; then one lifecycle cell per (device, core). `_near[c]` is
        every cell whose region may overlap c's, so accesses to disjoint halves of one slot
        commute while overlapping ones do not."""
        keys: dict[int, dict[tuple, int]] = {}  # buffer instance -> static region -> cell
        self._anywhere: dict[int, int] = {}
        count = 0
        for t, body in enumerate(self.bodies):
            for instr in body:
                for region, device, core in _located_regions(instr):
                    for bid in self._region_instances(t, region, device, core):
                        key = self._static_key(region)
                        table = keys.setdefault(bid, {})
                        if key is not None and key not in table:
                            table[key] = count
                            count += 1
        for bid in range(len(self.buffer_instances)):
            self._anywhere[bid] = count
            count += 1
        self._cell_of = {(bid, key): cell for bid, table in keys.items() for key, cell in table.items()}
        self._near = [0] * count
        for bid, table in keys.items():
            items = list(table.items())
            anywhere = 1 << self._anywhere[bid]
            for key, cell in items:
                mask = anywhere
                for other_key, other in items:
                    if overlap(Access(False, bid, *key), Access(False, bid, *other_key)):
                        mask |= 1 << other
                self._near[cell] = mask
        for bid, cell in self._anywhere.items():
            self._near[cell] = sum(1 << c for c in keys.get(bid, {}).values()) | 1 << cell
        self.lifecycle_base = count

    def _static_key(self, region: ir.Region) -> tuple | None:
        """(starts, sizes) of a region with constant starts and sizes, as `resolve_region`
        gives them."""
        if not all(isinstance(op, int) for op in region.start + region.size):
            return None
        decl, _base = self._buffers[region.buffer]
        rank = len(decl.shape)
        starts = tuple(region.start) + (0,) * (rank - len(region.start))
        sizes = tuple(region.size) + tuple(decl.shape[len(region.size):])
        return starts[:rank], sizes[:rank]

    def _region_instances(self, t: int, region: ir.Region, device=None, core=None) -> list[int]:
        decl, base = self._buffers[region.buffer]
        thread = self.threads[t]
        devices = [thread.device if device is None else device] if ir.is_constant(device) else range(self.protocol.devices)
        cores = [thread.core if core is None else core] if ir.is_constant(core) else range(self.protocol.cores)
        found = []
        for d, c in itertools.product(devices, cores):
            bid = self._buffer_instance_id(decl, base, d, c)
            if bid is not None and bid not in found:
                found.append(bid)
        return found

    def _cell_candidates(self, t: int, region: ir.Region, device=None, core=None) -> tuple[int, int]:
        """(cells, near) of the memory a region may touch: its own cell when its starts are
        constant, else its buffer instances' "anywhere" cells."""
        key = self._static_key(region)
        own = 0
        for bid in self._region_instances(t, region, device, core):
            cell = self._cell_of.get((bid, key)) if key is not None else None
            own |= 1 << (cell if cell is not None else self._anywhere[bid])
        return own, self.near_of(own)

    def near_of(self, cells: int) -> int:
        near = 0
        for cell in _bits(cells):
            near |= self._near[cell] if cell < len(self._near) else 1 << cell
        return near

    def access_cell(self, access: Access) -> int:
        cell = self._cell_of.get((access.buffer, (access.starts, access.sizes)))
        return 1 << (cell if cell is not None else self._anywhere[access.buffer])

    def lifecycle_cell(self, device: int, core: int | None) -> int:
        """The cell standing for "which invocation (device, core) is in" (its own near)."""
        return self.lifecycle_base + device * self.protocol.cores + (core or 0)

    def _lifecycle_candidates(self, t: int, device, core) -> int:
        """Lifecycle cells of the cores a signal or copy may reach."""
        thread = self.threads[t]
        devices = [thread.device if device is None else device] if ir.is_constant(device) else range(self.protocol.devices)
        cores = [thread.core if core is None else core] if ir.is_constant(core) else range(self.protocol.cores)
        mask = 0
        for d, c in itertools.product(devices, cores):
            if 0 <= d < self.protocol.devices and 0 <= c < self.protocol.cores:
                mask |= 1 << self.lifecycle_cell(d, c)
        return mask

    def reset_on_entry(self, t: int) -> int:
        """Bitmask of the semaphores a thread's kernel entry allocates afresh (and its exit
        must find at 0): its core's scratch and scoped semaphores, TPU only."""
        thread = self.threads[t]
        if self.backend is not Backend.TPU or thread.sub:
            return 0
        mask = 0
        for sid, inst in enumerate(self.instances):
            if (
                inst.decl.origin in (SemOrigin.SCRATCH, SemOrigin.SCOPED)
                and inst.device == thread.device
                and inst.core == thread.core
            ):
                mask |= 1 << sid
        return mask

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
        return apply_op(op.op, self.eval(op.a, t, state), self.eval(op.b, t, state))

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

    def resolve_region(self, t: int, region: ir.Region, state: State, write: bool,
                       device: int | None = None, core: int | None = None) -> Access:
        """The concrete access a region names for thread t (on `device`/`core` for a copy's
        destination), as full-rank starts and sizes: dims without a start begin at 0, dims
        without a size span the whole extent. Start values may come from registers."""
        decl, base = self._buffers[region.buffer]
        thread = self.threads[t]
        bid = self._buffer_instance_id(
            decl, base, thread.device if device is None else device, thread.core if core is None else core
        )
        assert bid is not None  # the target was resolved (and checked) first
        rank = len(decl.shape)
        starts = tuple(self.eval(op, t, state) for op in region.start) + (0,) * (rank - len(region.start))
        sizes = tuple(self.eval(op, t, state) for op in region.size) + tuple(decl.shape[len(region.size):])
        return Access(write, bid, starts[:rank], sizes[:rank])

    def arrival_problem(self, state: State, device: int, core: int | None, invocation: int) -> str | None:
        """Why something sent during `invocation` must not reach (device, core) now: it has
        not entered that invocation yet, or has moved on to a later one. None when it may
        (cores without a lifecycle have nothing to check against; after an exit, see the
        module docstring)."""
        cores = range(self.protocol.cores) if core is None else (core,)
        for c in cores:
            for q in self.core_threads.get((device, c), ()):
                pc = state.pcs[q]
                if not self.has_lifecycle[q] or pc == FAULTED:
                    continue
                current = self.invocation_at[q][pc]
                if current < invocation:
                    return "before it entered" + (f" invocation {invocation} of" if invocation > 1 else "")
                if current > invocation:
                    return f"after it left invocation {invocation} of"
        return None

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
        return State(pcs, regs, sems, (), (), tuple(inputs), ())

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

    def at_cut(self, state: State) -> bool:
        """Whether some thread stands at the point where its lowering stopped."""
        return any(
            0 <= pc < len(body) and type(body[pc]) is ir.Cut for pc, body in zip(state.pcs, self.bodies)
        )

    def enabled(self, state: State) -> list[Action]:
        actions: list[Action] = []
        for t, body in enumerate(self.bodies):
            pc = state.pcs[t]
            if 0 <= pc < len(body) and type(body[pc]) is not ir.Cut and self.blocked_wait(state, t) is None:
                actions.append(("t", t))
        actions.extend(("e", e) for e in _distinct(state.events))
        return actions

    def step(self, state: State, action: Action) -> State:
        kind, what = action
        if kind == "e":
            return _complete(self, state, what)
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
        if kind == "e":
            return event_footprint(self, what)
        return self.footprints[what][state.pcs[what]]

    def future_footprint(self, state: State, t: int) -> Footprint:
        """Everything thread t may still do, from its current instruction on."""
        pc = state.pcs[t]
        if not 0 <= pc < len(self.bodies[t]):
            return EMPTY
        return self.futures[t][pc]

    def touches(self, t: int) -> frozenset[tuple]:
        """Everything thread `t` may ever act on, through its own instructions or the copies
        it starts: ("sem", instance), ("cell", memory cell) and ("input", name). Threads that
        share none of these can never affect each other (`engines/components.py`)."""
        start = self.futures[t][0] if self.bodies[t] else EMPTY
        found = {("sem", sid) for sid in _bits(start.inc | start.dec | start.wait | start.read)}
        found |= {("cell", cell) for cell in _bits(start.mread | start.mwrite | start.mnear)}
        for instr in self.bodies[t]:
            for op in _operands(instr):
                found |= {("input", name) for name in ir.registers_of(op) if name in self.input_index}
        return frozenset(found)

    def thread_name(self, t: int) -> str:
        th = self.threads[t]
        return ir.thread_name(th.device, th.core, th.sub, self.protocol.cores, ir.core_unit(self.backend.value))


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


def _complete(system: "System", state: State, event: Event) -> State:
    events = list(state.events)
    events.remove(event)
    sems = list(state.sems)
    sems[event.sem] += event.inc
    hazards = state.hazards
    # Unlike a signal, a landing copy is checked whatever semaphore counts it: what arrives
    # early is its write into the peer's buffer, which does not outlive the kernel.
    if event.invocation and event.side == RECV:
        target = system.instances[event.sem]
        issuer = system.threads[event.issuer]
        remote = (target.device, target.core) != (issuer.device, issuer.core)
        problem = remote and system.arrival_problem(state, target.device, target.core, event.invocation)
        if problem:
            hazards = _with(hazards, Hazard(
                REMOTE_BEFORE_ENTRY, event.issuer, event.start_pc, -1, -1,
                f"the copy lands on {ir.thread_name(target.device, target.core, 0, system.protocol.cores)} "
                f"{problem} the kernel",
            ))
    return state._replace(sems=tuple(sems), events=tuple(events), hazards=hazards)


def _advance(state: State, t: int, *, to: int | None = None, sems=None, regs=None, events=None,
             hazards=None) -> State:
    pcs = list(state.pcs)
    pcs[t] = pcs[t] + 1 if to is None else to
    return State(
        tuple(pcs),
        state.regs if regs is None else regs,
        state.sems if sems is None else sems,
        state.events if events is None else events,
        state.faults,
        state.inputs,
        state.hazards if hazards is None else hazards,
    )


def _with(hazards: tuple[Hazard, ...], *new: Hazard) -> tuple[Hazard, ...]:
    fresh = [h for h in new if h not in hazards]
    return tuple(sorted(hazards + tuple(fresh))) if fresh else hazards


def _races(system: "System", state: State, t: int, accesses: list[Access]) -> list[Hazard]:
    """Hazards for every pending copy access that conflicts with one of `accesses`."""
    found = []
    pc = state.pcs[t]
    if not system.watched(t, pc):
        return found
    for event in _distinct(state.events):
        if not system.watched(event.issuer, event.start_pc):
            continue
        for pending in event.accesses:
            for access in accesses:
                if (pending.write or access.write) and overlap(pending, access):
                    found.append(Hazard(
                        DATA_RACE, t, pc, event.issuer, event.start_pc,
                        _race_detail(system, access, pending),
                    ))
    return found


def _race_detail(system: "System", access: Access, pending: Access) -> str:
    where = system.buffer_instances[access.buffer].label
    verb = "writes" if access.write else "reads"
    other = "writes" if pending.write else "reads"
    return (
        f"{verb} {where} {_extent(access)} while a copy still in flight {other} "
        f"{_extent(pending)} of it"
    )


def _extent(access: Access) -> str:
    if not access.starts:
        return "(whole buffer)"
    return "[" + ", ".join(f"{s}:{s + z}" for s, z in zip(access.starts, access.sizes)) + "]"


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


def apply_op(op: str, a: int, b: int) -> int:
    return _OPS[op](a, b)


def dma_increment(decl: ir.SemDecl, nbytes: int) -> int:
    """What one DMA completion adds: bytes on a DMA semaphore, 1 on a REGULAR one (v6+)."""
    return nbytes if decl.kind is SemKind.DMA else 1


# --- execution rules: one small function per instruction ----------------------------------------


def _exec_signal(system: System, t: int, instr: ir.Signal, state: State) -> State:
    sid = system.resolve(t, instr.sem, state)
    sems = _add(state.sems, sid, system.eval(instr.inc, t, state))
    return _advance(state, t, sems=sems, hazards=_early_arrival(system, state, t, sid))


def _early_arrival(system: System, state: State, t: int, sid: int) -> tuple[Hazard, ...]:
    """A signal to another core's kernel-lifetime semaphore must find that core inside the
    same invocation (TPU; barrier and argument semaphores outlive kernels)."""
    pc = state.pcs[t]
    target = system.instances[sid]
    thread = system.threads[t]
    if (
        system.backend is not Backend.TPU
        or not system.has_lifecycle[t]
        or target.decl.origin in (SemOrigin.BARRIER, SemOrigin.ARGUMENT)
        or (target.device, target.core) == (thread.device, thread.core)
    ):
        return state.hazards
    problem = system.arrival_problem(state, target.device, target.core, system.invocation_at[t][pc])
    if problem is None:
        return state.hazards
    return _with(state.hazards, Hazard(
        REMOTE_BEFORE_ENTRY, t, pc, -1, -1,
        f"signals {target.label} {problem} the kernel",
    ))


def _exec_wait(system: System, t: int, instr: ir.Wait, state: State) -> State:
    sid = system.resolve(t, instr.sem, state)
    if not instr.decrement:
        return _advance(state, t, hazards=_phase_overrun(system, state, t, sid, instr))
    return _advance(state, t, sems=_add(state.sems, sid, -system.eval(instr.value, t, state)))


def _phase_overrun(system: System, state: State, t: int, sid: int, instr: ir.Wait) -> tuple[Hazard, ...]:
    """An mbarrier wait names its phase by parity only (reference §4.8): if the barrier has
    completed the following phase too by the time the thread waits, the parity has come
    round again and the wait cannot see the phase it is for."""
    per_phase = system.instances[sid].decl.arrivals_per_phase
    if not per_phase:
        return state.hazards
    count, value = state.sems[sid], system.eval(instr.value, t, state)
    if count < value + per_phase:
        return state.hazards
    phase = value // per_phase - 1
    return _with(state.hazards, Hazard(
        BARRIER_PHASE_OVERRUN, t, state.pcs[t], -1, sid,
        f"waits for phase {phase} of {system.instances[sid].label}, which has already completed "
        f"phase {count // per_phase - 1} ({count} arrivals of {per_phase} per phase)",
    ))


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
    landing = system.instances[recv]
    nbytes = system.eval(instr.nbytes, t, state)
    pc = state.pcs[t]
    src = system.resolve_region(t, instr.src, state, write=False)
    dst = system.resolve_region(t, instr.dst, state, write=True, device=landing.device,
                                core=landing.core if landing.core is not None else system.threads[t].core)
    for side, access in (("source", src), ("destination", dst)):
        _check_window(system, side, access)
    invocation = system.invocation_at[t][pc] if system.has_lifecycle[t] else 0
    hazards = _with(state.hazards, *_races(system, state, t, [src, dst]))
    if instr.send_sem is None:  # local: the source is read until the copy lands
        new = [Event(RECV, t, pc, recv, dma_increment(landing.decl, nbytes), (src, dst), invocation)]
    else:
        send = system.resolve(t, instr.send_sem, state)
        new = [
            Event(RECV, t, pc, recv, dma_increment(landing.decl, nbytes), (dst,), invocation),
            Event(SEND, t, pc, send, dma_increment(system.instances[send].decl, nbytes), (src,), invocation),
        ]
    if nbytes == 0:
        return _complete_at_start(system, state, t, new, hazards)
    return _advance(state, t, events=tuple(sorted(state.events + tuple(new))), hazards=hazards)


def _complete_at_start(system: System, state: State, t: int, new: list[Event], hazards) -> State:
    """A copy of 0 bytes moves no data: both its sides complete as it starts (so a 0-byte
    wait finds it done, and one nobody waits for is never left in flight), touching no
    memory; what each completion adds to its semaphore and the landing's entry check are
    those of any completion."""
    state = _advance(state, t, hazards=hazards)
    for event in new:
        state = _complete(system, state._replace(events=state.events + (event,)), event)
    return state


def _check_window(system: System, side: str, access: Access) -> None:
    """A copy window must lie inside its buffer: 0 <= start and start + size <= extent in
    every dim (JAX's TPU interpreter fails the copy otherwise:
    jax/_src/pallas/mosaic/interpret/utils.py, is_range_out_of_bounds_for_shape, 0.10.2)."""
    shape = system.buffer_instances[access.buffer].decl.shape
    if all(0 <= s and s + z <= n for s, z, n in zip(access.starts, access.sizes, shape)):
        return
    raise _Fault(
        INVALID_REGION,
        f"the copy's {side} window {_extent(access)} lies outside "
        f"{system.buffer_instances[access.buffer].label} of shape {tuple(shape)}",
    )


def _exec_access(system: System, t: int, instr: ir.Load | ir.Store, state: State) -> State:
    access = system.resolve_region(t, instr.region, state, write=isinstance(instr, ir.Store))
    return _advance(state, t, hazards=_with(state.hazards, *_races(system, state, t, [access])))


def _exec_entry(system: System, t: int, instr: ir.KernelEntry, state: State) -> State:
    """A fresh allocation of the core's semaphores. Entering again (a later invocation)
    first finds what the previous one left: a non-zero count, or one of its copies still
    landing, is that invocation's leftover (TPU checks every semaphore at kernel exit)."""
    reset = system.reset_on_entry(t)
    if not reset:
        return _advance(state, t)
    pc = state.pcs[t]
    found: list[Hazard] = []
    if system.invocation_at[t][pc] >= 1:  # not the first entry
        found = [
            Hazard(LEFTOVER_AT_EXIT, t, pc, -1, sid,
                   f"{system.instances[sid].label} holds {count} (left by the previous invocation)")
            for sid, count in enumerate(state.sems) if count and reset >> sid & 1
        ] + [
            Hazard(LEFTOVER_AT_EXIT, t, pc, e.issuer, e.sem,
                   f"a copy of the previous invocation is still landing on {system.instances[e.sem].label}")
            for e in _distinct(state.events) if reset >> e.sem & 1
        ]
    sems = tuple(0 if reset >> sid & 1 else count for sid, count in enumerate(state.sems))
    return _advance(state, t, sems=sems, hazards=_with(state.hazards, *found))


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
    ir.Load: _exec_access,
    ir.Store: _exec_access,
    ir.KernelEntry: _exec_entry,
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
    ref = instr.sem
    decl, _base = system._allocs[ref.alloc]
    checked = (
        system.backend is Backend.TPU and system.has_lifecycle[t]
        and decl.origin not in (SemOrigin.BARRIER, SemOrigin.ARGUMENT)
    )
    remote = ref.device is not None or ref.core is not None
    life = system._lifecycle_candidates(t, ref.device, ref.core) if remote and checked else 0
    mask = system._candidates(t, ref)
    negative = mask if _may_be_negative(system, t, instr.inc) else 0
    return Footprint(inc=mask, dec=negative, mread=life, mnear=life)


def _fp_wait(system: System, t: int, instr: ir.Wait) -> Footprint:
    mask = system._candidates(t, instr.sem)
    if instr.decrement:
        return Footprint(dec=mask, inc=mask if _may_be_negative(system, t, instr.value) else 0)
    # An mbarrier phase wait reads the count (_phase_overrun), so arrivals do not commute with it.
    phased = system._allocs[instr.sem.alloc][0].arrivals_per_phase
    return Footprint(wait=mask, read=mask if phased else 0)


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
    remote = instr.device is not None or instr.core is not None
    src, src_near = system._cell_candidates(t, instr.src)
    dst, dst_near = system._cell_candidates(t, instr.dst, instr.device, instr.core)
    life = system._lifecycle_candidates(t, instr.device, instr.core) if remote else 0
    negative = mask if _may_be_negative(system, t, instr.nbytes) else 0
    return Footprint(inc=mask, dec=negative, mread=src | life, mwrite=dst, mnear=src_near | dst_near | life)


def _fp_load(system: System, t: int, instr: ir.Load) -> Footprint:
    cells, near = system._cell_candidates(t, instr.region)
    return Footprint(mread=cells, mnear=near)


def _fp_store(system: System, t: int, instr: ir.Store) -> Footprint:
    cells, near = system._cell_candidates(t, instr.region)
    return Footprint(mwrite=cells, mnear=near)


def _fp_entry(system: System, t: int, instr: ir.KernelEntry) -> Footprint:
    """Entry resets (and, when repeated, checks) the core's semaphores, and changes which
    invocation the core is in."""
    th = system.threads[t]
    own = system.reset_on_entry(t)
    life = 1 << system.lifecycle_cell(th.device, th.core)
    return Footprint(dec=own, read=own, mwrite=life, mnear=life)


def event_footprint(system: System, event: Event) -> Footprint:
    mread = mwrite = 0
    watched = system.watched(event.issuer, event.start_pc)
    for access in event.accesses if watched else ():
        if access.write:
            mwrite |= system.access_cell(access)
        else:
            mread |= system.access_cell(access)
    if event.invocation and event.side == RECV:
        target = system.instances[event.sem]
        mread |= 1 << system.lifecycle_cell(target.device, target.core)
    bit = 1 << event.sem
    # a negative size lowers the count: the completion can disable a wait
    return Footprint(
        inc=bit, dec=bit if event.inc < 0 else 0, mread=mread, mwrite=mwrite, mnear=system.near_of(mread | mwrite)
    )


FOOTPRINT_RULES: dict[type, Callable[..., Footprint]] = {
    ir.Signal: _fp_signal,
    ir.Wait: _fp_wait,
    ir.DmaWait: _fp_dma_wait,
    ir.Read: _fp_read,
    ir.DmaStart: _fp_dma_start,
    ir.Load: _fp_load,
    ir.Store: _fp_store,
    ir.KernelEntry: _fp_entry,
}


def _future_footprints(
    body: tuple[ir.Instr, ...], fps: list[Footprint], stop: set[int] = frozenset()
) -> list[Footprint]:
    """future[pc] = union of the footprints of every instruction reachable from pc without
    passing an instruction in `stop`."""
    n = len(body)
    future = [EMPTY if pc in stop else fp for pc, fp in enumerate(fps)]
    succs = [_successors(pc, instr, n) for pc, instr in enumerate(body)]
    changed = True
    while changed:  # one backward pass suffices for straight-line code; loops need more
        changed = False
        for pc in range(n - 1, -1, -1):
            if pc in stop:
                continue
            acc = fps[pc]
            for s in succs[pc]:
                if s < n:
                    acc = acc | future[s]
            if acc != future[pc]:
                future[pc] = acc
                changed = True
    return future


def _looping_pcs(body: tuple[ir.Instr, ...]) -> set[int]:
    """Instructions that may run more than once: those inside a backward jump's range."""
    looping: set[int] = set()
    for pc, instr in enumerate(body):
        if isinstance(instr, (ir.Branch, ir.Jump)) and instr.target <= pc:
            looping.update(range(instr.target, pc + 1))
    return looping


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _successors(pc: int, instr: ir.Instr, n: int) -> tuple[int, ...]:
    if isinstance(instr, ir.Cut):
        return ()
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
            ops.extend(region.start + region.size)
    return ops


def _located_regions(instr: ir.Instr) -> list[tuple[ir.Region, ir.Operand | None, ir.Operand | None]]:
    """Each region an instruction touches, with the device and core it lives on (None:
    the thread's own)."""
    if isinstance(instr, ir.DmaStart):
        return [(instr.src, None, None), (instr.dst, instr.device, instr.core)]
    region = getattr(instr, "region", None)
    return [(region, None, None)] if isinstance(region, ir.Region) else []


def _regions(instr: ir.Instr) -> list[ir.Region]:
    return [r for r in (getattr(instr, n, None) for n in ("region", "src", "dst")) if isinstance(r, ir.Region)]


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
