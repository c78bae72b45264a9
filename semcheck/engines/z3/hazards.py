"""The hazards of an encoding (encoding.py), each a condition over its events under which a
transition of the semantics would record it: data races between an access and a copy in
flight (or two plain accesses enabled together), remote signals and copies that reach a
core outside the sender's invocation, and the leftovers a later kernel entry finds.

Each function takes the `Encoding` it adds to (`enc`); encoding.py imports this module, so
the type is not named here (an import cycle, tests/test_layers.py)."""

from __future__ import annotations

from typing import Callable

import z3

from semcheck import ir
from semcheck.engines.z3 import unroll as unrolling
from semcheck.engines.z3.events import Completion, NodeVars, change_of, named, overlap
from semcheck.engines.z3.terms import AND, EQ, NOT, OR, SymBool
from semcheck.ir import Backend
from semcheck.semantics.properties import Kind
from semcheck.semantics import RECV, SEND


def encode_races(enc, tick: Callable[[], None]) -> None:
    """data_race: an access executes while a pending copy access conflicts with it
    (`semantics.races.copy_races`), one condition per pair of source lines."""
    by_pc: list[dict[int, list[NodeVars]]] = []
    for row in enc.nodes:
        table: dict[int, list[NodeVars]] = {}
        for nv in row:
            if nv.node.kind == unrolling.INSTR:
                table.setdefault(nv.node.pc, []).append(nv)
        by_pc.append(table)
    for t, pc, ct, cpc in enc.racing_pairs:
        tick()
        key = (Kind.DATA_RACE, frozenset((enc.system.bodies[t][pc].loc, enc.system.bodies[ct][cpc].loc)))
        copy = enc.system.bodies[ct][cpc]
        assert isinstance(copy, ir.DmaStart)
        local = copy.send_sem is None
        for access_node in by_pc[t].get(pc, ()):
            for copy_node in by_pc[ct].get(cpc, ()):
                if copy_node is access_node:
                    continue
                src, dst = copy_node.accesses
                pending = [(RECV, [src, dst])] if local else [(RECV, [dst]), (SEND, [src])]
                for side, copy_accesses in pending:
                    if ordered_apart(enc, access_node, copy_node, copy_node.completions[side]):
                        continue
                    conflicts = OR(*(
                        overlap(mine, theirs)
                        for mine in access_node.accesses for theirs in copy_accesses
                        if mine.write or theirs.write
                    ))
                    if conflicts is False:
                        continue
                    enc.add_hazard(key, AND(
                        access_node.done, conflicts,
                        enc.in_flight(copy_node.completions[side], access_node.pos),
                    ))

    for t, pc, u, upc in enc.plain_pairs:
        tick()
        key = (Kind.DATA_RACE, frozenset((enc.system.bodies[t][pc].loc, enc.system.bodies[u][upc].loc)))
        for mine in by_pc[t].get(pc, ()):
            for theirs in by_pc[u].get(upc, ()):
                conflicts = OR(*(
                    overlap(x, y) for x in mine.accesses for y in theirs.accesses if x.write or y.write
                ))
                if conflicts is False:
                    continue
                both = AND(mine.done, theirs.done, conflicts)
                enc.add_hazard(key, AND(both, OR(
                    waiting_at(enc, theirs, mine), waiting_at(enc, mine, theirs)
                )))


def waiting_at(enc, nv: NodeVars, other: NodeVars) -> SymBool:
    """`nv`'s thread sits at `nv` when `other` executes: `other` runs first, and the
    step of `nv`'s thread that led to `nv` ran before `other` (`semantics.races.plain_races`
    checks exactly that two accesses are enabled together)."""
    row = enc.nodes[nv.t]
    arrived = OR(*(
        AND(row[p].taken[nv.node.key], enc.before(row[p].pos, other.pos)) for p in nv.node.preds
    )) if nv.node.preds else True
    return AND(enc.before(other.pos, nv.pos), arrived)


def ordered_apart(enc, access: NodeVars, copy: NodeVars, completion: "Completion") -> bool:
    """Whether the copy's `completion` is sure to happen before `access`, or the copy to
    start after it, in every execution (so they cannot race): the access or the copy
    lies behind a wait that only the other's completion can satisfy, or behind the
    other in its own thread. Proving this statically spares the race question the
    ordered solver on collectives that give each step its own semaphore."""
    if completion in enc.guards(access):
        return True
    if copy.t == access.t and enc.dominates(access, copy):
        return True
    if any(c in enc.guards(copy) for c in access.completions.values()):
        return True
    order = enc.precedence()
    return order.precedes(completion, access) or order.precedes(access, copy)


