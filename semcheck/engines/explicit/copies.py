"""The copy starts behind each resource, and the waits only one copy can open: what the
explicit search asks to find pending completions without listing them all.

* `copies_on(r)`: the copy starts whose completions may touch resource r (its semaphores,
  both regions and what overlaps them, the peer's lifecycle, and the lifecycle of where it
  lands, which its completion checks even for a local copy: `semantics.event_footprint`),
  as (start pcs, event prefixes to bisect for) per (side, issuer): a few starts one by
  one, many (a send semaphore every step's copy adds to) by their issuer's side;
* `written(r)`: whether some copy's completion may write cell resource r;
* `guard_stops(t, event)`: thread t's waits that only `event`'s completion can satisfy, and
  `guarded_threads(event)`: the threads that have such a wait.

A ring of N devices has N^2 copy starts and about 2N^2 resources: the index is two machine
arrays (`resource_index.ResourceIndex`), the entries are made when asked (a bounded number
kept), and "the only adder of a semaphore" is one array entry per semaphore instance.
"""

from __future__ import annotations

from array import array

from semcheck import ir
from semcheck.semantics.footprints import M_INC, M_MWRITE, ThreadTable, looping_pcs
from semcheck.semantics.resource_index import ResourceIndex
from semcheck.semantics import RECV, SEND, Event, System

_KEPT = 8_192
_NONE, _SEVERAL = -1, -2  # `_only`: no adder yet; more than one, or one that is not a copy started once

Entries = tuple[tuple[frozenset[int], tuple[tuple[int, ...], ...]], ...]


