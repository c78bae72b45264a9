"""The SMT encoding of a Protocol: executions as events with positions in one global order.

Every thread is unrolled into a DAG of instruction occurrences (`unroll.py`). Each occurrence
`n` gets a Boolean `fires(n)` (the thread executed it, or faulted on it) and an integer
position `pos(n)`; each DMA start gets one completion event per side, with its own `done`
Boolean and position. An assignment of these variables is an execution prefix (a *cut*),
and the constraints make it exactly a prefix the semantics can produce:

* control: the entry is reached; `fires(n)` needs `n` reached; a node is reached through an
  edge whose source executed without fault and whose branch condition (over registers and
  inputs, evaluated symbolically along the path) selects it;
* program order: along a taken edge, positions increase; a completion comes after its start;
* semaphores: the count of `s` just before an event `e` is the sum of the changes to `s`
  (signals, decrementing waits, DMA completions) of the executed events positioned before
  `e`; a wait executes only when that count reaches its value (competing waiters, being
  changes themselves, see each other in this sum); a `semaphore_read` yields that count;
* faults: an occurrence whose device, core or semaphore index is out of range (possibly for
  some input values only) faults instead of executing, and its thread stops;
* kernel entry: a change of minus the exact count just before it on each semaphore the
  entry allocates afresh, so counts after it start from 0. Which invocation a core is in
  at a position is the number of its entries positioned before it (`smt.unmodelled`
  refuses jumps that would make that wrong);
* hazards (`hazards`, by finding key): an access (load, store, a copy's source and
  destination) positioned after a copy's start and before the completion that ends the
  copy's conflicting access, over symbolic regions as `System.resolve_region` gives them;
  a remote signal or copy completion positioned where a thread of the target core has not
  executed the entry of the sender's invocation or has executed the next one; an entry
  after the first whose reset is non-zero or that a copy still lands on; a wait on a barrier
  semaphore that several invocations share whose count before it, less what later
  invocations added to it before it, is below its value (the early pass); a non-decrementing
  wait on a GPU mbarrier whose count just before it reaches its value plus one more
  phase's arrivals (barrier_phase_overrun: its parity-based wait cannot see its phase).
  Pairs a wait statically orders (its semaphore's only adder is the other's completion)
  are left out of the races.

Two events whose relative order matters (one reads a count the other changes) never share a
position, so sorting the executed events by position is an interleaving the semantics can
replay step by step.

The constraints come in two groups: `constraints` (control, registers, which events exist,
final counts) and `ordering` (positions, and what waits and reads see). Dropping `ordering`
relaxes the problem to counting; a question the relaxation answers "no" needs no ordering,
which is how a safe ring is proved by counting alone (see `engine.py`). Queries (`engine.py`) add what they look for: a fault, a terminal cut
(every thread finished or at a wait its final count cannot pass, no DMA in flight), a
non-zero semaphore at exit, or a path past the unrolling bound.
"""

from __future__ import annotations

import itertools
from typing import Callable

import z3

from semcheck import ir
from semcheck.engines.z3 import unroll as unrolling
from semcheck.engines.z3 import hazards
from semcheck.engines.z3.events import (
    Change, Completion, NodeVars, SymAccess, Target, named, negate, negative_part, position_of, position_var,
    positive_part, same, holds, int_value, change_of, event_of,
)
from semcheck.engines.z3.precedence import Precedence
from semcheck.engines.z3.terms import AND, EQ, GE, IMPLIES, ITE, LT, NOT, OR, SUM, SymBool, SymInt, apply, in_range, is_const, truth
from semcheck.semantics.properties import Kind
from semcheck.semantics import (
    INVALID_CORE, INVALID_DEVICE, INVALID_REGION, INVALID_SEM_INDEX, RECV, SEND, Action, Event, EventFires, State,
    System, bits, dma_increment, must_be_zero_at_exit,
)
from semcheck.ir import Scope

FAULT_KINDS = (INVALID_DEVICE, INVALID_CORE, INVALID_SEM_INDEX)

# Instructions whose execution touches a semaphore count (directly or through the DMA
# completions it schedules, or by resetting it at kernel entry); these, and accesses that
# may race, need a position of their own.
_TOUCHING = (ir.Signal, ir.Wait, ir.DmaWait, ir.Read, ir.DmaStart, ir.KernelEntry)