def entered(enc, q: int, invocation: int, at: z3.ArithRef, event: "NodeVars | Completion") -> SymBool:
    """Thread q executed its entry into `invocation` before position `at`, the position of
    `event`."""
    if invocation == 0:
        return True
    entering = enc.system.invocation_at[q]
    entries = [e for e in enc.entries if e.t == q and entering[e.node.pc] + 1 == invocation]
    if any(enc.precedence().precedes(e, event) for e in entries):
        return True  # whenever `event` happens (counting, see precedence.py)
    return OR(*(AND(e.done, enc.before(e.pos, at)) for e in entries))


def faulted_before(enc, q: int, at: z3.ArithRef) -> SymBool:
    return OR(*(
        AND(nv.fires, NOT(nv.valid), enc.before(nv.pos, at))
        for nv in enc.nodes[q] if nv.node.kind == unrolling.INSTR and nv.valid is not True
    ))


def arrival_problem(enc, device: int, core: int | None, invocation: int, at: z3.ArithRef,
                     event: "NodeVars | Completion", late_ok: bool = False) -> SymBool:
    """`System.arrival_problem` at position `at`: some thread of the target core is in
    another invocation (entries are never skipped or repeated, see `smt.unmodelled`, so
    the invocation a thread is in counts the entries it executed); with `late_ok`, only
    an earlier one."""
    system = enc.system
    cores = range(enc.protocol.cores) if core is None else (core,)
    problems = []
    for c in cores:
        for q in system.core_threads.get((device, c), ()):
            if not system.has_lifecycle[q]:
                continue
            not_yet = NOT(entered(enc, q, invocation, at, event))
            elsewhere = not_yet if late_ok else OR(not_yet, entered(enc, q, invocation + 1, at, event))
            problems.append(AND(NOT(faulted_before(enc, q, at)), elsewhere))
    return OR(*problems)


def encode_arrivals(enc) -> None:
    """remote_before_entry: a signal to another core's kernel-lifetime semaphore, or a
    copy landing on another core, while that core is not in the sender's invocation."""
    system = enc.system
    exempt = ir.OUTLIVES_KERNEL
    for t, row in enumerate(enc.nodes):
        if not system.has_lifecycle[t]:
            continue
        thread = system.threads[t]
        for nv in row:
            instr = nv.node.instr
            if nv.node.kind != unrolling.INSTR or instr is None:
                continue
            invocation = system.invocation_at[t][nv.node.pc]
            key = (Kind.REMOTE_BEFORE_ENTRY, instr.loc)
            if isinstance(instr, ir.Signal) and system.backend is Backend.TPU:
                for sid, cond in named(nv).candidates:
                    inst = system.instances[sid]
                    if inst.decl.origin in exempt or system.enters_with(thread, inst.device, inst.core):
                        continue
                    problem = arrival_problem(enc, inst.device, inst.core, invocation, nv.pos, nv)
                    enc.add_hazard(key, AND(nv.done, cond, problem))
            elif isinstance(instr, ir.DmaStart) and invocation:
                landing = nv.completions[RECV]
                for sid, cond in change_of(landing).candidates:
                    inst = system.instances[sid]
                    if system.enters_with(thread, inst.device, inst.core):
                        continue
                    problem = arrival_problem(enc, inst.device, inst.core, invocation, landing.pos, landing,
                                                    late_ok=system.lands_in_handed_on(t, nv.node.pc))
                    enc.add_hazard(key, AND(landing.done, cond, problem))


def encode_entry_leftovers(enc) -> None:
    """semaphore_leftover at a later entry: a reset semaphore holds a count, or a copy
    is still landing on it (`semantics.rules._exec_entry`)."""
    for entry in enc.entries:
        if enc.system.invocation_at[entry.t][entry.node.pc] < 1:
            continue
        for sid, count in (*entry.resets.items(), *entry.held.items()):
            inst = enc.system.instances[sid]
            landing = [
                AND(cond, enc.in_flight(c, entry.pos))
                for c in enc.completions for s, cond in change_of(c).candidates if s == sid
            ]
            left = OR(NOT(EQ(count, 0)), *landing)
            enc.add_hazard((Kind.SEMAPHORE_LEFTOVER, inst.decl.name, inst.index), AND(entry.done, left))
