"""Races: the pairs of accesses that may race (computed once, from the footprints), and the
hazards a step records when its access conflicts with a copy still in flight or with another
thread's plain access that nothing orders before or after it."""

from __future__ import annotations

from abc import abstractmethod
from array import array
from bisect import bisect_left

from semcheck import ir
from semcheck.semantics import instructions
from semcheck.semantics.footprints import M_MNEAR, M_MREAD, M_MWRITE, looping_pcs, successors
from semcheck.semantics.resource_index import ResourceIndex
from semcheck.semantics.state import (
    DATA_RACE, INVALID_DEVICE, INVALID_REGION, PLAIN_RACE, RECV, SEND, Access, Event, Fault, Hazard, State, conflict, distinct,
    dma_increment,
)
from semcheck.semantics.tables import Tables


class RaceTables(Tables):
    """The racing pairs of a protocol's accesses, built on the first race check."""

    _exclude_ordered_pairs: bool = True
    # (t, pc) -> (side, issuer, start pc) of the completions its access may race with
    _race_copies: dict[tuple[int, int], tuple[tuple[int, int, int], ...]] | None = None
    _racing_pairs: list[tuple[int, int, int, int]] | None = None
    # pair of lines -> `needs_landing_out_of_order`, asked again for every sighting of a race
    _out_of_order: dict[frozenset, bool] | None = None

    @abstractmethod
    def static_wait(self, t: int, pc: int) -> tuple[int, int] | None:
        """(semaphore, amount) of the wait at (t, pc) when both are constants (`System`'s,
        which `ordering.CopyOrder` reads to exclude pairs that counting orders)."""

    def racing_pairs(self) -> list[tuple[int, int, int, int]]:
        """(t, pc, copy_t, copy_pc): each access (load, store or copy start) that may race
        with the copy started at (copy_t, copy_pc): one of the two writes a cell the other
        touches or overlaps, and neither program order nor counting puts every such
        completion of the copy before the access (`ordering.CopyOrder`). Copies are indexed
        by cell, so a collective with thousands of copies is not compared pair by pair.
        Computed once: the race checks, the reduction and the z3 encoding all ask."""
        if self._racing_pairs is None:
            from semcheck.semantics.ordering import CopyOrder

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
            return distinct(events)
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
        may touch overlapping memory, one of them a write (`plain_races` checks them). The
        accesses to a buffer are indexed by the cells they touch or overlap, so a kernel
        storing thousands of tiles into one output is not compared pair by pair (JAX's GPU
        all-reduce test, 2,048 stores a buffer: 4 M pairs, 14 CPU s, and none of them raced)."""
        seen = set()
        base = self.cell_base
        for bid, sharers in self.plain_sharers.items():
            sites = [
                (t, pc) for t in sharers for pc, instr in enumerate(self.bodies[t])
                if isinstance(instr, (ir.Load, ir.Store))
                and bid in self.region_instances(t, instr.region, instr.device)
            ]
            written: list[list[int]] = []  # per site, the cells it writes
            near: dict[int, list[int]] = {}  # cell -> the sites that touch or overlap it
            for k, (t, pc) in enumerate(sites):
                cells = []
                for r, bits in self.footprints[t].entries(pc):
                    if bits & M_MWRITE:
                        cells.append(r - base)
                    if bits & M_MNEAR:
                        near.setdefault(r - base, []).append(k)
                written.append(cells)
            overlapping = {(min(k, j), max(k, j)) for k, cells in enumerate(written)
                           for c in cells for j in near.get(c, ()) if j != k}
            for k, j in sorted(overlapping):  # the order of comparing every pair of sites
                (t, pc), (u, upc) = sites[k], sites[j]
                if t == u or (t, pc, u, upc) in seen or instructions.both_atomic(self.bodies[t][pc], self.bodies[u][upc]):
                    continue
                seen.add((t, pc, u, upc))
                yield t, pc, u, upc


def copy_races(system: RaceTables, state: State, t: int, accesses: list[Access], *,
               copy: bool = False) -> list[Hazard]:
    """Hazards for every pending copy access that conflicts with one of `accesses` (`copy`:
    they are a copy's, which thread t starts)."""
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
                    # Two writes to one buffer instance by copies that t started: one path
                    # (issuer to target), on which only the landing order decides.
                    same_path = copy and event.issuer == t and access.write and pending.write
                    found.append(Hazard(
                        DATA_RACE, t, pc, event.issuer, event.start_pc,
                        _race_detail(system, access, pending), same_path=same_path,
                        same_bytes=access.write and pending.write
                        and same_fill(system.bodies[t][pc], system.bodies[event.issuer][event.start_pc]),
                    ))
    return found


def needs_landing_out_of_order(system: RaceTables, t: int, pc: int, u: int, start: int) -> bool:
    """Whether the race of the access of thread t at `pc` with the copy thread u starts at
    `start` happens only if copies that u started to one device land out of issue order
    (tpu_facts.ISSUE_ORDER_READING). A finding is one pair of lines, so every pair of
    instructions at those two lines that `racing_pairs` says may race must need it: each
    access can meet only the copy's landing (not its source, which a copy's send side reads
    after it has landed), nothing but u's copies adds to the copy's receive semaphore, and
    before the access t takes more from it than u's copies before this one can add. In issue
    order what has landed of u's copies to the device is a run of them from the first, so
    the semaphore cannot have held that much before this copy landed; out of order a later
    copy of u's can fill it in this one's stead (two copies of one peer on one receive
    semaphore: the wait for the first taken by the second's bytes). Decided from the
    programs alone, where every amount is a constant, no copy of u's onto the semaphore up
    to this one can run more than once, t's program up to the access has no branch, and one
    kernel invocation runs; otherwise False (no reading claimed)."""
    bodies = system.bodies
    lines = frozenset((bodies[t][pc].loc, bodies[u][start].loc))
    if system._out_of_order is None:
        system._out_of_order = {}
    known = system._out_of_order.get(lines)
    if known is None:
        pairs = [p for p in system.racing_pairs()
                 if frozenset((bodies[p[0]][p[1]].loc, bodies[p[2]][p[3]].loc)) == lines]
        known = system._out_of_order[lines] = (t, pc, u, start) in pairs and all(
            (_meets_only_the_landing(system, *p) and _needs_landing_out_of_order(system, *p))
            or _never_in_flight(system, *p) for p in pairs)
    return known


def _never_in_flight(system: RaceTables, t: int, pc: int, u: int, start: int) -> bool:
    """Whether the copy at (u, start) is never in flight when the copy at (t, pc) starts, in
    any landing order: before `start`, u takes from the receive semaphore of t's copy more
    than t's copies before it can add, and only t's copies add to it, so one at `pc` or
    later has landed by then (the same count as `_needs_landing_out_of_order`, the roles
    swapped: a pair of starts `racing_pairs` keeps that no run reaches)."""
    return type(system.bodies[t][pc]) is ir.DmaStart and _needs_landing_out_of_order(system, u, start, t, pc)


def _meets_only_the_landing(system: RaceTables, t: int, pc: int, u: int, start: int) -> bool:
    """Whether the access at (t, pc) can conflict only with what the copy at (u, start) does
    until it lands: it writes none of the copy's source, unless the copy is a local one,
    whose landing ends its reading too."""
    copy = system.bodies[u][start]
    if type(copy) is not ir.DmaStart or copy.send_sem is None:
        return True
    base = system.cell_base
    source = system.near_of(frozenset(r - base for r, bits in system.footprints[u].entries(start) if bits & M_MREAD))
    return not any(bits & M_MWRITE and r - base in source for r, bits in system.footprints[t].entries(pc))


def _needs_landing_out_of_order(system: RaceTables, t: int, pc: int, u: int, start: int) -> bool:
    """`needs_landing_out_of_order` for one pair of instructions, its access meeting only the
    copy's landing."""
    copy = system.bodies[u][start]
    if type(copy) is not ir.DmaStart or system.most_invocations > 1:
        return False
    body = system.bodies[t]
    if any(successors(k, body[k]) != (k + 1,) for k in range(pc)):
        return False  # every instruction before the access runs, once
    landing = _landing(system, u, copy)
    if len(landing) != 1:
        return False
    [sem] = landing
    before = _added_before(system, sem, u, start)
    if before is None:
        return False
    taken = 0
    for instr in body[:pc]:
        amount = _taken(system, t, instr, sem)
        if amount is None:
            return False
        taken += amount
    return taken > before


def _landing(system: RaceTables, u: int, copy: ir.DmaStart) -> frozenset[int]:
    target = ir.SemRef(copy.recv_sem.alloc, copy.recv_sem.index, copy.device, copy.core)
    return system.candidates(u, target)


def _added_before(system: RaceTables, sem: int, u: int, start: int) -> int | None:
    """The most that u's copies before the one at `start` add to `sem`, where only copies of
    u land on it and those up to that one each run at most once, onto it alone, adding a
    constant (None otherwise)."""
    total = 0
    for t, body in enumerate(system.bodies):
        looping = looping_pcs(body)
        for k, instr in enumerate(body):
            if sem not in system.footprints[t][k].inc:
                continue
            if type(instr) is not ir.DmaStart or t != u or (
                    instr.send_sem is not None and sem in system.candidates(t, instr.send_sem)):
                return None  # a signal, another thread's copy, or a copy's send side
            if k > start:
                continue  # started after this copy: in issue order it lands after it too
            if k in looping or _landing(system, t, instr) != {sem} or not isinstance(instr.nbytes, int):
                return None
            if k < start:
                total += dma_increment(system.instances[sem].decl, instr.nbytes)
    return total


def _taken(system: RaceTables, t: int, instr: ir.Instr, sem: int) -> int | None:
    """What `instr` of thread t surely takes from `sem`: 0 when it cannot touch it, None when
    it may but by an amount or a semaphore not known from the program."""
    if isinstance(instr, ir.DmaWait):
        amount: ir.Operand = instr.nbytes
    elif isinstance(instr, ir.Wait) and instr.decrement:
        amount = instr.value
    else:
        return 0
    sems = system.candidates(t, instr.sem)
    if sem not in sems:
        return 0
    return amount if sems == {sem} and isinstance(amount, int) else None


def same_fill(one: ir.Instr | None, other: ir.Instr | None) -> bool:
    """Whether two writes store one and the same value in every element (`ir.Fill`), the
    same whatever the inputs: in either order they leave the same bytes."""
    mine, theirs = getattr(one, "fill", None), getattr(other, "fill", None)
    return mine is not None and mine == theirs


def _verb(access: Access) -> str:
    return "atomically updates" if access.atomic else "writes" if access.write else "reads"


def _race_detail(system: RaceTables, access: Access, pending: Access) -> str:
    where = system.buffer_instances[access.buffer].label
    verb = _verb(access)
    other = "writes" if pending.write else "reads"
    return (
        f"{verb} {where} {extent(access)} while a copy still in flight {other} "
        f"{extent(pending)} of it"
    )


def extent(access: Access) -> str:
    if not access.starts:
        return "(whole buffer)"
    return "[" + ", ".join(f"{s}:{s + z}" for s, z in zip(access.starts, access.sizes)) + "]"


def access_device(system: RaceTables, t: int, instr: ir.Load | ir.Store, state: State) -> int | None:
    """The device whose buffer a plain access touches (None: the thread's own), or a Fault
    for a device id outside the mesh."""
    if instr.device is None:
        return None
    return device_in_mesh(system, system.eval(instr.device, t, state))


def device_in_mesh(system: RaceTables, device: int) -> int:
    devices = system.protocol.devices
    if not 0 <= device < devices:
        raise Fault(INVALID_DEVICE, f"device id {device} is outside the mesh of {devices} devices (0..{devices - 1})")
    return device


def plain_races(system: RaceTables, state: State, t: int, access: Access) -> list[Hazard]:
    """Another thread sits at a load or store that conflicts with `access`: both are enabled
    in this state, so nothing orders them. Checked by whichever of the two runs first, so
    every schedule in which they are enabled together finds it."""
    found = []
    for u in system.plain_sharers.get(access.buffer, ()):
        other = system.current(state, u) if u != t else None
        if not isinstance(other, (ir.Load, ir.Store)):
            continue
        try:
            theirs = plain_access(system, u, other, state)
        except Fault:
            continue  # it faults when it runs, touching nothing
        if conflict(access, theirs):
            found.append(Hazard(PLAIN_RACE, t, state.pcs[t], u, state.pcs[u], _plain_race_detail(system, access, theirs),
                                same_bytes=access.write and theirs.write and same_fill(system.current(state, t), other)))
    return found


def plain_access(system: RaceTables, t: int, instr: ir.Load | ir.Store, state: State) -> Access:
    """The access a load or store of thread t makes (a Fault for a device outside the mesh,
    then for a checked access's window outside its buffer, or inside it but outside the
    `.at[...]` view it indexes: `ir.Load.checked`, `ir.Load.view`)."""
    device = access_device(system, t, instr, state)
    store = isinstance(instr, ir.Store)
    access = system.resolve_region(t, instr.region, state, write=store, device=device)
    if ir.window_checked(instr):
        instance = system.buffer_instances[access.buffer]
        what = f"the {'store' if store else 'load'}'s window {extent(access)}"
        if not inside_buffer(system, access):
            raise Fault(INVALID_REGION, f"{what} lies outside {instance.label} of shape {tuple(instance.decl.shape)}")
        if instr.view is not None:
            view = system.resolve_region(t, instr.view, state, write=store, device=device)
            if not inside_view(access, view):
                raise Fault(
                    INVALID_REGION,
                    f"{what} lies inside {instance.label} of shape {tuple(instance.decl.shape)} but outside "
                    f"its .at[...] view {extent(view)} of it",
                )
    return access._replace(atomic=True) if isinstance(instr, ir.Store) and instr.atomic else access


def inside_view(access: Access, view: Access) -> bool:
    """view start <= start and start + size <= view start + view size in every dim."""
    return all(v <= s and s + z <= v + n for s, z, v, n in zip(access.starts, access.sizes, view.starts, view.sizes))


def inside_buffer(system: RaceTables, access: Access) -> bool:
    """0 <= start and start + size <= extent in every dim of the access's buffer."""
    shape = system.buffer_instances[access.buffer].decl.shape
    return all(0 <= s and s + z <= n for s, z, n in zip(access.starts, access.sizes, shape))


def _plain_race_detail(system: RaceTables, access: Access, other: Access) -> str:
    where = system.buffer_instances[access.buffer].label
    verb = _verb(access)
    theirs = "atomically update" if other.atomic else "write" if other.write else "read"
    return f"{verb} {where} {extent(access)} while another thread may {theirs} {extent(other)} of it at the same time"

