"""The one definition of behaviour: states, enabled actions and successors of a Protocol.

Shaped like a stateright model: `initial_states()`, `enabled(state)`, `step(state, action)`.
Engines explore it; `properties.py` judges its states; nothing else decides what an
instruction does. Every rule is stated, with its sources, in docs/semantics.md:

* signal: atomically add `inc` to the target semaphore; never blocks. Without a core
  index the target core is the signaller's own (JAX's TPU interpreter uses core 0 instead;
  see docs/semantics.md, "Choices worth knowing").
* wait: enabled iff `count >= value`; a decrementing wait then subtracts `value`.
* dma_start: schedules a receive-side completion on the target's receive semaphore and,
  for a remote copy, a send-side completion on the issuer's send semaphore. Completions are
  environment events that happen in any order, at any later point, so two copies in flight
  on one semaphore may finish either way round. DMA semaphores count bytes; a REGULAR
  semaphore given to a DMA gains 1 (TPU v6+).
* dma_wait: a decrementing wait for `nbytes` on a local DMA semaphore.
* memory: a copy reads its source from its start until its send side completes (its
  receive side, for a copy without a send semaphore) and writes its destination until its receive side
  completes. A load, store or copy start that overlaps a pending copy's access, one of the
  two a write, is a data race (the two are unordered in some execution). A load or store
  with a device touches that device's instance of the buffer (a GPU `remote_ref` access).
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

import gc
import itertools
from array import array
from bisect import bisect_left, insort
from contextlib import contextmanager
from typing import Callable, NamedTuple

from semcheck import intervals, ir
from semcheck.cells import MemoryCells
from semcheck.errors import ProtocolError
from semcheck.footprints import (
    EMPTY, M_MNEAR, M_MWRITE, Y_WAITER, Footprint, ThreadFootprints, ThreadTable, looping_pcs, packed,
)
from semcheck.instances import BufferInstance, SemInstance, SemInstances
from semcheck.resource_index import ResourceIndex
from semcheck.ir import Backend, Scope, SemKind, SemOrigin, apply_op

_NONE: frozenset[int] = frozenset()
_NEVER_BLOCKS: tuple[()] = ()
_STOPS = ("cut",)  # where a thread's lowering stopped (`ir.Cut`): it never moves on
_RESOLVED_KEPT = 16_384


class _WaitTable:
    """One thread's `System._static_wait` per pc, in two machine arrays (a tuple per wait
    costs 70 bytes, and a ring of N devices has 2N^2 waits): `[pc]` gives it back."""

    __slots__ = ("_sems", "_needs")
    _CODES = {id(_NEVER_BLOCKS): -1, id(_STOPS): -2, id(None): -3}

    def __init__(self, waits: list):
        self._sems, self._needs = array("q"), array("q")
        for known in waits:
            code = self._CODES.get(id(known))
            if code is None and not -2**63 <= known[1] < 2**63:
                code = -3  # an amount past 64 bits: resolved in each state instead
            self._sems.append(known[0] if code is None else code)
            self._needs.append(known[1] if code is None else 0)

    def __len__(self) -> int:
        return len(self._sems)

    def __getitem__(self, pc: int):
        sid = self._sems[pc]
        if sid >= 0:
            return sid, self._needs[pc]
        return _NEVER_BLOCKS if sid == -1 else _STOPS if sid == -2 else None


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
    """A rectangular region of one buffer instance, read or written (`atomic`: by an atomic
    read-modify-write, `ir.Store.atomic`)."""

    write: bool
    buffer: int  # buffer instance
    starts: tuple[int, ...]
    sizes: tuple[int, ...]
    atomic: bool = False


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
# Two plain accesses of different threads (a load or store each) that are enabled at once:
# nothing orders them, so some schedule runs them in either order (the same `data_race`
# finding as an access against a copy in flight; only the message differs).
PLAIN_RACE = "plain_race"
REMOTE_BEFORE_ENTRY = "remote_before_entry"
BARRIER_PHASE_OVERRUN = "barrier_phase_overrun"
LEFTOVER_AT_EXIT = "semaphore_leftover"


class Hazard(NamedTuple):
    """Something wrong that a transition saw happen; recorded in the state for good.

    (thread, pc) is the instruction that saw it (for an arriving copy: the copy's start);
    (other_thread, other_pc) the other party, or -1; `sem` the semaphore instance it is
    about (a leftover count, an overrun barrier, where an early arrival lands), or -1.
    """

    kind: str
    thread: int
    pc: int
    other_thread: int
    other_pc: int
    detail: str
    sem: int = -1


class Counts:
    """Every semaphore instance's count, stored sparsely: the (id, count) pairs that are not
    0, in id order. Reads like a tuple of all counts (`counts[sid]`, `len`, iteration), and
    compares and hashes by value; a step copies only the counts that are not 0, so a state
    of a protocol with N^2 semaphore instances (one per step per device) stays small."""

    __slots__ = ("size", "items", "_hash")

    def __init__(self, size: int, items: tuple[tuple[int, int], ...] = ()):
        self.size, self.items = size, items
        self._hash: int | None = None

    @classmethod
    def dense(cls, counts) -> "Counts":
        counts = list(counts)
        return cls(len(counts), tuple((sid, c) for sid, c in enumerate(counts) if c))

    def __getitem__(self, sid: int) -> int:
        items = self.items
        k = bisect_left(items, (sid,))
        return items[k][1] if k < len(items) and items[k][0] == sid else 0

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        dense = [0] * self.size
        for sid, count in self.items:
            dense[sid] = count
        return iter(dense)

    def nonzero(self) -> tuple[tuple[int, int], ...]:
        return self.items

    def add(self, sid: int, delta: int) -> "Counts":
        items = self.items
        k = bisect_left(items, (sid,))
        if k < len(items) and items[k][0] == sid:
            count = items[k][1] + delta
            middle = ((sid, count),) if count else ()
            return Counts(self.size, items[:k] + middle + items[k + 1:])
        if not delta:
            return self
        return Counts(self.size, items[:k] + ((sid, delta),) + items[k:])

    def zeroed(self, sids: frozenset[int]) -> "Counts":
        kept = tuple(item for item in self.items if item[0] not in sids)
        return self if len(kept) == len(self.items) else Counts(self.size, kept)

    def __eq__(self, other) -> bool:
        if isinstance(other, Counts):
            return self.items == other.items and self.size == other.size
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.items)
        return self._hash

    def __repr__(self) -> str:
        return f"Counts({self.size}, {dict(self.items)})"


class State(NamedTuple):
    pcs: tuple[int, ...]
    regs: tuple[tuple[int, ...], ...]
    sems: Counts
    events: tuple[Event, ...]  # sorted
    faults: tuple[tuple[int, int, str, str], ...]  # (thread, pc, kind, detail), sorted
    inputs: tuple[int, ...]
    hazards: tuple[Hazard, ...] = ()  # sorted


# An action is ("t", thread index) for the thread's next instruction, or ("e", Event).
Action = tuple


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


def conflict(a: Access, b: Access) -> bool:
    """Whether two accesses race when nothing orders them: they share an element, one of
    them writes it, and they are not both atomic (the hardware serializes atomic
    read-modify-writes of an element, so any order of two gives the same result)."""
    return (a.write or b.write) and not (a.atomic and b.atomic) and overlap(a, b)


@contextmanager
def without_gc():
    """Python's cycle collector paused while building or searching what holds no cycles.
    A full collection visits every tracked object, and one runs each time the tracked
    objects grow by a quarter: the tables of a ring of N devices (N^2 instructions, their
    footprints) and the search's visited states are millions of objects, so the
    collections cost more than building them (ring_allgather at 256 devices: 12.4 s
    building the System with it, 5.5 s without), and they never find anything (the
    ring's search collects nothing). Reference counting still frees everything; the
    collector runs again as usual once the block ends. Nested blocks leave it paused."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# --- the system --------------------------------------------------------------------------------


class System:
    """A Protocol compiled for fast exploration."""

    def __init__(self, protocol: ir.Protocol, *, exclude_ordered_pairs: bool = True):
        """`exclude_ordered_pairs=False` keeps every overlapping pair in `racing_pairs`, even
        those an order that holds in every schedule excludes (the tests' reference)."""
        self._exclude_ordered_pairs = exclude_ordered_pairs
        with without_gc():  # its tables are acyclic: see `without_gc`
            self._build(protocol)

    def _build(self, protocol: ir.Protocol) -> None:
        self.protocol = protocol
        self.threads = protocol.threads
        self.bodies = [t.body for t in protocol.threads]
        self.backend = protocol.backend
        # (ref, device, core) -> its instances, for constant refs, while the tables are built:
        # they resolve each instruction's semaphores several times (cleared past
        # `_RESOLVED_KEPT`: a ring of N devices has N^2 distinct ones)
        self._resolved: dict[tuple[ir.SemRef, int, int], frozenset[int]] = {}
        # (t, pc) -> (side, issuer, start pc) of the completions its access may race with,
        # built on the first race check (`race_candidates`)
        self._race_copies: dict[tuple[int, int], tuple[tuple[int, int, int], ...]] | None = None
        self._racing_pairs: list[tuple[int, int, int, int]] | None = None
        self._allocs: dict[str, tuple[ir.SemDecl, int]] = {}
        for decl in protocol.semaphores:
            if decl.name in self._allocs:
                raise ProtocolError(f"semaphore {decl.name!r} declared twice", decl.loc)
            self._allocs[decl.name] = (decl, 0)
        self.instances = SemInstances(protocol.semaphores, protocol.devices, protocol.cores)
        # where memory cells start in the resource numbering of `footprints.channels`
        self.cell_base = len(self.instances)
        for decl, base in zip(self.instances.decls, self.instances.bases):
            self._allocs[decl.name] = (decl, base)
        self._buffers: dict[str, tuple[ir.BufferDecl, int]] = {}
        self.buffer_instances: list[BufferInstance] = []
        instance_decls: list[int] = []
        for k, buffer in enumerate(protocol.buffers):
            if buffer.name in self._buffers:
                raise ProtocolError(f"buffer {buffer.name!r} declared twice", buffer.loc)
            self._buffers[buffer.name] = (buffer, len(self.buffer_instances))
            for device in range(protocol.devices):
                cores = range(protocol.cores) if buffer.scope is Scope.CORE else (None,)
                for core in cores:
                    self.buffer_instances.append(BufferInstance(buffer, device, core, protocol.cores))
                    instance_decls.append(k)
        self._lifecycle_tables()
        self.input_index = {inp.name: i for i, inp in enumerate(protocol.inputs)}
        self.registers: list[dict[str, int]] = [
            _registers_written(t.body) for t in protocol.threads
        ]
        for t, thread in enumerate(self.threads):
            self._validate(t, thread)
        self._memory_cells(instance_decls)
        self.plain_sharers = self._plain_sharers()
        # per thread, made when asked (`_entry_ids`): only threads with a kernel entry ask
        self._entry_checks: dict[int, tuple[int, ...]] = {}
        self._entry_resets: dict[int, tuple[int, ...]] = {}
        # every instruction's footprint, packed (`footprints.ThreadFootprints`): `footprints[t][pc]`
        self.footprints: list[ThreadFootprints] = [
            ThreadFootprints((packed(self._static_footprint(t, instr), self.cell_base) for instr in body),
                             self.cell_base)
            for t, body in enumerate(self.bodies)
        ]
        self.tables = [ThreadTable(body, fps) for body, fps in zip(self.bodies, self.footprints)]
        # resource -> the threads that may touch it
        self.touchers = ResourceIndex.of_threads(self.resource_count, (table.resources for table in self.tables))
        self._waits = [_WaitTable([self._static_wait(t, instr) for instr in body]) for t, body in enumerate(self.bodies)]
        self._resolved = {}

    @property
    def resource_count(self) -> int:
        """Semaphore instances, then buffer cells, then lifecycle cells: every resource a
        footprint of the protocol names (`footprints.channels`)."""
        return self.cell_base + self.lifecycle_base + self.protocol.devices * self.protocol.cores

    def waiters(self, sid: int) -> list[int]:
        """The threads that may wait on (or read) semaphore instance `sid`."""
        return [t for t in self.touchers.get(sid) if self.tables[t].future(0, sid)[1] & Y_WAITER]

    def _static_wait(self, t: int, instr: ir.Instr) -> tuple | None:
        """(semaphore, amount) of a wait whose semaphore and amount are constants, so that
        `enabled` need not resolve it in every state; `_NEVER_BLOCKS` for an instruction
        that is no wait, `_STOPS` for the point where the thread's lowering stopped; None
        when only the state can tell (or executing it faults)."""
        if type(instr) is ir.Cut:
            return _STOPS
        if not isinstance(instr, (ir.Wait, ir.DmaWait)):  # WAIT_RULES' instructions
            return _NEVER_BLOCKS
        ref = instr.sem
        need = instr.value if isinstance(instr, ir.Wait) else instr.nbytes
        if not (isinstance(need, int) and isinstance(ref.index, int)
                and ir.is_constant(ref.device) and ir.is_constant(ref.core)):
            return None
        sids = self._candidates(t, ref)
        return (next(iter(sids)), need) if len(sids) == 1 else None


    def is_buffer_cell(self, cell: int) -> bool:
        return cell < self.lifecycle_base

    def racing_pairs(self) -> list[tuple[int, int, int, int]]:
        """(t, pc, copy_t, copy_pc): each access (load, store or copy start) that may race
        with the copy started at (copy_t, copy_pc): one of the two writes a cell the other
        touches or overlaps, and neither program order nor counting puts every such
        completion of the copy before the access (`ordering.CopyOrder`). Copies are indexed
        by cell, so a collective with thousands of copies is not compared pair by pair.
        Computed once: the race checks, the reduction and the z3 encoding all ask."""
        if self._racing_pairs is None:
            from semcheck.ordering import CopyOrder

            pairs = []
            order = None  # made at the first pair: most protocols without copies have none
            for pair in self._overlapping_pairs():  # a ring of N devices has 2N^2: not all kept
                if self._exclude_ordered_pairs:
                    if order is None:
                        order = CopyOrder(self)
                    if order.excludes(*pair):
                        continue
                pairs.append(pair)
            self._racing_pairs = pairs
        return self._racing_pairs

    def _overlapping_pairs(self):
        """(t, pc, copy_t, copy_pc) of each access and copy whose cells overlap, one of the
        two writing: copies are indexed by the buffer cells they write and those they touch
        or overlap (two arrays each, not a list per cell: a ring of N devices has N^2)."""
        base, stride = self.cell_base, max((len(body) for body in self.bodies), default=0) + 1
        copies = array("q", [t * stride + pc for t, body in enumerate(self.bodies)
                             for pc, instr in enumerate(body) if type(instr) is ir.DmaStart])

        def cells(member: int):
            def pairs():
                for copy in copies:
                    t, pc = divmod(copy, stride)
                    for r, bits in self.footprints[t].entries(pc):
                        if bits & member and self.is_buffer_cell(r - base):
                            yield r - base, copy
            return pairs

        writing = ResourceIndex(self.lifecycle_base, cells(M_MWRITE))  # cell -> copies that write it
        near = ResourceIndex(self.lifecycle_base, cells(M_MNEAR))  # cell -> copies that touch or overlap it
        for t, body in enumerate(self.bodies):
            looping = looping_pcs(body)
            fps = self.footprints[t]
            for pc in range(len(body)):
                found: set[int] = set()
                for r, bits in fps.entries(pc):
                    c = r - base
                    if c < 0 or not self.is_buffer_cell(c):
                        continue
                    if bits & M_MWRITE:
                        found.update(near.get(c))
                    if bits & M_MNEAR:
                        found.update(writing.get(c))
                for copy in sorted(found):
                    ct, cpc = divmod(copy, stride)
                    if (ct, cpc) == (t, pc) and pc not in looping:
                        continue  # a copy started once is never in flight when it starts
                    yield t, pc, ct, cpc

    def race_candidates(self, events: tuple[Event, ...], t: int, pc: int) -> list[Event]:
        """The distinct pending completions (of sorted `events`) that may race with the
        access of (t, pc): those of the copy starts `racing_pairs` pairs it with, a
        superset of every completion whose access overlaps it (an overlap means one's
        cell is near the other's, which is how the pairs are found). A ring has about
        one completion in flight per device, and a slot is written by one copy and read
        by another: the few are found by bisection, not by comparing every completion."""
        if self._race_copies is None:
            table: dict[tuple[int, int], set[tuple[int, int]]] = {}
            for at, at_pc, ct, cpc in self.racing_pairs():
                table.setdefault((at, at_pc), set()).add((ct, cpc))
            self._race_copies = {
                key: tuple(sorted((side, ct, cpc) for side in (SEND, RECV) for ct, cpc in copies))
                for key, copies in table.items()
            }
        prefixes = self._race_copies.get((t, pc), ())
        if len(prefixes) >= len(events):  # as many to look for as there are: scan them
            return _distinct(events)
        found: list[Event] = []
        n = len(events)
        for prefix in prefixes:
            side, issuer, start_pc = prefix
            k = bisect_left(events, prefix)
            previous = None
            while k < n:
                e = events[k]
                if e.side != side or e.issuer != issuer or e.start_pc != start_pc:
                    break
                if e != previous:  # identical completions are one
                    found.append(e)
                    previous = e
                k += 1
        return found

    def plain_racing_pairs(self):
        """(t, pc, u, upc) with t < u: a load or store of thread t and one of thread u that
        may touch overlapping memory, one of them a write (`_plain_races` checks them)."""
        seen = set()
        for bid, sharers in self.plain_sharers.items():
            sites = [
                (t, pc) for t in sharers for pc, instr in enumerate(self.bodies[t])
                if isinstance(instr, (ir.Load, ir.Store))
                and bid in self._region_instances(t, instr.region, instr.device)
            ]
            for (t, pc), (u, upc) in itertools.combinations(sites, 2):
                if t == u or (t, pc, u, upc) in seen or _both_atomic(self.bodies[t][pc], self.bodies[u][upc]):
                    continue
                a, b = self.footprints[t][pc], self.footprints[u][upc]
                if not (a.mwrite & b.mnear or b.mwrite & a.mnear):
                    continue
                seen.add((t, pc, u, upc))
                yield t, pc, u, upc

    # -- construction helpers --

    def _lifecycle_tables(self) -> None:
        """Per thread and pc: which kernel invocation it is in."""
        self.has_lifecycle = [any(isinstance(i, ir.KernelEntry) for i in b) for b in self.bodies]
        self.invocation_at: list[bytes | array] = []
        self.core_threads: dict[tuple[int, int], list[int]] = {}
        for t, body in enumerate(self.bodies):
            thread = self.threads[t]
            self.core_threads.setdefault((thread.device, thread.core), []).append(t)
            if not self.has_lifecycle[t]:  # invocation 0 throughout (and the "finished" slot)
                self.invocation_at.append(bytes(len(body) + 1))
                continue
            invocation, row = 0, array("i")
            for instr in body + (None,):  # the extra slot is "finished"
                row.append(invocation)
                if isinstance(instr, ir.KernelEntry):
                    invocation += 1
            self.invocation_at.append(row)

    def _validate(self, t: int, thread: ir.Thread) -> None:
        p = self.protocol
        if not (0 <= thread.device < p.devices and 0 <= thread.core < p.cores):
            raise ProtocolError(f"thread {thread.name} lies outside {p.devices}x{p.cores}")
        for instr in thread.body:
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

    def _candidates(self, t: int, ref: ir.SemRef) -> frozenset[int]:
        """Every instance `ref` may resolve to (exact when it is constant)."""
        thread = self.threads[t]
        constant = isinstance(ref.index, int) and ir.is_constant(ref.device) and ir.is_constant(ref.core)
        if constant:
            key = (ref, thread.device, thread.core)
            known = self._resolved.get(key)
            if known is None:
                if len(self._resolved) >= _RESOLVED_KEPT:
                    self._resolved.clear()
                known = self._resolved[key] = self._resolve(thread, ref)
            return known
        return self._resolve(thread, ref)

    def _resolve(self, thread: ir.Thread, ref: ir.SemRef) -> frozenset[int]:
        decl, base = self._allocs[ref.alloc]
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
        found = set()
        for device, core, index in itertools.product(devices, cores, indices):
            sid = self._instance_id(decl, base, device, core, index)
            if sid is not None:
                found.add(sid)
        return frozenset(found)

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

    def _memory_cells(self, instance_decls: list[int]) -> None:
        """The memory cells (`cells.MemoryCells`) of every region an instruction names."""
        decls = list(self.protocol.buffers)
        first = [self._buffers[decl.name][1] for decl in decls]
        self.cells = cells = MemoryCells(instance_decls, decls, first)
        for t, body in enumerate(self.bodies):
            for instr in body:
                for region, device, core in _located_regions(instr):
                    key = self._static_key(region)
                    for bid in self._region_instances(t, region, device, core):
                        cells.name(bid, key)
        self.lifecycle_base = cells.finish()

    def _plain_sharers(self) -> dict[int, tuple[int, ...]]:
        """Buffer instance -> the threads whose plain loads and stores may touch it, for the
        instances more than one thread accesses that way (GPU shared and global memory; a
        TPU core's VMEM is its own)."""
        users: dict[int, set[int]] = {}
        for t, body in enumerate(self.bodies):
            for instr in body:
                if isinstance(instr, (ir.Load, ir.Store)):
                    for bid in self._region_instances(t, instr.region, instr.device):
                        users.setdefault(bid, set()).add(t)
        return {bid: tuple(sorted(ts)) for bid, ts in users.items() if len(ts) > 1}

    def buffer_decl(self, name: str) -> ir.BufferDecl | None:
        entry = self._buffers.get(name)
        return entry[0] if entry is not None else None

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

    def _cell_candidates(self, t: int, region: ir.Region, device=None, core=None) -> tuple[frozenset[int], frozenset[int]]:
        """(cells, near) of the memory a region may touch: its own cell when its starts are
        constant, else its buffer instances' "anywhere" cells."""
        key = self._static_key(region)
        own = set()
        for bid in self._region_instances(t, region, device, core):
            cell = self.cells.cell_of(bid, key)
            own.add(cell if cell is not None else self.cells.anywhere(bid))
        return frozenset(own), self.near_of(own)

    def near_of(self, cells) -> frozenset[int]:
        return self.cells.near_of(cells)

    def access_cell(self, access: Access) -> int:
        cell = self.cells.cell_of(access.buffer, (access.starts, access.sizes))
        return cell if cell is not None else self.cells.anywhere(access.buffer)

    def lifecycle_cell(self, device: int, core: int | None) -> int:
        """The cell standing for "which invocation (device, core) is in" (its own near)."""
        return self.lifecycle_base + device * self.protocol.cores + (core or 0)

    def _lifecycle_candidates(self, t: int, device, core) -> frozenset[int]:
        """Lifecycle cells of the cores a signal or copy may reach."""
        thread = self.threads[t]
        devices = [thread.device if device is None else device] if ir.is_constant(device) else range(self.protocol.devices)
        cores = [thread.core if core is None else core] if ir.is_constant(core) else range(self.protocol.cores)
        return frozenset(
            self.lifecycle_cell(d, c) for d, c in itertools.product(devices, cores)
            if 0 <= d < self.protocol.devices and 0 <= c < self.protocol.cores
        )

    def _entry_ids(self, t: int, checked_only: bool) -> tuple[int, ...]:
        """A thread's core's scratch and scoped semaphores (TPU), in id order, from each
        declaration's block of ids; with `checked_only`, those the chip checks at exit.
        Entering a kernel again finds the leftovers of all of them; it zeroes only the
        checked ones: one the chip does not check (disable_semaphore_checks=True) keeps its
        count into the next kernel (semcheck/tpu_facts.py). Made when asked and kept."""
        kept = self._entry_resets if checked_only else self._entry_checks
        found = kept.get(t)
        if found is None:
            th = self.threads[t]
            found = ()
            if self.backend is Backend.TPU and not th.sub:
                table = self.instances
                ids: list[int] = []
                # a device-scope instance belongs to no core: no entry allocates it
                for decl, base, per_device in zip(table.decls, table.bases, table.per_device):
                    if (decl.origin in (SemOrigin.SCRATCH, SemOrigin.SCOPED) and decl.scope is Scope.CORE
                            and (decl.checked_at_exit or not checked_only)):
                        start = base + th.device * per_device + th.core * decl.size
                        ids.extend(range(start, start + decl.size))
                found = tuple(ids)
            kept[t] = found
        return found

    def entry_resets(self, t: int) -> tuple[int, ...]:
        """The semaphores a thread's kernel entry allocates afresh (zeroes): its core's
        scratch and scoped semaphores that the chip checks at exit, TPU only."""
        return self._entry_ids(t, checked_only=True)

    def entry_checks(self, t: int) -> tuple[int, ...]:
        """The semaphores whose count (or copy still landing) a thread's later kernel entry
        reports as the previous invocation's leftover: every scratch and scoped semaphore of
        its core, TPU only (a superset of `entry_resets`)."""
        return self._entry_ids(t, checked_only=False)

    def reset_on_entry(self, t: int) -> int:
        """`entry_resets` as a bitmask of instance ids."""
        return sum(1 << sid for sid in self.entry_resets(t))

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

    def enters_with(self, thread: ir.Thread, device: int, core: int | None) -> bool:
        """Whether (device, core) is always inside `thread`'s invocation while `thread` runs:
        it is the thread's own core, or another core of its chip when the cores of a chip
        enter and leave each invocation together (`Protocol.cores_enter_together`)."""
        if device != thread.device:
            return False
        return core == thread.core or self.protocol.cores_enter_together

    def arrival_basis(self, thread: ir.Thread, target: "SemInstance") -> str:
        """The disputable modelling choices an early arrival from `thread` at `target` rests on
        (docs/semantics.md), said at the finding; empty when it rests on none."""
        return "".join(f" ({said})" for said, _switch in self.arrival_readings(thread, target))

    def arrival_readings(self, thread: ir.Thread, target: "SemInstance") -> list[tuple[str, str | None]]:
        """`arrival_basis` as (what the check assumed, the switch that takes the other reading,
        None where there is none) pairs: the finding names them in fields too."""
        said: list[tuple[str, str | None]] = []
        if target.device == thread.device and self.protocol.cores > 1:
            said.append(("this rests on reading the cores of one chip as entering the kernel on their "
                         "own, --no-assume-cores-enter-together; JAX's own core barriers assume they enter together",
                         "--assume-cores-enter-together"))
        if target.decl.kind is SemKind.BARRIER and target.decl.origin is not SemOrigin.BARRIER:
            said.append((f"{target.decl.name} is a scratch SemaphoreType.BARRIER semaphore, checked as an "
                         "ordinary scratch semaphore allocated at entry, as Mosaic lowers it", None))
        return said

    def arrival_problem(self, state: State, device: int, core: int | None, invocation: int,
                        late_ok: bool = False) -> str | None:
        """Why something sent during `invocation` must not reach (device, core) now: it has
        not entered that invocation yet, or (unless `late_ok`: a copy into a buffer handed to
        a later kernel of the program) has moved on to a later one. None when it may (cores
        without a lifecycle have nothing to check against; after an exit, see the module
        docstring)."""
        cores = range(self.protocol.cores) if core is None else (core,)
        for c in cores:
            for q in self.core_threads.get((device, c), ()):
                pc = state.pcs[q]
                if not self.has_lifecycle[q] or pc == FAULTED:
                    continue
                current = self.invocation_at[q][pc]
                if current < invocation:
                    return "before it entered" + (f" invocation {invocation} of" if invocation > 1 else "")
                if current > invocation and not late_ok:
                    return f"after it left invocation {invocation} of"
        return None

    def lands_in_handed_on(self, t: int, pc: int) -> bool:
        """Whether the copy started at (t, pc) writes a buffer, and counts on a semaphore, that
        outlive the kernel that started it (so it may land after that kernel ended there)."""
        instr = self.bodies[t][pc]
        return (
            isinstance(instr, ir.DmaStart)
            and self._buffers[instr.dst.buffer][0].handed_on
            and self._allocs[instr.recv_sem.alloc][0].origin in ir.OUTLIVES_KERNEL
        )

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
        sems = Counts(len(self.instances))
        return State(pcs, regs, sems, (), (), tuple(inputs), ())

    def current(self, state: State, t: int) -> ir.Instr | None:
        pc = state.pcs[t]
        body = self.bodies[t]
        return body[pc] if 0 <= pc < len(body) else None

    def finished(self, state: State, t: int) -> bool:
        return state.pcs[t] == len(self.bodies[t])

    def blocked_wait(self, state: State, t: int) -> tuple[int, int, int] | None:
        """(semaphore, needed, current count) when thread t sits at a wait it cannot pass."""
        pc = state.pcs[t]
        if 0 <= pc < len(self.bodies[t]):
            known = self._waits[t][pc]
            if known is _NEVER_BLOCKS or known is _STOPS:
                return None
            if known is not None:
                sid, need = known
                have = state.sems[sid]
                return None if have >= need else (sid, need, have)
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

    def completion_amount(self, sid: int, nbytes: int) -> int:
        """What one completion of a copy of `nbytes` adds to semaphore instance `sid`."""
        return dma_increment(self.instances[sid].decl, nbytes)

    def static_wait(self, t: int, pc: int) -> tuple[int, int] | None:
        """(semaphore, amount) of the wait at (t, pc) when both are constants, else None."""
        known = self._waits[t][pc]
        return None if known is _NEVER_BLOCKS or known is _STOPS else known

    def can_move(self, state: State, t: int) -> bool:
        """Whether thread t has an instruction to execute that is not a blocked wait."""
        pc = state.pcs[t]
        waits = self._waits[t]
        if not 0 <= pc < len(waits):
            return False
        known = waits[pc]
        if known is _NEVER_BLOCKS:
            return True
        if known is _STOPS:
            return False
        if known is not None:
            return state.sems[known[0]] >= known[1]
        return self.blocked_wait(state, t) is None

    def movable_threads(self, state: State) -> tuple[int, ...]:
        return tuple(t for t in range(len(self.bodies)) if self.can_move(state, t))

    def movable_after(self, before: State, movable: tuple[int, ...], action: Action, after: State) -> tuple[int, ...]:
        """`movable_threads(after)` for a successor of `before` by `action`, from the
        threads that could move in `before`: only the acting thread, and threads whose wait
        may name a semaphore whose count changed, can differ. (A thread's wait resolves
        through its own registers, which only its own steps change.)"""
        recheck = {action[1]} if action[0] == "t" else set()
        if before.sems is not after.sems:
            for sid, _count in set(before.sems.items).symmetric_difference(after.sems.items):
                recheck.update(self.waiters(sid))
        if not recheck:
            return movable
        kept = [t for t in movable if t not in recheck]
        kept += [t for t in recheck if self.can_move(after, t)]
        return tuple(sorted(kept))

    def enabled(self, state: State, movable: tuple[int, ...] | None = None) -> list[Action]:
        """Every enabled action: each thread that can move (`movable`, when the caller
        already knows them), then each distinct pending completion."""
        threads = self.movable_threads(state) if movable is None else movable
        actions: list[Action] = [("t", t) for t in threads]
        if state.events:
            actions.extend([("e", e) for e in _distinct(state.events)])
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

    def may_add(self, t: int, pc: int, sid: int) -> bool:
        """Whether thread t, from pc on, may still add to semaphore instance `sid` (through
        its own signals or the copies it starts)."""
        from semcheck.footprints import X_INC

        return bool(self.tables[t].future(pc, sid)[0] & X_INC)

    def touches(self, t: int) -> frozenset[int]:
        """Every semaphore instance and memory cell (ids of one space: instances below
        `cell_base`) thread `t` may ever act on, through its own instructions or the copies
        it starts. Threads that share none of these, nor an input they read
        (`inputs_read`), can never affect each other (`engines/components.py`)."""
        return self.tables[t].reachable

    def inputs_read(self, t: int) -> frozenset[str]:
        """The protocol inputs thread `t`'s instructions read."""
        if not self.input_index:  # most protocols have none: skip walking every operand
            return frozenset()
        return frozenset(
            name for instr in self.bodies[t] for op in _operands(instr)
            for name in ir.registers_of(op) if name in self.input_index
        )

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


def _distinct(events: tuple[Event, ...]) -> list[Event]:
    """The pending completions once each (they are sorted: one equal to the one before it
    is the same actor)."""
    return [e for e, before in zip(events, (None, *events)) if e != before]


def _complete(system: "System", state: State, event: Event) -> State:
    events = list(state.events)
    events.remove(event)
    sems = state.sems.add(event.sem, event.inc)
    hazards = state.hazards
    # Unlike a signal, a landing copy is checked whatever semaphore counts it: what arrives
    # early is its write into the peer's buffer, which does not outlive the kernel.
    if event.invocation and event.side == RECV:
        target = system.instances[event.sem]
        issuer = system.threads[event.issuer]
        remote = not system.enters_with(issuer, target.device, target.core)
        problem = remote and system.arrival_problem(state, target.device, target.core, event.invocation,
                                                    late_ok=system.lands_in_handed_on(event.issuer, event.start_pc))
        if problem:
            hazards = _with(hazards, Hazard(
                REMOTE_BEFORE_ENTRY, event.issuer, event.start_pc, -1, -1,
                f"the copy lands on {ir.thread_name(target.device, target.core, 0, system.protocol.cores)} "
                f"{problem} the kernel{system.arrival_basis(issuer, target)}",
                event.sem,
            ))
    return state._replace(sems=sems, events=tuple(events), hazards=hazards)


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
    found: list[Hazard] = []
    pc = state.pcs[t]
    if not state.events:
        return found
    buffers = {access.buffer for access in accesses}
    for event in system.race_candidates(state.events, t, pc):
        for pending in event.accesses:
            if pending.buffer not in buffers:  # most copies in flight move other buffers
                continue
            for access in accesses:
                if conflict(pending, access):
                    found.append(Hazard(
                        DATA_RACE, t, pc, event.issuer, event.start_pc,
                        _race_detail(system, access, pending),
                    ))
    return found


def _verb(access: Access) -> str:
    return "atomically updates" if access.atomic else "writes" if access.write else "reads"


def _race_detail(system: "System", access: Access, pending: Access) -> str:
    where = system.buffer_instances[access.buffer].label
    verb = _verb(access)
    other = "writes" if pending.write else "reads"
    return (
        f"{verb} {where} {_extent(access)} while a copy still in flight {other} "
        f"{_extent(pending)} of it"
    )


def _extent(access: Access) -> str:
    if not access.starts:
        return "(whole buffer)"
    return "[" + ", ".join(f"{s}:{s + z}" for s, z in zip(access.starts, access.sizes)) + "]"


def _add(sems: Counts, sid: int, delta: int) -> Counts:
    return sems.add(sid, delta)


def _set_reg(system: System, state: State, t: int, name: str, value: int):
    regs = list(state.regs)
    row = list(regs[t])
    row[system.registers[t][name]] = value
    regs[t] = tuple(row)
    return tuple(regs)


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
        or target.decl.origin in ir.OUTLIVES_KERNEL
        or system.enters_with(thread, target.device, target.core)
    ):
        return state.hazards
    problem = system.arrival_problem(state, target.device, target.core, system.invocation_at[t][pc])
    if problem is None:
        return state.hazards
    return _with(state.hazards, Hazard(
        REMOTE_BEFORE_ENTRY, t, pc, -1, -1,
        f"signals {target.label} {problem} the kernel{system.arrival_basis(thread, target)}",
        sid,
    ))


def _exec_wait(system: System, t: int, instr: ir.Wait, state: State) -> State:
    sid = system.resolve(t, instr.sem, state)
    if not instr.decrement:
        return _advance(state, t, hazards=_phase_overrun(system, state, t, sid, instr))
    return _advance(state, t, sems=_add(state.sems, sid, -system.eval(instr.value, t, state)))


def _phase_overrun(system: System, state: State, t: int, sid: int, instr: ir.Wait) -> tuple[Hazard, ...]:
    """An mbarrier wait names its phase by parity only (docs/semantics.md): if the barrier has
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
        BARRIER_PHASE_OVERRUN, t, state.pcs[t], -1, -1,
        f"waits for phase {phase} of {system.instances[sid].label}, which has already completed "
        f"phase {count // per_phase - 1} ({count} arrivals of {per_phase} per phase)",
        sem=sid,
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
    # As the z3 encoding orders them: both semaphores, then the peer, then the windows.
    send = system.resolve(t, instr.send_sem, state) if instr.send_sem is not None else None
    landing = system.instances[recv]
    nbytes = system.eval(instr.nbytes, t, state)
    pc = state.pcs[t]
    src_device = None if instr.src_device is None else _device_in_mesh(system, system.eval(instr.src_device, t, state))
    src = system.resolve_region(t, instr.src, state, write=False, device=src_device)
    if instr.dst_device is None:
        dst = system.resolve_region(t, instr.dst, state, write=True, device=landing.device,
                                    core=landing.core if landing.core is not None else system.threads[t].core)
    else:
        dst = system.resolve_region(t, instr.dst, state, write=True,
                                    device=_device_in_mesh(system, system.eval(instr.dst_device, t, state)))
    for side, access in (("source", src), ("destination", dst)):
        _check_window(system, side, access)
    invocation = system.invocation_at[t][pc] if system.has_lifecycle[t] else 0
    hazards = _with(state.hazards, *_races(system, state, t, [src, dst]))
    if send is None:  # local: the source is read until the copy lands
        new = [Event(RECV, t, pc, recv, dma_increment(landing.decl, nbytes), (src, dst), invocation)]
    else:
        new = [
            Event(RECV, t, pc, recv, dma_increment(landing.decl, nbytes), (dst,), invocation),
            Event(SEND, t, pc, send, dma_increment(system.instances[send].decl, nbytes), (src,), invocation),
        ]
    if nbytes == 0:
        return _complete_at_start(system, state, t, new, hazards)
    events = list(state.events)
    for event in new:  # already sorted: each goes in by bisection, not by sorting them all
        insort(events, event)
    return _advance(state, t, events=tuple(events), hazards=hazards)


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


def _access_device(system: System, t: int, instr: ir.Load | ir.Store, state: State) -> int | None:
    """The device whose buffer a plain access touches (None: the thread's own), or a _Fault
    for a device id outside the mesh."""
    if instr.device is None:
        return None
    return _device_in_mesh(system, system.eval(instr.device, t, state))


def _device_in_mesh(system: System, device: int) -> int:
    devices = system.protocol.devices
    if not 0 <= device < devices:
        raise _Fault(INVALID_DEVICE, f"device id {device} is outside the mesh of {devices} devices (0..{devices - 1})")
    return device


def _exec_access(system: System, t: int, instr: ir.Load | ir.Store, state: State) -> State:
    access = _plain_access(system, t, instr, state)
    found = _races(system, state, t, [access]) + _plain_races(system, state, t, access)
    return _advance(state, t, hazards=_with(state.hazards, *found))


def _plain_races(system: System, state: State, t: int, access: Access) -> list[Hazard]:
    """Another thread sits at a load or store that conflicts with `access`: both are enabled
    in this state, so nothing orders them. Checked by whichever of the two runs first, so
    every schedule in which they are enabled together finds it."""
    found = []
    for u in system.plain_sharers.get(access.buffer, ()):
        other = system.current(state, u) if u != t else None
        if not isinstance(other, (ir.Load, ir.Store)):
            continue
        try:
            theirs = _plain_access(system, u, other, state)
        except _Fault:
            continue  # it faults when it runs, touching nothing
        if conflict(access, theirs):
            found.append(Hazard(PLAIN_RACE, t, state.pcs[t], u, state.pcs[u], _plain_race_detail(system, access, theirs)))
    return found


def _plain_access(system: System, t: int, instr: ir.Load | ir.Store, state: State) -> Access:
    """The access a load or store of thread t makes (a _Fault for a device outside the mesh)."""
    device = _access_device(system, t, instr, state)
    store = isinstance(instr, ir.Store)
    access = system.resolve_region(t, instr.region, state, write=store, device=device)
    return access._replace(atomic=True) if isinstance(instr, ir.Store) and instr.atomic else access


def _plain_race_detail(system: System, access: Access, other: Access) -> str:
    where = system.buffer_instances[access.buffer].label
    verb = _verb(access)
    theirs = "atomically update" if other.atomic else "write" if other.write else "read"
    return f"{verb} {where} {_extent(access)} while another thread may {theirs} {_extent(other)} of it at the same time"


def _exec_entry(system: System, t: int, instr: ir.KernelEntry, state: State) -> State:
    """A fresh allocation of the core's semaphores. Entering again (a later invocation)
    first finds what the previous one left: a non-zero count, or one of its copies still
    landing, is that invocation's leftover (TPU checks every semaphore at kernel exit). A
    copy's hazard names its start as the other party: that line is the leftover's cause.
    A semaphore the chip does not check at exit (disable_semaphore_checks=True) is reported
    the same way but not zeroed: its count carries into the new invocation."""
    checked = system.entry_checks(t)
    if not checked:
        return _advance(state, t)
    pc = state.pcs[t]
    resetting = frozenset(system.entry_resets(t))
    watched = frozenset(checked)
    found: list[Hazard] = []
    if system.invocation_at[t][pc] >= 1:  # not the first entry
        found = [
            Hazard(LEFTOVER_AT_EXIT, t, pc, -1, -1,
                   f"{system.instances[sid].label} holds {count} (left by the previous invocation)", sem=sid)
            for sid in checked if (count := state.sems[sid])
        ] + [
            Hazard(LEFTOVER_AT_EXIT, t, pc, e.issuer, e.start_pc,
                   f"a copy of the previous invocation is still landing on {system.instances[e.sem].label}", sem=e.sem)
            for e in _distinct(state.events) if e.sem in watched
        ]
    return _advance(state, t, sems=state.sems.zeroed(resetting), hazards=_with(state.hazards, *found))


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
        and decl.origin not in ir.OUTLIVES_KERNEL
    )
    remote = ref.device is not None or ref.core is not None
    life = system._lifecycle_candidates(t, ref.device, ref.core) if remote and checked else _NONE
    mask = system._candidates(t, ref)
    negative = mask if _may_be_negative(system, t, instr.inc) else _NONE
    return Footprint(inc=mask, dec=negative, mread=life, mnear=life)


def _fp_wait(system: System, t: int, instr: ir.Wait) -> Footprint:
    mask = system._candidates(t, instr.sem)
    if instr.decrement:
        return Footprint(dec=mask, inc=mask if _may_be_negative(system, t, instr.value) else _NONE)
    # An mbarrier phase wait reads the count (_phase_overrun), so arrivals do not commute with it.
    phased = system._allocs[instr.sem.alloc][0].arrivals_per_phase
    return Footprint(wait=mask, read=mask if phased else _NONE)


def _fp_dma_wait(system: System, t: int, instr: ir.DmaWait) -> Footprint:
    mask = system._candidates(t, instr.sem)
    return Footprint(dec=mask, inc=mask if _may_be_negative(system, t, instr.nbytes) else _NONE)


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
    src, src_near = system._cell_candidates(t, instr.src, *instr.src_place())
    dst, dst_near = system._cell_candidates(t, instr.dst, *instr.dst_place())
    life = system._lifecycle_candidates(t, instr.device, instr.core) if remote else _NONE
    negative = mask if _may_be_negative(system, t, instr.nbytes) else _NONE
    return Footprint(inc=mask, dec=negative, mread=src | life, mwrite=dst, mnear=src_near | dst_near | life)


def _fp_load(system: System, t: int, instr: ir.Load) -> Footprint:
    cells, near = system._cell_candidates(t, instr.region, instr.device)
    return Footprint(mread=cells, mnear=near)


def _fp_store(system: System, t: int, instr: ir.Store) -> Footprint:
    cells, near = system._cell_candidates(t, instr.region, instr.device)
    return Footprint(mwrite=cells, mnear=near)


def _fp_entry(system: System, t: int, instr: ir.KernelEntry) -> Footprint:
    """Entry resets (and, when repeated, checks) the core's semaphores, and changes which
    invocation the core is in."""
    th = system.threads[t]
    own = frozenset(system.entry_resets(t))
    life = frozenset((system.lifecycle_cell(th.device, th.core),))
    return Footprint(dec=own, read=frozenset(system.entry_checks(t)), mwrite=life, mnear=life)


def event_footprint(system: System, event: Event, watched: bool = True) -> Footprint:
    """What a pending completion touches: its semaphore, the memory its copy still reads or
    writes (unless its line is no longer watched for races), and, for a copy of a kernel
    invocation landing on a peer, whether that peer is inside the invocation."""
    mread: set[int] = set()
    mwrite: set[int] = set()
    for access in event.accesses if watched else ():
        (mwrite if access.write else mread).add(system.access_cell(access))
    if event.invocation and event.side == RECV:
        target = system.instances[event.sem]
        mread.add(system.lifecycle_cell(target.device, target.core))
    sem = frozenset((event.sem,))
    # a negative size lowers the count: the completion can disable a wait
    return Footprint(
        inc=sem, dec=sem if event.inc < 0 else _NONE, mread=frozenset(mread), mwrite=frozenset(mwrite),
        mnear=system.near_of(mread | mwrite),
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


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


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
    for name in ("inc", "value", "nbytes", "cond", "device", "core", "dst_device", "src_device"):
        if hasattr(instr, name):
            ops.append(getattr(instr, name))
    for name in ("region", "src", "dst"):
        region = getattr(instr, name, None)
        if isinstance(region, ir.Region):
            ops.extend(region.start + region.size)
    return ops


def _both_atomic(a: ir.Instr, b: ir.Instr) -> bool:
    return isinstance(a, ir.Store) and isinstance(b, ir.Store) and a.atomic and b.atomic


def _located_regions(instr: ir.Instr) -> list[tuple[ir.Region, ir.Operand | None, ir.Operand | None]]:
    """Each region an instruction touches, with the device and core it lives on (None:
    the thread's own)."""
    if isinstance(instr, ir.DmaStart):
        return [(instr.src, *instr.src_place()), (instr.dst, *instr.dst_place())]
    if isinstance(instr, (ir.Load, ir.Store)):
        return [(instr.region, instr.device, None)]
    return []


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
    """TPU: scratch, scoped and barrier semaphores must be 0 when the kernel ends (the chip
    halts the core otherwise, or, unchecked, the count carries into the next kernel:
    semcheck/tpu_facts.py); a semaphore handed to a kernel outside the protocol is exempt,
    and one handed between the kernels of a program is judged when the program ends. GPU:
    GMEM semaphores are zero-filled before each launch, so nothing is required, except of the
    barrier semaphores (plgpu.get_barrier_semaphore), which the next kernel of the same
    collective_id starts from."""
    if backend is Backend.GPU:
        return decl.origin is SemOrigin.BARRIER
    return decl.origin in (SemOrigin.SCRATCH, SemOrigin.SCOPED, SemOrigin.BARRIER, SemOrigin.HANDED_ON)
