"""The transition rules, one small function per instruction kind, in registries keyed by the
IR class: what executing it does (`EXEC_RULES`), what it waits for (`WAIT_RULES`), and what it
may touch (`FOOTPRINT_RULES`, for the partial-order reduction); and a DMA completion's step.

The rules take the `System` as `system`; they are typed with `RaceTables`, the part of it
below them, so that this module need not import system.py, which dispatches to them."""

from __future__ import annotations

from bisect import insort
from typing import Callable

from semcheck import intervals, ir
from semcheck.ir import Backend
from semcheck.semantics.footprints import Footprint
from semcheck.semantics.races import (
    RaceTables, copy_races, device_in_mesh, extent, inside_buffer, plain_access, plain_races,
)
from semcheck.semantics.state import (
    BARRIER_PHASE_OVERRUN, INVALID_REGION, LEFTOVER_AT_EXIT, RECV, REMOTE_BEFORE_ENTRY, SEND, Access, Counts,
    Event, Fault, Hazard, State, dma_increment, distinct,
)

_NONE: frozenset[int] = frozenset()


def complete(system: RaceTables, state: State, event: Event) -> State:
    events = state.events
    k = events.index(event)  # the event is most often one of these very objects: found by identity
    events = events[:k] + events[k + 1:]
    sems = state.sems.add(event.sem, event.inc)
    ledger = _ledgered(system, state.ledger, event.sem, event.invocation, event.inc)
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
    # built whole: `_replace` costs three times as much, and a search completes millions of copies
    return State(state.pcs, state.regs, sems, events, state.faults, state.inputs, hazards, ledger)


def _advance(state: State, t: int, *, to: int | None = None, sems=None, regs=None, events=None,
             hazards=None, ledger=None) -> State:
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
        state.ledger if ledger is None else ledger,
    )


def _with(hazards: tuple[Hazard, ...], *new: Hazard) -> tuple[Hazard, ...]:
    fresh = [h for h in new if h not in hazards]
    return tuple(sorted(hazards + tuple(fresh))) if fresh else hazards


def _add(sems: Counts, sid: int, delta: int) -> Counts:
    return sems.add(sid, delta)


def _set_reg(system: RaceTables, state: State, t: int, name: str, value: int):
    regs = list(state.regs)
    row = list(regs[t])
    row[system.registers[t][name]] = value
    regs[t] = tuple(row)
    return tuple(regs)


# --- execution rules: one small function per instruction ----------------------------------------


def _exec_signal(system: RaceTables, t: int, instr: ir.Signal, state: State) -> State:
    sid = system.resolve(t, instr.sem, state)
    inc = system.eval(instr.inc, t, state)
    ledger = _ledgered(system, state.ledger, sid, system.invocation_at[t][state.pcs[t]], inc)
    return _advance(state, t, sems=_add(state.sems, sid, inc), hazards=_early_arrival(system, state, t, sid),
                    ledger=ledger)


def _ledgered(system: RaceTables, ledger: Counts, sid: int, invocation: int, delta: int) -> Counts:
    """The barrier ledger (`State.ledger`) after `invocation` added `delta` to `sid`: kept
    apart when `sid` keeps a ledger and the invocation is later than the first one that
    waits on it (no wait of that one or an earlier one may count it)."""
    floor = system.ledger_floor.get(sid)
    if floor is None or invocation <= floor:
        return ledger
    return ledger.add(system.ledger_slot(sid, invocation), delta)