class Encoding:
    """Variables and constraints for every execution prefix of `system` in which no thread
    takes more than `bound` input- or read-dependent backward jumps (see unroll.py)."""

    def __init__(self, system: System, bound: int, tick: Callable[[], None] = lambda: None):
        """`tick()` is called now and then; it may raise to stop a long encoding."""
        self.system = system
        self.protocol = system.protocol
        self.bound = bound
        self._tick = tick
        self.constraints: list[SymBool] = []
        self.ordering: list[SymBool] = []
        self.inputs: list[SymInt] = [
            inp.lo if inp.lo == inp.hi else z3.Int(f"input_{inp.name}")
            for inp in self.protocol.inputs
        ]
        for inp, var in zip(self.protocol.inputs, self.inputs):
            if not is_const(var):
                self.constraints += [var >= inp.lo, var <= inp.hi]
        self.unrolled: list[unrolling.Unroller] = []
        self.nodes: list[list[NodeVars]] = []
        self.changes: dict[int, list[tuple[Change, SymBool]]] = {}
        self.readers: list[NodeVars] = []
        self.completions: list[Completion] = []
        self._distinct: set[tuple[int, int]] = set()
        self._final_counts: dict[int, SymInt] = {}
        self._terminal: SymBool | None = None
        self._other_sums: dict[tuple[int, int], tuple[SymInt, SymInt]] = {}
        self.racing_pairs = list(system.racing_pairs())
        self.plain_pairs = list(system.plain_racing_pairs())
        self._racing = {(t, pc) for t, pc, _, _ in self.racing_pairs + self.plain_pairs}
        self._racing |= {(t, pc) for _, _, t, pc in self.racing_pairs + self.plain_pairs}
        self.entries: list[NodeVars] = []
        for t in range(len(system.threads)):
            tick()
            self._encode_thread(t)
        self._order: Precedence | None = None
        self.hazards: dict[tuple, SymBool] = {}  # filled from here on: readers find phase overruns
        for i, reader in enumerate(self.readers):
            if i % 256 == 0:
                tick()
            self._encode_reader(reader)
        for entry in self.entries:
            tick()
            self._encode_reset(entry)
        self._dominators: dict[int, list[int]] = {}
        self._guard_cache: dict[int, set] = {}
        hazards.encode_races(self, tick)
        hazards.encode_arrivals(self)
        hazards.encode_entry_leftovers(self)
        self._encode_precedences()

    # -- sizes, for stats --

    @property
    def event_count(self) -> int:
        return sum(1 for row in self.nodes for nv in row if nv.node.kind == unrolling.INSTR) + len(
            self.completions
        )

    @property
    def has_overflow(self) -> bool:
        return any(u.overflow is not None for u in self.unrolled)

    # -- threads --

    def _encode_thread(self, t: int) -> None:
        unroller = unrolling.Unroller(self.system.bodies[t], self.bound)
        self.unrolled.append(unroller)
        row: list[NodeVars] = []
        self.nodes.append(row)
        registers = self.system.registers[t]
        while (node := unroller.next_node()) is not None:
            self._tick()  # an unrolled loop can have very many nodes (and registers to merge)
            nv = NodeVars(t, node)
            row.append(nv)
            if not node.preds:
                nv.reach = True
                regs_in: dict[str, SymInt] = {name: 0 for name in registers}
            else:
                nv.reach = OR(*(row[p].taken[node.key] for p in node.preds))
                regs_in = self._merge_registers(t, nv, [row[p] for p in node.preds])
            if node.kind != unrolling.INSTR:
                continue
            instr = node.instr
            assert instr is not None, "an instruction node carries its instruction"
            if isinstance(instr, ir.Cut):
                continue  # never fires (`fires` stays False): the thread stops there for good
            nv.fires = z3.Bool(f"fires_t{t}_n{node.index}")
            self.constraints.append(IMPLIES(nv.fires, nv.reach))
            self._position(row, nv)
            nv.regs_out = dict(regs_in)
            nv.regs_in = regs_in
            self._encode_instr(nv, instr, regs_in)
            for target, condition in unrolling.successors(node.pc, instr):
                guard, c = nv.done, True
                if condition != unrolling.ALWAYS:
                    c = truth(self.eval(instr.cond, t, regs_in))  # type: ignore[attr-defined]  # a branch: it has a cond
                    guard = AND(guard, c if condition == unrolling.IF_TRUE else NOT(c))
                if guard is False:
                    continue  # e.g. a loop counter that folds to a constant: no such path
                key = unroller.add_edge(node, target, symbolic=not is_const(c))
                nv.taken[key] = OR(nv.taken.get(key, False), guard)

    def _position(self, row: list[NodeVars], nv: NodeVars) -> None:
        """A fresh position for an event that touches a semaphore or joins paths; an
        occurrence that does neither shares its only predecessor's (ties within a thread are
        broken by program order when decoding)."""
        node = nv.node
        racing = (nv.t, node.pc) in self._racing
        if len(node.preds) == 1 and not isinstance(node.instr, _TOUCHING) and not racing:
            nv.pos = row[node.preds[0]].pos
            return
        nv.pos = position_var(f"pos_t{nv.t}_n{node.index}")
        for p in node.preds:
            before = row[p]
            self.ordering.append(IMPLIES(before.taken[node.key], before.pos < nv.pos))

    def _merge_registers(self, t: int, nv: NodeVars, preds: list[NodeVars]) -> dict[str, SymInt]:
        merged: dict[str, SymInt] = {}
        for name in self.system.registers[t]:
            self._tick()
            values = [p.regs_out[name] for p in preds]
            first = values[0]
            if all(same(v, first) for v in values[1:]):
                merged[name] = first
                continue
            var = z3.Int(f"reg_t{t}_n{nv.node.index}_{name}")
            for p, v in zip(preds, values):
                self.constraints.append(IMPLIES(p.taken[nv.node.key], var == v))
            merged[name] = var
        return merged

    # -- operands --

    def eval(self, op: ir.Operand, t: int, regs: dict[str, SymInt]) -> SymInt:
        if isinstance(op, int):
            return op
        if isinstance(op, ir.Reg):
            if op.name in regs:
                return regs[op.name]
            return self.inputs[self.system.input_index[op.name]]
        return apply(op.op, self.eval(op.a, t, regs), self.eval(op.b, t, regs))

    def resolve(self, t: int, ref: ir.SemRef, regs: dict[str, SymInt]) -> Target:
        """`System.resolve` lifted to symbolic operands: same checks, same order."""
        system, p = self.system, self.protocol
        decl, base = system.allocs[ref.alloc]
        thread = system.threads[t]
        device = thread.device if ref.device is None else self.eval(ref.device, t, regs)
        core = thread.core if ref.core is None else self.eval(ref.core, t, regs)
        index = self.eval(ref.index, t, regs)
        device_ok = in_range(device, 0, p.devices)
        core_ok = True if decl.scope is Scope.DEVICE else in_range(core, 0, p.cores)
        index_ok = in_range(index, 0, decl.size)
        faults = {
            INVALID_DEVICE: NOT(device_ok),
            INVALID_CORE: AND(device_ok, NOT(core_ok)),
            INVALID_SEM_INDEX: AND(device_ok, core_ok, NOT(index_ok)),
        }
        devices = [device] if is_const(device) else range(p.devices)
        cores = [None] if decl.scope is Scope.DEVICE else ([core] if is_const(core) else range(p.cores))
        indices = [index] if is_const(index) else range(decl.size)
        candidates = []
        for d, c, i in itertools.product(devices, cores, indices):
            sid = system.instance_id(decl, base, d, c, i)
            if sid is None:
                continue
            cond = AND(
                EQ(device, d),
                True if c is None else EQ(core, c),
                EQ(index, i),
            )
            if cond is not False:
                candidates.append((sid, cond))
        return Target(candidates, faults)

    # -- instructions: one small rule each --

    def _encode_instr(self, nv: NodeVars, instr: ir.Instr, regs: dict[str, SymInt]) -> None:
        rule = _RULES.get(type(instr))
        if rule is not None:
            rule(self, nv, instr, regs)

    def _signal(self, nv: NodeVars, instr: ir.Signal, regs) -> None:
        target = self._use_target(nv, self.resolve(nv.t, instr.sem, regs))
        self._add_change(Change(nv.t, nv.done, target.candidates, self.eval(instr.inc, nv.t, regs), nv.pos, nv))

    def _wait(self, nv: NodeVars, instr: ir.Wait, regs) -> None:
        target = self._use_target(nv, self.resolve(nv.t, instr.sem, regs))
        nv.need = self.eval(instr.value, nv.t, regs)
        self.readers.append(nv)
        if instr.decrement:
            self._add_change(Change(nv.t, nv.done, target.candidates, negate(nv.need), nv.pos, nv))

    def _dma_wait(self, nv: NodeVars, instr: ir.DmaWait, regs) -> None:
        target = self._use_target(nv, self.resolve(nv.t, instr.sem, regs))
        nv.need = self.eval(instr.nbytes, nv.t, regs)
        self.readers.append(nv)
        self._add_change(Change(nv.t, nv.done, target.candidates, negate(nv.need), nv.pos, nv))

    def _read(self, nv: NodeVars, instr: ir.Read, regs) -> None:
        self._use_target(nv, self.resolve(nv.t, instr.sem, regs))
        nv.read_value = z3.Int(f"read_t{nv.t}_n{nv.node.index}")
        nv.regs_out[instr.dst] = nv.read_value
        self.readers.append(nv)

    def _assign(self, nv: NodeVars, instr: ir.Assign, regs) -> None:
        nv.regs_out[instr.dst] = self.eval(instr.value, nv.t, regs)

    def _dma_start(self, nv: NodeVars, instr: ir.DmaStart, regs) -> None:
        recv_ref = ir.SemRef(instr.recv_sem.alloc, instr.recv_sem.index, instr.device, instr.core)
        recv = self.resolve(nv.t, recv_ref, regs)
        sides = [(RECV, recv)]
        faults = dict(recv.faults)
        if instr.send_sem is not None:  # checked only once the receive side resolved
            send = self.resolve(nv.t, instr.send_sem, regs)
            sides.append((SEND, send))
            faults = {k: OR(faults[k], AND(recv.valid, send.faults[k])) for k in FAULT_KINDS}
        places = None
        if instr.dst_device is not None:  # a peer's memory (`semantics.races.device_in_mesh`)
            places, inside = self._peer_places(nv.t, instr.dst, instr.dst_device, regs)
            faults[INVALID_DEVICE] = OR(faults[INVALID_DEVICE], AND(*(NOT(f) for f in faults.values()), NOT(inside)))
        src_places = None
        if instr.src_device is not None:  # read from a peer's memory (a GPU TMA load from a remote_ref)
            src_places, inside = self._peer_places(nv.t, instr.src, instr.src_device, regs)
            faults[INVALID_DEVICE] = OR(faults[INVALID_DEVICE], AND(*(NOT(f) for f in faults.values()), NOT(inside)))
        # Then the windows (`semantics.rules._check_window`), once both semaphores resolved.
        outside = OR(*(self._outside(nv.t, window, regs, instr.bounds_checked) for window in (instr.src, instr.dst)))
        faults[INVALID_REGION] = AND(*(NOT(f) for f in faults.values()), outside)
        nv.faults = faults
        nv.valid = AND(*(NOT(f) for f in faults.values()))
        nbytes = self.eval(instr.nbytes, nv.t, regs)
        # A copy of 0 bytes completes as it starts (`semantics.rules._complete_at_start`).
        empty = EQ(nbytes, 0)
        for side, target in sides:
            done = z3.Bool(f"dma_t{nv.t}_n{nv.node.index}_{side}")
            pos = position_var(f"pos_t{nv.t}_n{nv.node.index}_{side}")
            self.constraints.append(IMPLIES(done, nv.done))
            self.constraints.append(IMPLIES(AND(empty, nv.done), done))
            self.ordering.append(IMPLIES(AND(done, NOT(empty)), nv.pos < pos))
            self.ordering.append(IMPLIES(AND(done, empty), pos == nv.pos))
            completion = Completion(nv, side, done, pos, empty=empty)
            nv.completions[side] = completion
            counted_on = recv_ref if side == RECV else instr.send_sem
            assert counted_on is not None, "only a side with a semaphore is completed"
            decl = self.system.allocs[counted_on.alloc][0]
            delta = dma_increment(decl, nbytes)  # bytes on a DMA semaphore, else 1
            completion.change = Change(nv.t, done, target.candidates, delta, pos, nv, completion)
            self.completions.append(completion)
            self._add_change(completion.change)
        if (nv.t, nv.node.pc) in self._racing:
            thread = self.system.threads[nv.t]
            landing = places or []
            for sid, cond in recv.candidates if places is None else ():
                inst = self.system.instances[sid]
                core = inst.core if inst.core is not None else thread.core
                landing.append((self.buffer_instance(instr.dst, inst.device, core), cond))
            reading = src_places or [(self.buffer_instance(instr.src, thread.device, thread.core), True)]
            src = self.region(nv.t, instr.src, regs, False, reading)
            dst = self.region(nv.t, instr.dst, regs, True, landing)
            nv.accesses = [src, dst]

    def _access(self, nv: NodeVars, instr: ir.Load | ir.Store, regs) -> None:
        thread = self.system.threads[nv.t]
        if instr.device is None:
            places = [(self.buffer_instance(instr.region, thread.device, thread.core), True)]
        else:  # a peer's buffer (`semantics.races.access_device`): faults outside the mesh
            places, inside = self._peer_places(nv.t, instr.region, instr.device, regs)
            nv.faults, nv.valid = {INVALID_DEVICE: NOT(inside)}, inside
        if ir.window_checked(instr):  # then its window, and its view (`semantics.races.plain_access`)
            device_fault = nv.faults.get(INVALID_DEVICE, False)
            outside = self._outside(nv.t, instr.region, regs, True)
            if instr.view is not None:
                outside = OR(outside, self._outside_view(nv.t, instr.region, instr.view, regs))
            outside = AND(NOT(device_fault), outside)
            nv.faults = {**nv.faults, INVALID_REGION: outside}
            nv.valid = AND(*(NOT(f) for f in nv.faults.values()))
        if (nv.t, nv.node.pc) in self._racing:
            nv.accesses = [self.region(nv.t, instr.region, regs, isinstance(instr, ir.Store), places)]

    def _peer_places(self, t: int, region: ir.Region, device_op: ir.Operand, regs):
        """The instances of `region` on the device `device_op` names (the thread's own core
        there), each with the condition that it is the one, and whether the id is inside
        the mesh."""
        device = self.eval(device_op, t, regs)
        core = self.system.threads[t].core
        devices = [device] if is_const(device) else range(self.protocol.devices)
        places = [
            (self.buffer_instance(region, d, core), EQ(device, d))
            for d in devices if 0 <= d < self.protocol.devices
        ]
        return places, in_range(device, 0, self.protocol.devices)

    def _entry(self, nv: NodeVars, instr: ir.KernelEntry, regs) -> None:
        """A fresh allocation: each reset semaphore changes by minus its count just before
        (`_encode_reset`), so every count after the entry starts from 0."""
        for sid in bits(self.system.reset_on_entry(nv.t)):
            reset = z3.Int(f"reset_t{nv.t}_n{nv.node.index}_s{sid}")
            nv.resets[sid] = reset
            self._add_change(Change(nv.t, nv.done, [(sid, True)], reset, nv.pos, nv))
        for sid in self.system.entry_checks(nv.t):
            if sid not in nv.resets:  # kept: its count carries into the invocation
                nv.held[sid] = z3.Int(f"held_t{nv.t}_n{nv.node.index}_s{sid}")
        self.entries.append(nv)

    def buffer_instance(self, region: ir.Region, device: int, core: int | None) -> int:
        decl, base = self.system.buffer_allocs[region.buffer]
        bid = self.system.buffer_instance_id(decl, base, device, core)
        assert bid is not None  # the device and core were checked when the target resolved
        return bid

    def region(self, t: int, region: ir.Region, regs, write: bool, candidates) -> SymAccess:
        """`System.resolve_region` lifted to symbolic starts."""
        decl, _base = self.system.buffer_allocs[region.buffer]
        rank = len(decl.shape)
        starts = tuple(self.eval(op, t, regs) for op in region.start) + (0,) * (rank - len(region.start))
        sizes = tuple(self.eval(op, t, regs) for op in region.size) + tuple(decl.shape[len(region.size):])
        return SymAccess(write, candidates, starts[:rank], sizes[:rank])

    def _outside(self, t: int, region: ir.Region, regs, bounds_checked: bool) -> SymBool:
        """The window reaches outside its buffer in some dim (where nothing checks the
        windows, an empty one never does: `semantics.rules._check_window`)."""
        decl, _base = self.system.buffer_allocs[region.buffer]
        access = self.region(t, region, regs, False, [])
        outside = OR(*(
            OR(LT(start, 0), LT(extent, apply("add", start, size)))
            for start, size, extent in zip(access.starts, access.sizes, decl.shape)
        ))
        if bounds_checked:
            return outside
        return AND(outside, NOT(OR(*(EQ(size, 0) for size in access.sizes))))

    def _outside_view(self, t: int, region: ir.Region, view: ir.Region, regs) -> SymBool:
        """The window reaches outside the box of its `.at[...]` views in some dim
        (`semantics.races.inside_view`)."""
        access = self.region(t, region, regs, False, [])
        box = self.region(t, view, regs, False, [])
        return OR(*(
            OR(LT(start, lo), LT(apply("add", lo, extent), apply("add", start, size)))
            for start, size, lo, extent in zip(access.starts, access.sizes, box.starts, box.sizes)
        ))

    def _use_target(self, nv: NodeVars, target: Target) -> Target:
        nv.target = target
        nv.faults = target.faults
        nv.valid = target.valid
        return target

    def _add_change(self, change: Change) -> None:
        if is_const(change.delta) and change.delta == 0:
            return
        for sid, cond in change.candidates:
            self.changes.setdefault(sid, []).append((change, cond))

    # -- counts --

    def _encode_reader(self, w: NodeVars) -> None:
        """A wait executes only when the count before it reaches its need; a read yields it.

        Exactly (with positions, in `ordering`), and as bounds that need no positions (in
        `constraints`, implied by the exact form): the count before `w` is at most its own
        thread's earlier changes plus the positive part of every change whose order
        against `w` is open, and at least the same with the negative parts. So counting
        alone knows that a wait nothing could have fed did not pass."""
        waits, reads, lows, highs = [], [], [], []
        for sid, cond in named(w).candidates:
            exact, low, high = self.count_before(w, sid)
            if w.read_value is None:
                waits.append(AND(cond, GE(exact, w.need)))
                highs.append(AND(cond, GE(high, w.need)))
                self._encode_phase_overrun(w, sid, cond, exact, high)
                self._encode_early_pass(w, sid, cond, exact)
            else:
                reads.append(ITE(cond, exact, 0))
                lows.append(IMPLIES(cond, GE(w.read_value, low)))
                highs.append(IMPLIES(cond, GE(high, w.read_value)))
        if w.read_value is None:
            self.ordering.append(IMPLIES(w.done, OR(*waits)))
            self.constraints.append(IMPLIES(w.done, OR(*highs)))
        else:
            self.ordering.append(IMPLIES(w.done, w.read_value == SUM(reads)))
            self.constraints.append(IMPLIES(w.done, AND(*lows, *highs)))

    def _encode_phase_overrun(self, w: NodeVars, sid: int, cond: SymBool, exact: SymInt, high: SymInt) -> None:
        """barrier_phase_overrun (`semantics.rules._phase_overrun`): a non-decrementing wait on an
        mbarrier passes while the count before it already holds the next phase's arrivals
        too. `exact` decides; its positionless upper bound `high` is implied by it, and
        lets the counting relaxation rule out an overrun that no count allows."""
        instr = w.node.instr
        per_phase = self.system.instances[sid].decl.arrivals_per_phase
        if not per_phase or not isinstance(instr, ir.Wait) or instr.decrement:
            return
        assert w.need is not None, "a wait needs a count"
        overrun = apply("add", w.need, per_phase)
        self.add_hazard(
            (Kind.BARRIER_PHASE_OVERRUN, instr.loc), AND(w.done, cond, GE(exact, overrun), GE(high, overrun)),
        )

    def _encode_early_pass(self, w: NodeVars, sid: int, cond: SymBool, exact: SymInt) -> None:
        """remote_before_entry at a wait (`semantics.rules._early_pass`): on a barrier
        semaphore that keeps a ledger, the wait passes while the count before it, less what
        other threads added to it from invocations later than the wait's own before it (the
        ledger's later units), is below its value. A thread's own additions from a later
        invocation come after its wait in program order, so never before it."""
        if sid not in self.system.ledger_floor:
            return
        assert w.need is not None, "a wait needs a count"
        invocation_at = self.system.invocation_at
        mine = invocation_at[w.t][w.node.pc]
        later = [
            ITE(AND(change.done, c, LT(change.pos, w.pos)), change.delta, 0)
            for change, c in self.changes.get(sid, ())
            if change.thread != w.t and (change.completion is not None or isinstance(change.node.node.instr, ir.Signal))
            and invocation_at[change.node.t][change.node.node.pc] > mine
        ]
        if not later:
            return
        instr = w.node.instr
        assert instr is not None, "a wait is an instruction"
        self.add_hazard((Kind.REMOTE_BEFORE_ENTRY, instr.loc),
                        AND(w.done, cond, LT(apply("sub", exact, SUM(later)), w.need)))

    def count_before(self, w: NodeVars, sid: int) -> tuple[SymInt, SymInt, SymInt]:
        """The count of `sid` just before `w` (exact, with positions) and positionless
        lower and upper bounds of it. The bounds leave out the changes that counting proves
        come after `w` whenever they happen (precedence.py): a copy that lands only after
        the wait's own barrier cannot have fed it."""
        exact = []
        order = self.precedence()
        changes = self.changes.get(sid, ())
        later = {id(change) for change, _ in changes if order.precedes(w, event_of(change))}
        if any(change.thread != w.t and id(change) in later for change, _ in changes):
            others_low, others_high = self._sums_of(
                [(change, cond) for change, cond in changes if change.thread != w.t and id(change) not in later]
            )
        else:
            others_low, others_high = self._others(sid, w.t)  # other threads' changes: order open
        low, high = [others_low], [others_high]
        unrolled = self.unrolled[w.t]
        for change, cond in changes:
            if change.thread != w.t:
                exact.append(ITE(AND(change.done, cond, LT(change.pos, w.pos)), change.delta, 0))
                self._separate(w.pos, change.pos)
                continue
            if change.node is w and change.completion is None:
                continue  # a wait's own decrement
            if not unrolled.precedes(change.node.node, w.node):
                continue  # later in program order (or on another path): never before
            if change.completion is None:
                term = ITE(AND(change.done, cond), change.delta, 0)
                exact.append(term)
                low.append(term)
                high.append(term)
                continue
            exact.append(ITE(AND(change.done, cond, LT(change.pos, w.pos)), change.delta, 0))
            self._separate(w.pos, change.pos)
            if id(change) in later:
                continue
            low.append(ITE(AND(change.done, cond), negative_part(change.delta), 0))
            high.append(ITE(AND(change.done, cond), positive_part(change.delta), 0))
        return SUM(exact), SUM(low), SUM(high)

    @staticmethod
    def _sums_of(changes) -> tuple[SymInt, SymInt]:
        """(negative, positive) parts of `changes` that executed."""
        neg = [ITE(AND(change.done, cond), negative_part(change.delta), 0) for change, cond in changes]
        pos = [ITE(AND(change.done, cond), positive_part(change.delta), 0) for change, cond in changes]
        return SUM(neg), SUM(pos)

    def _others(self, sid: int, t: int) -> tuple[SymInt, SymInt]:
        """(negative, positive) parts of all changes to `sid` by threads other than t (DMA
        completions count for the thread that started them), as two shared variables."""
        key = (sid, t)
        if key not in self._other_sums:
            neg, pos = [], []
            for change, cond in self.changes.get(sid, ()):
                if change.thread != t:
                    neg.append(ITE(AND(change.done, cond), negative_part(change.delta), 0))
                    pos.append(ITE(AND(change.done, cond), positive_part(change.delta), 0))
            sums = []
            for name, terms in (("neg", neg), ("pos", pos)):
                total = SUM(terms)
                if not is_const(total):
                    var = z3.Int(f"{name}_s{sid}_not_t{t}")
                    self.constraints.append(var == total)
                    total = var
                sums.append(total)
            self._other_sums[key] = (sums[0], sums[1])
        return self._other_sums[key]

    def _separate(self, a: z3.ArithRef, b: z3.ArithRef) -> None:
        if a.eq(b):
            return
        key = (min(a.get_id(), b.get_id()), max(a.get_id(), b.get_id()))
        if key not in self._distinct:
            self._distinct.add(key)
            self.ordering.append(a != b)

    def _encode_reset(self, entry: NodeVars) -> None:
        """Exactly (with positions) minus the count just before the entry, and within the
        positionless bounds of that count for the relaxation."""
        for sid, reset in entry.resets.items():
            exact, low, high = self.count_before(entry, sid)
            self.ordering.append(IMPLIES(entry.done, reset == negate(exact)))
            self.constraints.append(IMPLIES(entry.done, AND(GE(reset, negate(high)), GE(negate(low), reset))))
            self.constraints.append(IMPLIES(NOT(entry.done), reset == 0))
        for sid, held in entry.held.items():
            exact, low, high = self.count_before(entry, sid)
            self.ordering.append(IMPLIES(entry.done, held == exact))
            self.constraints.append(IMPLIES(entry.done, AND(GE(held, low), GE(high, held))))
            self.constraints.append(IMPLIES(NOT(entry.done), held == 0))

    # -- hazards: what a transition records in the state (semantics `Hazard`) --

    def before(self, a: z3.ArithRef, b: z3.ArithRef) -> SymBool:
        """pos a < pos b, for two events whose order decides a hazard (never tied)."""
        self._separate(a, b)
        return LT(a, b)

    def in_flight(self, completion: "Completion", at: z3.ArithRef) -> SymBool:
        """The copy was started before position `at` and this side of it has not completed."""
        return AND(
            completion.start.done,
            self.before(completion.start.pos, at),
            NOT(AND(completion.done, self.before(completion.pos, at))),
        )

    def add_hazard(self, key: tuple, condition: SymBool) -> None:
        if condition is not False:
            self.hazards[key] = OR(self.hazards.get(key, False), condition)

    def _encode_precedences(self) -> None:
        """What counting proves about every execution (precedence.py), stated for both
        solvers: the counting relaxation learns that a wait passed only after the changes it
        needed executed, which its positionless bounds cannot see (they count a change
        that can only come later as if it could come first); the ordered one gets the
        positions of those changes without deriving them from the sums."""
        for earlier, wait in self.precedence().counted():
            self.constraints.append(IMPLIES(wait.done, earlier.done))
            self.ordering.append(IMPLIES(wait.done, earlier.pos < wait.pos))

    def precedence(self) -> Precedence:
        if self._order is None:
            self._order = Precedence(self, self._tick)
        return self._order

    def dominates(self, a: NodeVars, b: NodeVars) -> bool:
        """a lies on every path to b (same thread)."""
        table = self._dominators.get(a.t)
        if table is None:
            table = []
            for nv in self.nodes[a.t]:
                preds = nv.node.preds
                common = -1
                for p in preds:
                    common &= table[p]
                table.append((common if preds else 0) | 1 << nv.node.index)
            self._dominators[a.t] = table
        return bool(table[b.node.index] >> a.node.index & 1) and a is not b

    def guards(self, nv: NodeVars) -> set:
        """Completions that happen before `nv` in every execution that reaches it: each the
        only thing that can raise the count of a semaphore that a wait on every path to `nv`
        needs at least 1 of."""
        found = self._guard_cache.get(id(nv))
        if found is None:
            found = set()
            for w in self.nodes[nv.t]:
                if w.need is None or w.read_value is not None or not self.dominates(w, nv):
                    continue
                if not (is_const(w.need) and w.need >= 1 and len(named(w).candidates) == 1):
                    continue
                sid, cond = named(w).candidates[0]
                adder = self._sole_adder(sid) if cond is True else None
                if adder is not None:
                    found.add(adder)
            self._guard_cache[id(nv)] = found
        return found

    def _sole_adder(self, sid: int) -> "Completion | None":
        """The one copy completion that can raise `sid` above 0, if there is one: every other
        change is a decrementing wait for a constant (which leaves the count at least 0)
        or a kernel entry's reset (minus a count that is at least 0)."""
        adder = None
        for change, _cond in self.changes.get(sid, ()):
            instr = change.node.node.instr
            if change.completion is not None and is_const(change.delta) and change.delta > 0:
                if adder is not None:
                    return None
                adder = change.completion
            elif change.completion is None and isinstance(instr, ir.KernelEntry):
                continue
            elif (change.completion is None and isinstance(instr, (ir.Wait, ir.DmaWait))
                  and isinstance(change.node.need, int) and change.node.need >= 0):
                continue
            else:
                return None
        return adder

    def final_count(self, sid: int) -> SymInt:
        if sid not in self._final_counts:
            self._final_counts[sid] = SUM(
                [ITE(AND(change.done, cond), change.delta, 0) for change, cond in self.changes.get(sid, ())]
            )
        return self._final_counts[sid]

    # -- what queries ask for --

    def instr_nodes(self):
        for row in self.nodes:
            for nv in row:
                if nv.node.kind == unrolling.INSTR:
                    yield nv

    def no_faults(self) -> SymBool:
        return AND(*(IMPLIES(nv.fires, nv.valid) for nv in self.instr_nodes()))

    def fault_conditions(self) -> dict[tuple[str, int, int], SymBool]:
        """(kind, thread, pc) -> the condition that this fault happens in the cut."""
        out: dict[tuple[str, int, int], list[SymBool]] = {}
        for nv in self.instr_nodes():
            for kind, condition in nv.faults.items():
                happens = AND(nv.fires, condition)
                if happens is not False:
                    out.setdefault((kind, nv.t, nv.node.pc), []).append(happens)
        return {key: OR(*conds) for key, conds in out.items()}

    def terminal(self) -> SymBool:
        """Nothing can move, and nothing faulted: every DMA completed, every thread finished
        or at a wait its final count cannot pass."""
        if self._terminal is None:
            self._terminal = self._build_terminal()
        return self._terminal

    def _build_terminal(self) -> SymBool:
        parts = [self.no_faults()]
        parts += [IMPLIES(c.start.done, c.done) for c in self.completions]
        for row, unrolled in zip(self.nodes, self.unrolled):
            if unrolled.overflow is not None:
                parts.append(NOT(row[unrolled.overflow.index].reach))
            for nv in row:
                if nv.node.kind != unrolling.INSTR:
                    continue
                if nv.need is None:
                    parts.append(IMPLIES(nv.reach, nv.fires))
                else:
                    parts.append(IMPLIES(nv.final, self.blocked(nv)))
        return AND(*parts)

    def blocked(self, nv: NodeVars) -> SymBool:
        """The wait at `nv` cannot pass in the final state (and would not fault)."""
        return AND(
            nv.valid,
            OR(*(AND(cond, LT(self.final_count(sid), nv.need)) for sid, cond in named(nv).candidates)),
        )

    def some_thread_blocked(self) -> SymBool:
        return OR(*(nv.final for nv in self.instr_nodes() if nv.need is not None))

    def leftover_conditions(self) -> dict[tuple[str, int], SymBool]:
        """(allocation, index) -> some instance of it is non-zero at the end of the cut."""
        out: dict[tuple[str, int], list[SymBool]] = {}
        for sid, inst in enumerate(self.system.instances):
            if not must_be_zero_at_exit(self.system.backend, inst.decl):
                continue
            count = self.final_count(sid)
            if is_const(count) and count == 0:
                continue
            out.setdefault((inst.decl.name, inst.index), []).append(NOT(EQ(count, 0)))
        return {key: OR(*conds) for key, conds in out.items()}

    def overflow(self) -> SymBool:
        return OR(
            *(row[u.overflow.index].reach for row, u in zip(self.nodes, self.unrolled) if u.overflow)
        )

    def configuration_of(self, state: State) -> SymBool:
        """The condition 'every thread stops where it stops in `state`, and a blocked one
        waits on the same semaphore': what decides a terminal state's findings."""
        parts = []
        for t, row in enumerate(self.nodes):
            pc = state.pcs[t]
            blocked = self.system.blocked_wait(state, t)
            options = []
            for nv in row:
                if nv.node.pc != pc:
                    continue
                if nv.node.kind == unrolling.EXIT:
                    options.append(nv.reach)
                elif nv.node.kind == unrolling.INSTR:
                    same = True
                    if blocked is not None and nv.target is not None:
                        same = OR(*(c for sid, c in nv.target.candidates if sid == blocked[0]))
                    options.append(AND(nv.final, same))
            parts.append(OR(*options))
        return AND(*parts)

    # -- decoding --

    def decode(self, model: z3.ModelRef) -> tuple[tuple[int, ...], list[tuple[Action, int | None, int | None]]]:
        """Input values and the executed actions, each with its thread and pc (None for a
        DMA completion), in an order the semantics can replay."""
        inputs = tuple(int_value(model, v) for v in self.inputs)
        keyed: list[tuple[tuple, Action, int | None, int | None]] = []
        for t, row in enumerate(self.nodes):
            nv = row[0]
            while nv.node.kind == unrolling.INSTR and holds(model, nv.fires):
                keyed.append(((position_of(model, nv.pos), 0, t, nv.node.index), self.system.thread_steps[t], t, nv.node.pc))
                if not holds(model, nv.valid):
                    break
                key = next(k for k, guard in nv.taken.items() if holds(model, guard))
                nv = row[self.unrolled[t].by_key[key].index]
        for c in self.completions:
            if not holds(model, c.done) or holds(model, c.empty):
                continue  # not yet, or part of its start's step (semantics.rules._complete_at_start)
            sid = next(s for s, cond in change_of(c).candidates if holds(model, cond))
            event = Event(c.side, c.start.t, c.start.node.pc, sid, int_value(model, change_of(c).delta))
            keyed.append(((position_of(model, c.pos), 1, c.start.t, c.start.node.index), EventFires(event), None, None))
        keyed.sort(key=lambda item: item[0])
        return inputs, [(action, t, pc) for _, action, t, pc in keyed]


_RULES: dict[type, Callable[..., None]] = {
    ir.Load: Encoding._access,
    ir.Store: Encoding._access,
    ir.KernelEntry: Encoding._entry,
    ir.Signal: Encoding._signal,
    ir.Wait: Encoding._wait,
    ir.DmaWait: Encoding._dma_wait,
    ir.Read: Encoding._read,
    ir.Assign: Encoding._assign,
    ir.DmaStart: Encoding._dma_start,
}