class CopyIndex:
    def __init__(self, system: System, tables: list[ThreadTable]):
        self.system = system
        self.tables = tables
        self._stride = stride = max((len(body) for body in system.bodies), default=0) + 1
        base = system.cell_base
        starts = array("q", [t * stride + pc for t, body in enumerate(system.bodies)
                             for pc, instr in enumerate(body) if type(instr) is ir.DmaStart])
        self._starts = starts

        def touched():
            for code in starts:
                t, pc = divmod(code, stride)
                instr = system.bodies[t][pc]
                assert isinstance(instr, ir.DmaStart), "starts holds the copies' pcs"
                resources = {r for r, _bits in system.footprints[t].entries(pc)}
                for sid in system.candidates(t, _target(instr)):
                    resources.add(base + system.lifecycle_cell(system.instances.device_of(sid),
                                                               system.instances.core_of(sid)))
                for r in sorted(resources):
                    yield r, code

        self._index = ResourceIndex(system.resource_count, touched)
        self._entries: dict[int, Entries] = {}
        self._shared: dict[tuple[int, int, frozenset[int]], tuple[frozenset[int], tuple[tuple[int, ...], ...]]] = {}
        self._written = self._destinations()
        self._only = self._only_adders()
        self._stops: dict[tuple[int, int, int, int], tuple[int, ...] | None] = {}
        self._guarded: dict[tuple[int, int, int], tuple[int, ...]] = {}

    def copies_on(self, r: int) -> Entries:
        found = self._entries.get(r)
        if found is None:
            codes = self._index.get(r)
            if not codes:
                return ()
            if len(self._entries) >= _KEPT:
                self._entries.clear()
                self._shared.clear()
            by_issuer: dict[int, set[int]] = {}
            for code in codes:
                t, pc = divmod(code, self._stride)
                by_issuer.setdefault(t, set()).add(pc)
            found = self._entries[r] = tuple(
                self._entry(side, t, pcs) for side in sorted((RECV, SEND)) for t, pcs in sorted(by_issuer.items())
            )
        return found

    def _entry(self, side: int, t: int, pcs: set[int]):
        """One object per (side, issuer, starts): most resources share theirs with others."""
        starts = frozenset(pcs)
        key = (side, t, starts)
        known = self._shared.get(key)
        if known is None:
            known = self._shared[key] = (starts, _prefixes(side, t, starts))
        return known

    def written(self, r: int) -> bool:
        return 0 <= r < len(self._written) and bool(self._written[r])

    def _destinations(self) -> bytearray:
        """Per resource, whether a copy's completion may write it (a cell of its
        destination). A destination known only at run time names its buffer's "anywhere"
        cell, and its completion then writes whichever cell the region turns out to be:
        every cell overlapping the anywhere cell counts."""
        system, base, stride = self.system, self.system.cell_base, self._stride
        written = bytearray(system.resource_count)
        for code in self._starts:
            t, pc = divmod(code, stride)
            for r, bits in system.footprints[t].entries(pc):
                if bits & M_MWRITE:
                    written[r] = 1
                    if system.cells.is_anywhere(r - base):
                        for c in system.near_of((r - base,)):
                            written[base + c] = 1
        return written

    # -- guards --

    def _only_adders(self) -> array:
        """Per semaphore instance, the one copy side that may add to it, when there is
        exactly one and its copy is started once (not in a loop): `(start code) * 2 + side`,
        else `_NONE` or `_SEVERAL`."""
        system, stride = self.system, self._stride
        only = array("q", [_NONE]) * system.cell_base

        def add(sid: int, code: int) -> None:
            only[sid] = code if only[sid] == _NONE else _SEVERAL

        for t, body in enumerate(system.bodies):
            looping = looping_pcs(body)
            fps = system.footprints[t]
            for pc, instr in enumerate(body):
                if isinstance(instr, ir.DmaStart):
                    sides = [(RECV, _target(instr))] + ([(SEND, instr.send_sem)] if instr.send_sem is not None else [])
                    for side, ref in sides:
                        for sid in system.candidates(t, ref):
                            add(sid, _SEVERAL if pc in looping else (t * stride + pc) * 2 + side)
                else:
                    for sid, bits in fps.entries(pc):
                        if bits & M_INC:
                            add(sid, _SEVERAL)
        return only

    def guard_stops(self, t: int, event: Event) -> tuple[int, ...] | None:
        """Sorted pcs of thread t's waits that only `event`'s completion can satisfy: a
        semaphore whose only possible adder is one side of one copy started once stays at 0
        until that completion, so a wait for at least 1 on it cannot pass before."""
        key = (event.issuer, event.start_pc, event.side, t)
        if key in self._stops:
            return self._stops[key]
        if len(self._stops) >= _KEPT:
            self._stops.clear()
        pcs = [pc for sid in self._only_added_by(event) for pc in self._blocking_waits(t, sid)]
        found = self._stops[key] = tuple(sorted(pcs)) if pcs else None
        return found

    def guarded_threads(self, event: Event) -> tuple[int, ...]:
        """The threads with a wait that only `event`'s completion can satisfy (those for
        which `guard_stops(t, event)` is not None), sorted."""
        key = (event.issuer, event.start_pc, event.side)
        found = self._guarded.get(key)
        if found is None:
            if len(self._guarded) >= _KEPT:
                self._guarded.clear()
            touchers = self.system.touchers
            found = self._guarded[key] = tuple(sorted({
                t for sid in self._only_added_by(event) for t in touchers.get(sid) if self._blocking_waits(t, sid)}))
        return found

    def _only_added_by(self, event: Event) -> list[int]:
        """The semaphores whose only possible adder is `event`'s side of its copy, started once."""
        system = self.system
        code = (event.issuer * self._stride + event.start_pc) * 2 + event.side
        instr = system.bodies[event.issuer][event.start_pc]
        assert isinstance(instr, ir.DmaStart)
        ref = _target(instr) if event.side == RECV else instr.send_sem
        if ref is None:
            return []
        return [sid for sid in system.candidates(event.issuer, ref) if self._only[sid] == code]

    def _blocking_waits(self, t: int, sid: int) -> list[int]:
        """The pcs of t's waits for at least 1 on exactly `sid`, both constants."""
        system = self.system
        body = system.bodies[t]
        return [pc for pc, _bits in self.tables[t].on(sid) if blocking_sem(system, t, body[pc]) == sid]


def _target(instr: ir.DmaStart) -> ir.SemRef:
    """The semaphore a copy's receive side adds to, where the copy lands."""
    return ir.SemRef(instr.recv_sem.alloc, instr.recv_sem.index, instr.device, instr.core)


def _prefixes(side: int, issuer: int, starts: set[int] | frozenset[int]) -> tuple[tuple[int, ...], ...]:
    """The event-tuple prefixes under which the completions of these copy starts sort."""
    if len(starts) <= 4:
        return tuple((side, issuer, pc) for pc in sorted(starts))
    return ((side, issuer),)


def blocking_sem(system: System, t: int, instr: ir.Instr) -> int | None:
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
    sids = system.candidates(t, ref)
    return next(iter(sids)) if len(sids) == 1 else None