def _early_pass(system: RaceTables, state: State, t: int, sid: int, need: int) -> tuple[Hazard, ...]:
    """A wait on a barrier semaphore that several invocations share, passing in invocation
    i on units that a later invocation added: a peer that moved on signalled it, and the
    units meant for invocation i have not all arrived (TPU; the barrier semaphore outlives
    the kernel, so nothing tells the two apart on the chip). A passing wait takes the units
    of invocations up to its own, oldest first (any of them will do for this wait and for
    the later waits of its core, which come in later invocations); the units of later
    invocations are left to those invocations' waits, even by a wait that passes early: it
    borrows from the units of its own invocation still to come, so the later invocation's
    wait is not reported again for the same units (one bug, one report). So the units a
    wait in invocation i may count are the count less the ledger's later units."""
    floor = system.ledger_floor.get(sid)
    have = state.sems[sid]
    if floor is None or have < need:
        return state.hazards
    pc = state.pcs[t]
    invocation = system.invocation_at[t][pc]
    later = {j: count for slot, count in state.ledger.nonzero()
             if (entry := system.ledger_entry(slot))[0] == sid and (j := entry[1]) > invocation and count}
    own = have - sum(later.values())
    if own >= need:
        return state.hazards
    return _with(state.hazards, Hazard(
        REMOTE_BEFORE_ENTRY, t, pc, -1, -1,
        f"passes in {system.invocation_name(invocation)} on {system.instances[sid].label}: it needs {need} and "
        f"the semaphore holds {have}, but {f'only {own}' if own > 0 else 'none'} of that was signalled for "
        f"this invocation or an earlier one; {'the rest' if own > 0 else 'all of it'} came from "
        f"{', '.join(map(system.invocation_name, sorted(later)))}, from a peer that has moved on",
        sid,
    ))


def _early_arrival(system: RaceTables, state: State, t: int, sid: int) -> tuple[Hazard, ...]:
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


def _exec_wait(system: RaceTables, t: int, instr: ir.Wait, state: State) -> State:
    sid = system.resolve(t, instr.sem, state)
    need = system.eval(instr.value, t, state)
    if not instr.decrement:
        state = state._replace(hazards=_phase_overrun(system, state, t, sid, instr))
        return _advance(state, t, hazards=_early_pass(system, state, t, sid, need))
    return _advance(state, t, sems=_add(state.sems, sid, -need), hazards=_early_pass(system, state, t, sid, need))


def _phase_overrun(system: RaceTables, state: State, t: int, sid: int, instr: ir.Wait) -> tuple[Hazard, ...]:
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


def _exec_dma_wait(system: RaceTables, t: int, instr: ir.DmaWait, state: State) -> State:
    sid = system.resolve(t, instr.sem, state)
    need = system.eval(instr.nbytes, t, state)
    return _advance(state, t, sems=_add(state.sems, sid, -need), hazards=_early_pass(system, state, t, sid, need))


def _exec_read(system: RaceTables, t: int, instr: ir.Read, state: State) -> State:
    sid = system.resolve(t, instr.sem, state)
    return _advance(state, t, regs=_set_reg(system, state, t, instr.dst, state.sems[sid]))


def _exec_assign(system: RaceTables, t: int, instr: ir.Assign, state: State) -> State:
    value = system.eval(instr.value, t, state)
    return _advance(state, t, regs=_set_reg(system, state, t, instr.dst, value))


def _exec_dma_start(system: RaceTables, t: int, instr: ir.DmaStart, state: State) -> State:
    target = ir.SemRef(instr.recv_sem.alloc, instr.recv_sem.index, instr.device, instr.core)
    recv = system.resolve(t, target, state)
    # As the z3 encoding orders them: both semaphores, then the peer, then the windows.
    send = system.resolve(t, instr.send_sem, state) if instr.send_sem is not None else None
    landing = system.instances[recv]
    nbytes = system.eval(instr.nbytes, t, state)
    pc = state.pcs[t]
    src_device = None if instr.src_device is None else device_in_mesh(system, system.eval(instr.src_device, t, state))
    src = system.resolve_region(t, instr.src, state, write=False, device=src_device)
    if instr.dst_device is None:
        dst = system.resolve_region(t, instr.dst, state, write=True, device=landing.device,
                                    core=landing.core if landing.core is not None else system.threads[t].core)
    else:
        dst = system.resolve_region(t, instr.dst, state, write=True,
                                    device=device_in_mesh(system, system.eval(instr.dst_device, t, state)))
    for side, access in (("source", src), ("destination", dst)):
        _check_window(system, side, access, instr.bounds_checked)
    invocation = system.invocation_at[t][pc] if system.has_lifecycle[t] else 0
    hazards = _with(state.hazards, *copy_races(system, state, t, [src, dst], copy=True))
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


def _complete_at_start(system: RaceTables, state: State, t: int, new: list[Event], hazards) -> State:
    """A copy of 0 bytes moves no data: both its sides complete as it starts (so a 0-byte
    wait finds it done, and one nobody waits for is never left in flight), touching no
    memory; what each completion adds to its semaphore and the landing's entry check are
    those of any completion."""
    state = _advance(state, t, hazards=hazards)
    for event in new:
        state = complete(system, state._replace(events=state.events + (event,)), event)
    return state


