"""A Protocol's static tables, per thread: semaphore and buffer allocations and their
instances, registers, memory cells, kernel invocations and lifecycle cells; and the reading of
an instruction's operands, semaphores and regions in a state against them. `System`
(system.py) adds the footprints, the transition rules and the search's queries on top."""

from __future__ import annotations

import gc
import itertools
from array import array
from contextlib import contextmanager

from semcheck import ir
from semcheck.errors import ProtocolError
from semcheck.records import record
from semcheck.ir import Backend, Scope, SemKind, SemOrigin, apply_op
from semcheck.semantics import instructions
from semcheck.semantics.cells import MemoryCells
from semcheck.semantics.footprints import ThreadFootprints, ThreadTable
from semcheck.semantics.instances import BufferInstance, SemInstance, SemInstances
from semcheck.semantics.resource_index import ResourceIndex
from semcheck.semantics.state import (
    FAULTED, INVALID_CORE, INVALID_DEVICE, INVALID_SEM_INDEX, Access, Fault, State, dma_increment,
)

_RESOLVED_KEPT = 16_384


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


@record(frozen=True)
class SemAsDeclared:
    """A semaphore instance as the kernel of one invocation declares it (`Tables.sem_as`)."""

    label: str  # as messages name it there ("sem[1] on device 0")
    decl: ir.SemDecl  # that kernel's declaration: its name, line and checks at exit
    declared: str  # where it is declared, for a message


class Tables:
    """The static part of a `System`: what the protocol declares, resolved per thread."""

    # filled in by `System` once the footprint rules (rules.py) have run over every instruction
    footprints: list[ThreadFootprints]
    tables: list[ThreadTable]
    touchers: ResourceIndex

    def _build_tables(self, protocol: ir.Protocol) -> None:
        self.protocol = protocol
        self.threads = protocol.threads
        self.bodies = [t.body for t in protocol.threads]
        self.backend = protocol.backend
        # (ref, device, core) -> its instances, for constant refs, while the tables are built:
        # they resolve each instruction's semaphores several times (cleared past
        # `_RESOLVED_KEPT`: a ring of N devices has N^2 distinct ones)
        self._resolved: dict[tuple[ir.SemRef, int, int], frozenset[int]] = {}
        self.allocs: dict[str, tuple[ir.SemDecl, int]] = {}
        for decl in protocol.semaphores:
            if decl.name in self.allocs:
                raise ProtocolError(f"semaphore {decl.name!r} declared twice", decl.loc)
            self.allocs[decl.name] = (decl, 0)
        self.instances = SemInstances(protocol.semaphores, protocol.devices, protocol.cores)
        # where memory cells start in the resource numbering of `footprints.channels`
        self.cell_base = len(self.instances)
        for decl, base in zip(self.instances.decls, self.instances.bases):
            self.allocs[decl.name] = (decl, base)
        self.buffer_allocs: dict[str, tuple[ir.BufferDecl, int]] = {}
        self.buffer_instances: list[BufferInstance] = []
        instance_decls: list[int] = []
        for k, buffer in enumerate(protocol.buffers):
            if buffer.name in self.buffer_allocs:
                raise ProtocolError(f"buffer {buffer.name!r} declared twice", buffer.loc)
            self.buffer_allocs[buffer.name] = (buffer, len(self.buffer_instances))
            for device in range(protocol.devices):
                cores = range(protocol.cores) if buffer.scope is Scope.CORE else (None,)
                for core in cores:
                    self.buffer_instances.append(BufferInstance(buffer, device, core, protocol.cores))
                    instance_decls.append(k)
        self._lifecycle_tables()
        self.input_index = {inp.name: i for i, inp in enumerate(protocol.inputs)}
        self.registers: list[dict[str, int]] = [
            instructions.registers_written(t.body) for t in protocol.threads
        ]
        for t, thread in enumerate(self.threads):
            self._validate(t, thread)
        self._memory_cells(instance_decls)
        self.plain_sharers = self._plain_sharers()
        # per thread, made when asked (`_entry_ids`): only threads with a kernel entry ask
        self._entry_checks: dict[int, tuple[int, ...]] = {}
        self._entry_resets: dict[int, tuple[int, ...]] = {}

    @property
    def resource_count(self) -> int:
        """Semaphore instances, then buffer cells, then lifecycle cells: every resource a
        footprint of the protocol names (`footprints.channels`)."""
        return self.cell_base + self.lifecycle_base + self.protocol.devices * self.protocol.cores

    def is_buffer_cell(self, cell: int) -> bool:
        return cell < self.lifecycle_base

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
        self._ledger_tables()

    def _ledger_tables(self) -> None:
        """Which barrier semaphores keep a ledger (`State.ledger`): on TPU, a barrier
        semaphore outlives the kernel, so every invocation with its collective_id (the same
        kernel again, `--invocations`, or another kernel of a program) counts on it. One that
        some thread adds to in an invocation later than one in which some thread waits on
        it can let a wait pass on a later invocation's units (`rules._early_pass`): its
        additions from invocations after the first it is waited in are kept apart
        (`ledger_floor[sid]`: that invocation). Every other semaphore keeps no ledger, so a
        protocol of one invocation, or of kernels with their own collective_ids, has the
        states it would have without one."""
        self.ledger_floor: dict[int, int] = {}
        # the most kernel invocations a thread runs (0: no thread has a kernel entry); a
        # row only grows, and its last slot is "finished"
        self.most_invocations = max((row[-1] for row in self.invocation_at), default=0)
        self.ledger_stride = self.most_invocations + 1
        if self.backend is not Backend.TPU or self.most_invocations < 2:
            return  # no later invocation to tell apart (and no pass over every instruction)
        barriers = {name for name, (decl, _base) in self.allocs.items() if decl.origin is SemOrigin.BARRIER}
        waited: dict[str, int] = {}
        added: dict[str, int] = {}
        for t, body in enumerate(self.bodies):
            at = self.invocation_at[t]
            for pc, instr in enumerate(body):
                if isinstance(instr, (ir.Wait, ir.DmaWait)) and instr.sem.alloc in barriers:
                    waited[instr.sem.alloc] = min(waited.get(instr.sem.alloc, at[pc]), at[pc])
                for ref in instructions.added_refs(instr):
                    if ref.alloc in barriers:
                        added[ref.alloc] = max(added.get(ref.alloc, at[pc]), at[pc])
        for name, first_wait in waited.items():
            if added.get(name, 0) > first_wait:
                for sid in self.instances.of_decl(self.allocs[name][0]):
                    self.ledger_floor[sid] = first_wait

    def invocation_name(self, invocation: int) -> str:
        """An invocation as messages name it: "invocation 2", with its kernel's name in a
        program of several kernels ("invocation 2 (kernel `b`)")."""
        kernel = self.kernel_of(invocation)
        return f"invocation {invocation}" if kernel is None else f"invocation {invocation} (kernel `{kernel}`)"

    def kernel_of(self, invocation: int) -> str | None:
        """The kernel a program runs as invocation `invocation` (from 1) of every thread; None
        where the protocol is one kernel."""
        kernels = self.protocol.kernels
        return kernels[(max(invocation, 1) - 1) % len(kernels)] if kernels else None

    def sem_as(self, sid: int, invocation: int) -> SemAsDeclared:
        """Semaphore instance `sid` as the kernel running invocation `invocation` declares
        it: in a program, a scratch semaphore carried into a later kernel
        (disable_semaphore_checks) goes by that kernel's own name there (`ir.SemAlias`), with
        that kernel's line and checks at exit; a kernel that does not use it leaves it as
        the last one before it that did."""
        import dataclasses

        inst = self.instances[sid]
        decl = inst.decl
        alias = self._sem_alias(decl, invocation)
        if alias is None:
            return SemAsDeclared(inst.label, decl, str(decl.loc))
        declared = str(decl.loc) if alias.loc is None else (
            f"{alias.loc} in kernel `{alias.kernel}`, which carries it over from {decl.loc}")
        return SemAsDeclared(
            inst.label_as(alias.name),
            dataclasses.replace(decl, name=alias.name, loc=alias.loc or decl.loc,
                                checked_at_exit=alias.checked_at_exit, kernel=alias.kernel),
            declared,
        )

    def _sem_alias(self, decl: ir.SemDecl, invocation: int) -> ir.SemAlias | None:
        """The name the kernel of invocation `invocation` gives `decl` where it is not the
        program's: that kernel's alias, else the alias of the kernel before it, back to the
        kernel that declares it (`decl.kernel`) or the first invocation."""
        kernels = self.protocol.kernels
        if not kernels or not self.protocol.aliases:
            return None
        for back in range(len(kernels)):
            kernel = self.kernel_of(max(invocation, 1) - back)
            alias = next((a for a in self.protocol.aliases if a.kernel == kernel and a.decl == decl.name), None)
            if alias is not None:
                return alias
            if kernel == decl.kernel or invocation - back <= 1:
                break
        return None

    def other_kernel_before(self, t: int, pc: int) -> str | None:
        """At thread t's kernel entry `pc`: the kernel of the invocation it follows, where
        that is another kernel of a program (None: the same kernel again, or the first)."""
        previous = self.invocation_at[t][pc]
        left, entered = self.kernel_of(previous), self.kernel_of(previous + 1)
        return None if previous < 1 or left is None or left == entered else left

    def ledger_slot(self, sid: int, invocation: int) -> int:
        """Where the barrier ledger counts the units `invocation` added to `sid`."""
        return sid * self.ledger_stride + invocation

    def ledger_entry(self, slot: int) -> tuple[int, int]:
        """(semaphore instance, invocation) of a ledger slot."""
        return divmod(slot, self.ledger_stride)

    def _validate(self, t: int, thread: ir.Thread) -> None:
        p = self.protocol
        if not (0 <= thread.device < p.devices and 0 <= thread.core < p.cores):
            raise ProtocolError(f"thread {thread.name} lies outside {p.devices}x{p.cores}")
        for instr in thread.body:
            for ref in instructions.sem_refs(instr):
                if ref.alloc not in self.allocs:
                    raise ProtocolError(f"undeclared semaphore {ref.alloc!r}", instr.loc)
            for region in instructions.regions(instr):
                if region.buffer not in self.buffer_allocs:
                    raise ProtocolError(f"undeclared buffer {region.buffer!r}", instr.loc)
            for name in instructions.registers_read(instr):
                if name not in self.registers[t] and name not in self.input_index:
                    raise ProtocolError(f"register {name!r} is read but never set", instr.loc)
            if isinstance(instr, (ir.Branch, ir.Jump)) and not (
                0 <= instr.target <= len(thread.body)
            ):
                raise ProtocolError(f"jump target {instr.target} out of range", instr.loc)

    def candidates(self, t: int, ref: ir.SemRef) -> frozenset[int]:
        """Every instance `ref` may resolve to (exact when it is constant)."""
        thread = self.threads[t]
        constant = isinstance(ref.index, int) and ir.is_constant(ref.device) and ir.is_constant(ref.core)
        if constant:
            key = (ref, thread.device, thread.core)
            known = self._resolved.get(key)
            if known is None:
                if len(self._resolved) >= _RESOLVED_KEPT:
                    self._resolved.clear()
                known = self._resolved[key] = self.resolve_all(thread, ref)
            return known
        return self.resolve_all(thread, ref)

    def resolve_all(self, thread: ir.Thread, ref: ir.SemRef) -> frozenset[int]:
        decl, base = self.allocs[ref.alloc]
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
            sid = self.instance_id(decl, base, device, core, index)
            if sid is not None:
                found.add(sid)
        return frozenset(found)

    def instance_id(self, decl, base, device, core, index) -> int | None:
        p = self.protocol
        if not (0 <= device < p.devices and 0 <= index < decl.size):
            return None
        if decl.scope is Scope.DEVICE:
            return base + device * decl.size + index
        if not (0 <= core < p.cores):
            return None
        return base + (device * p.cores + core) * decl.size + index

    def buffer_instance_id(self, decl, base, device, core) -> int | None:
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
        first = [self.buffer_allocs[decl.name][1] for decl in decls]
        self.cells = cells = MemoryCells(instance_decls, decls, first)
        for t, body in enumerate(self.bodies):
            for instr in body:
                for region, device, core in instructions.located_regions(instr):
                    if self.touches_nothing(region):
                        continue
                    key = self._static_key(region)
                    for bid in self.region_instances(t, region, device, core):
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
                    for bid in self.region_instances(t, instr.region, instr.device):
                        users.setdefault(bid, set()).add(t)
        return {bid: tuple(sorted(ts)) for bid, ts in users.items() if len(ts) > 1}

    def buffer_decl(self, name: str) -> ir.BufferDecl | None:
        entry = self.buffer_allocs.get(name)
        return entry[0] if entry is not None else None

    def _static_key(self, region: ir.Region) -> tuple | None:
        """(starts, sizes) of a region with constant starts and sizes, as `resolve_region`
        gives them."""
        if not all(isinstance(op, int) for op in region.start + region.size):
            return None
        decl, _base = self.buffer_allocs[region.buffer]
        rank = len(decl.shape)
        starts = tuple(region.start) + (0,) * (rank - len(region.start))
        sizes = tuple(region.size) + tuple(decl.shape[len(region.size):])
        return starts[:rank], sizes[:rank]

    def region_instances(self, t: int, region: ir.Region, device=None, core=None) -> list[int]:
        decl, base = self.buffer_allocs[region.buffer]
        thread = self.threads[t]
        devices = [thread.device if device is None else device] if ir.is_constant(device) else range(self.protocol.devices)
        cores = [thread.core if core is None else core] if ir.is_constant(core) else range(self.protocol.cores)
        found = []
        for d, c in itertools.product(devices, cores):
            bid = self.buffer_instance_id(decl, base, d, c)
            if bid is not None and bid not in found:
                found.append(bid)
        return found

    def touches_nothing(self, region: ir.Region) -> bool:
        """Whether a region is empty in every run: some size is the constant 0 (given, or a
        whole dim of extent 0). It shares no element with anything (`state.overlap`), so it
        can neither race nor order anything, and names no cell: as a cell, two empty
        windows at one row of a peer's buffer (a kernel that sends a row or copies it
        locally, the other side a 0-row copy) made every device's copies dependent."""
        decl, _base = self.buffer_allocs[region.buffer]
        sizes = tuple(region.size) + tuple(decl.shape[len(region.size):])
        return any(isinstance(size, int) and size == 0 for size in sizes)

    def cell_candidates(self, t: int, region: ir.Region, device=None, core=None) -> tuple[frozenset[int], frozenset[int]]:
        """(cells, near) of the memory a region may touch: its own cell when its starts are
        constant, else its buffer instances' "anywhere" cells."""
        if self.touches_nothing(region):
            return frozenset(), frozenset()
        key = self._static_key(region)
        own = set()
        for bid in self.region_instances(t, region, device, core):
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

    def lifecycle_candidates(self, t: int, device, core) -> frozenset[int]:
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
        """The instance id `ref` names for thread `t` in `state`, or a Fault."""
        decl, base = self.allocs[ref.alloc]
        thread = self.threads[t]
        device = thread.device if ref.device is None else self.eval(ref.device, t, state)
        core = thread.core if ref.core is None else self.eval(ref.core, t, state)
        index = self.eval(ref.index, t, state)
        p = self.protocol
        if not 0 <= device < p.devices:
            raise Fault(
                INVALID_DEVICE,
                f"device id {device} is outside the mesh of {p.devices} devices (0..{p.devices - 1})",
            )
        if decl.scope is Scope.CORE and not 0 <= core < p.cores:
            raise Fault(
                INVALID_CORE,
                f"core index {core} does not exist: each device has {p.cores} core(s)",
            )
        if not 0 <= index < decl.size:
            raise Fault(
                INVALID_SEM_INDEX,
                f"index {index} is outside semaphore array {decl.name} of size {decl.size}",
            )
        sid = self.instance_id(decl, base, device, core, index)
        assert sid is not None
        return sid

    def resolve_region(self, t: int, region: ir.Region, state: State, write: bool,
                       device: int | None = None, core: int | None = None) -> Access:
        """The concrete access a region names for thread t (on `device`/`core` for a copy's
        destination), as full-rank starts and sizes: dims without a start begin at 0, dims
        without a size span the whole extent. Start values may come from registers."""
        decl, base = self.buffer_allocs[region.buffer]
        thread = self.threads[t]
        bid = self.buffer_instance_id(
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
        docstring).

        A core whose thread faulted stays in the invocation it faulted in: it never enters
        another. So a fault changes nothing this check reads, and the faulting step commutes
        with every arrival at its core, as its footprint (which names no lifecycle cell)
        says; when a faulted core counted as having nothing to check against, the reduced
        search, taking the fault first, lost the early arrivals of the schedules in which
        they came before it (docs/search.md, "What `--exhaustive` keeps")."""
        cores = range(self.protocol.cores) if core is None else (core,)
        for c in cores:
            for q in self.core_threads.get((device, c), ()):
                if not self.has_lifecycle[q]:
                    continue
                pc = state.pcs[q]
                if pc == FAULTED:
                    pc = next(at for thread, at, _kind, _detail in state.faults if thread == q)
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
            and self.buffer_allocs[instr.dst.buffer][0].handed_on
            and self.allocs[instr.recv_sem.alloc][0].origin in ir.OUTLIVES_KERNEL
        )

    # -- a thread's place in a state, and its name --

    def current(self, state: State, t: int) -> ir.Instr | None:
        pc = state.pcs[t]
        body = self.bodies[t]
        return body[pc] if 0 <= pc < len(body) else None

    def finished(self, state: State, t: int) -> bool:
        return state.pcs[t] == len(self.bodies[t])

    def completion_amount(self, sid: int, nbytes: int) -> int:
        """What one completion of a copy of `nbytes` adds to semaphore instance `sid`."""
        return dma_increment(self.instances[sid].decl, nbytes)

    def inputs_read(self, t: int) -> frozenset[str]:
        """The protocol inputs thread `t`'s instructions read."""
        if not self.input_index:  # most protocols have none: skip walking every operand
            return frozenset()
        return frozenset(
            name for instr in self.bodies[t] for op in instructions.operands(instr)
            for name in ir.registers_of(op) if name in self.input_index
        )

    def thread_name(self, t: int) -> str:
        th = self.threads[t]
        return ir.thread_name(th.device, th.core, th.sub, self.protocol.cores, ir.core_unit(self.backend.value))