def _check_window(system: RaceTables, side: str, access: Access, bounds_checked: bool) -> None:
    """A copy window must lie inside its buffer: 0 <= start and start + size <= extent in
    every dim (JAX's TPU interpreter fails the copy otherwise:
    jax/_src/pallas/mosaic/interpret/utils.py, is_range_out_of_bounds_for_shape, 0.10.2).
    Where nothing checks the windows (`ir.DmaStart.bounds_checked`), an empty one touches no
    memory wherever it starts, so it is no fault."""
    shape = system.buffer_instances[access.buffer].decl.shape
    if inside_buffer(system, access):
        return
    if not bounds_checked and 0 in access.sizes:
        return
    raise Fault(
        INVALID_REGION,
        f"the copy's {side} window {extent(access)} lies outside "
        f"{system.buffer_instances[access.buffer].label} of shape {tuple(shape)}",
    )


def _exec_access(system: RaceTables, t: int, instr: ir.Load | ir.Store, state: State) -> State:
    access = plain_access(system, t, instr, state)
    found = copy_races(system, state, t, [access]) + plain_races(system, state, t, access)
    return _advance(state, t, hazards=_with(state.hazards, *found))


def _exec_entry(system: RaceTables, t: int, instr: ir.KernelEntry, state: State) -> State:
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
    previous = system.invocation_at[t][pc]
    if previous >= 1:  # not the first entry
        # named as the kernel entered calls it, whose check this is (a semaphore carried into
        # it from the kernel before has its name there)
        entered = previous + 1
        other = system.other_kernel_before(t, pc)
        by = "the previous invocation" if other is None else f"kernel `{other}`"
        found = [
            Hazard(LEFTOVER_AT_EXIT, t, pc, -1, -1,
                   f"{system.sem_as(sid, entered).label} holds {count} (left by {by})", sem=sid)
            for sid in checked if (count := state.sems[sid])
        ] + [
            Hazard(LEFTOVER_AT_EXIT, t, pc, e.issuer, e.start_pc,
                   f"a copy of {by} is still landing on {system.sem_as(e.sem, entered).label}",
                   sem=e.sem)
            for e in distinct(state.events) if e.sem in watched
        ]
    return _advance(state, t, sems=state.sems.zeroed(resetting), hazards=_with(state.hazards, *found))


def _exec_nothing(system: RaceTables, t: int, instr: ir.Instr, state: State) -> State:
    return _advance(state, t)


def _exec_branch(system: RaceTables, t: int, instr: ir.Branch, state: State) -> State:
    taken = system.eval(instr.cond, t, state) != 0
    return _advance(state, t, to=instr.target if taken else None)


def _exec_jump(system: RaceTables, t: int, instr: ir.Jump, state: State) -> State:
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


def _wait_need(system: RaceTables, t: int, instr: ir.Wait, state: State):
    return system.resolve(t, instr.sem, state), system.eval(instr.value, t, state)


def _dma_wait_need(system: RaceTables, t: int, instr: ir.DmaWait, state: State):
    return system.resolve(t, instr.sem, state), system.eval(instr.nbytes, t, state)


WAIT_RULES: dict[type, Callable[..., tuple[int, int]]] = {
    ir.Wait: _wait_need,
    ir.DmaWait: _dma_wait_need,
}


# --- static footprints: one small function per instruction that touches a semaphore ------------


# An amount that may be negative (over the inputs' ranges; registers are unbounded) turns an
# addition into a possible subtraction, which can disable a wait, and a decrement into a
# possible addition, which can enable one: such an action counts as both.
def _may_be_negative(system: RaceTables, t: int, amount: ir.Operand) -> bool:
    if isinstance(amount, int):
        return amount < 0
    inputs = system.protocol.inputs

    def reg_bounds(name: str):
        if name in system.registers[t] or name not in system.input_index:
            return intervals.UNBOUNDED
        inp = inputs[system.input_index[name]]
        return (inp.lo, inp.hi)

    return intervals.bounds(amount, reg_bounds)[0] < 0


def _fp_signal(system: RaceTables, t: int, instr: ir.Signal) -> Footprint:
    ref = instr.sem
    decl, _base = system.allocs[ref.alloc]
    checked = (
        system.backend is Backend.TPU and system.has_lifecycle[t]
        and decl.origin not in ir.OUTLIVES_KERNEL
    )
    remote = ref.device is not None or ref.core is not None
    life = system.lifecycle_candidates(t, ref.device, ref.core) if remote and checked else _NONE
    mask = system.candidates(t, ref)
    negative = mask if _may_be_negative(system, t, instr.inc) else _NONE
    return Footprint(inc=mask, dec=negative, mread=life, mnear=life)


def _fp_wait(system: RaceTables, t: int, instr: ir.Wait) -> Footprint:
    mask = system.candidates(t, instr.sem)
    ledgered = _ledgered_of(system, mask)
    if instr.decrement:
        return Footprint(dec=mask, inc=mask if _may_be_negative(system, t, instr.value) else _NONE, read=ledgered)
    # An mbarrier phase wait reads the count (_phase_overrun), so arrivals do not commute with it.
    phased = system.allocs[instr.sem.alloc][0].arrivals_per_phase
    return Footprint(wait=mask, read=(mask if phased else _NONE) | ledgered)


def _ledgered_of(system: RaceTables, mask: frozenset[int]) -> frozenset[int]:
    """Those of `mask` that keep a barrier ledger: a wait on one reads how its count splits
    (`_early_pass`), so an addition does not commute with the wait (the order decides
    whether the wait passes early)."""
    floor = system.ledger_floor
    return frozenset(sid for sid in mask if sid in floor) if floor else _NONE


def _fp_dma_wait(system: RaceTables, t: int, instr: ir.DmaWait) -> Footprint:
    mask = system.candidates(t, instr.sem)
    return Footprint(dec=mask, inc=mask if _may_be_negative(system, t, instr.nbytes) else _NONE,
                     read=_ledgered_of(system, mask))


def _fp_read(system: RaceTables, t: int, instr: ir.Read) -> Footprint:
    return Footprint(read=system.candidates(t, instr.sem))


def _fp_dma_start(system: RaceTables, t: int, instr: ir.DmaStart) -> Footprint:
    # The start itself touches no count; its completions will. Counting them here is what
    # lets the reduction see a thread's *future* additions through the copies it starts.
    target = ir.SemRef(instr.recv_sem.alloc, instr.recv_sem.index, instr.device, instr.core)
    mask = system.candidates(t, target)
    if instr.send_sem is not None:
        mask |= system.candidates(t, instr.send_sem)
    remote = instr.device is not None or instr.core is not None
    src, src_near = system.cell_candidates(t, instr.src, *instr.src_place())
    dst, dst_near = system.cell_candidates(t, instr.dst, *instr.dst_place())
    life = system.lifecycle_candidates(t, instr.device, instr.core) if remote else _NONE
    negative = mask if _may_be_negative(system, t, instr.nbytes) else _NONE
    return Footprint(inc=mask, dec=negative, mread=src | life, mwrite=dst, mnear=src_near | dst_near | life)


def _fp_load(system: RaceTables, t: int, instr: ir.Load) -> Footprint:
    cells, near = system.cell_candidates(t, instr.region, instr.device)
    return Footprint(mread=cells, mnear=near)


def _fp_store(system: RaceTables, t: int, instr: ir.Store) -> Footprint:
    cells, near = system.cell_candidates(t, instr.region, instr.device)
    return Footprint(mwrite=cells, mnear=near)


def _fp_entry(system: RaceTables, t: int, instr: ir.KernelEntry) -> Footprint:
    """Entry resets (and, when repeated, checks) the core's semaphores, and changes which
    invocation the core is in."""
    th = system.threads[t]
    own = frozenset(system.entry_resets(t))
    life = frozenset((system.lifecycle_cell(th.device, th.core),))
    return Footprint(dec=own, read=frozenset(system.entry_checks(t)), mwrite=life, mnear=life)


def event_footprint(system: RaceTables, event: Event, watched: bool = True) -> Footprint:
    """What a pending completion touches: its semaphore, the memory its copy still reads or
    writes (unless its line is no longer watched for races), and, for a copy of a kernel
    invocation landing on a peer, whether that peer is inside the invocation."""
    mread: set[int] = set()
    mwrite: set[int] = set()
    for access in event.accesses if watched else ():
        if 0 not in access.sizes:  # an empty window touches nothing (`Tables.touches_nothing`)
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

