"""The violation kinds (a fixed vocabulary shared by text, JSON and SARIF) and how each is
detected in a state of the transition system.

Every property semcheck checks is a property of single states: faults are permanent once
they happen, and stuck or leftover conditions are read off terminal states. That is what
lets the explicit engine's reduction (which preserves every terminal state) stay exact.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

import networkx as nx

from semcheck import ir
from semcheck.semantics import System, State, _Fault, _successors, must_be_zero_at_exit


class Kind(str, enum.Enum):
    DEADLOCK = "deadlock"
    UNSATISFIED_WAIT = "unsatisfied_wait"
    SEMAPHORE_LEFTOVER = "semaphore_leftover"
    INVALID_DEVICE_ID = "invalid_device_id"
    INVALID_CORE_INDEX = "invalid_core_index"
    INVALID_SEMAPHORE_INDEX = "invalid_semaphore_index"
    DATA_RACE = "data_race"
    REMOTE_BEFORE_ENTRY = "remote_before_entry"
    BARRIER_PHASE_OVERRUN = "barrier_phase_overrun"
    NOT_LOWERABLE = "not_lowerable"
    MESH_SMALLER_THAN_DEVICES = "mesh_smaller_than_devices"


SEVERITY = {kind: "error" for kind in Kind} | {
    Kind.NOT_LOWERABLE: "warning", Kind.MESH_SMALLER_THAN_DEVICES: "warning",
}

# One line per kind: SARIF rule descriptions and `semcheck --help` use these.
DESCRIPTIONS = {
    Kind.DEADLOCK: "A reachable state where no thread can move and the blocked waits form a cycle.",
    Kind.UNSATISFIED_WAIT: (
        "A reachable state where a thread is blocked on a wait that nothing left can satisfy, "
        "or polls in a loop that no schedule lets it leave."
    ),
    Kind.SEMAPHORE_LEFTOVER: "TPU: a scratch, scoped or barrier semaphore is non-zero when the kernel exits.",
    Kind.INVALID_DEVICE_ID: "A remote signal or DMA targets a device outside the mesh.",
    Kind.INVALID_CORE_INDEX: "A signal or DMA targets a core that does not exist.",
    Kind.INVALID_SEMAPHORE_INDEX: "A semaphore array is indexed outside its bounds.",
    Kind.DATA_RACE: "Two accesses to overlapping memory, one a write, that some execution leaves unordered.",
    Kind.REMOTE_BEFORE_ENTRY: "A remote signal or copy can reach a core before it entered the sender's kernel invocation, or after it moved on to a later one.",
    Kind.BARRIER_PHASE_OVERRUN: "GPU: an mbarrier completes two phases before a thread that waits on it has waited for the first.",
    Kind.NOT_LOWERABLE: "Legal to trace, but rejected by the backend's compiler (analyzed anyway).",
    Kind.MESH_SMALLER_THAN_DEVICES: (
        "The kernel's mesh has fewer devices than the check ran the script with (e.g. "
        "jax.devices()[:4] under --devices 8): the larger count was not checked."
    ),
}


# What a thread hits when an instruction names something that does not exist.
FAULT_KINDS = frozenset({Kind.INVALID_DEVICE_ID, Kind.INVALID_CORE_INDEX, Kind.INVALID_SEMAPHORE_INDEX})


@dataclass(frozen=True)
class Finding:
    """A violation seen in one state, before the engine attaches the trace that reaches it."""

    kind: Kind
    key: tuple  # findings with one key are one violation; the first (shortest) one is kept
    thread: int | None
    loc: ir.Loc | None
    message: str
    sem: int | None = None  # the semaphore instance concerned, if any
    blocked: tuple[dict, ...] = ()
    cycle: tuple[int, ...] = ()
    other: ir.Loc | None = None  # the second source line of a race
    other_start: tuple[int, int] | None = None  # (thread, pc) that started a race's copy in flight
    at_end: bool = False  # judged in a state where nothing can move (stuck, or a leftover at exit)
    loop_steps: int = 0  # a loop that spins for ever: how many of the trace's last steps repeat


# --- faults --------------------------------------------------------------------------------------


def fault_findings(system: System, state: State, already: tuple = ()) -> list[Finding]:
    """A finding for each fault in `state` that is not in `already` (the parent's faults)."""
    out = []
    for fault in state.faults:
        if fault in already:
            continue
        t, pc, kind, detail = fault
        instr = system.bodies[t][pc]
        out.append(
            Finding(
                Kind(kind),
                (kind, t, pc),
                t,
                instr.loc,
                f"{system.thread_name(t)}: {_describe_instr(instr)} at {instr.loc}: {detail}",
            )
        )
    return out


# --- hazards: seen by a transition, kept in the state ---------------------------------------------


def hazard_findings(system: System, state: State, already: tuple = ()) -> list[Finding]:
    """A finding for each hazard in `state` that is not in `already` (the parent's)."""
    out = []
    for hazard in state.hazards:
        if hazard in already:
            continue
        out.append(_HAZARD_RULES[hazard.kind](system, hazard))
    return out


def _race_finding(system: System, h) -> Finding:
    here = system.bodies[h.thread][h.pc]
    there = system.bodies[h.other_thread][h.other_pc]
    message = (
        f"data race: {system.thread_name(h.thread)} at {here.loc} ({_describe_instr(here)}) "
        f"{h.detail}; that copy was started by {system.thread_name(h.other_thread)} at "
        f"{there.loc}, and nothing orders the two (wait for the copy's semaphore first, or "
        f"give each in-flight copy its own semaphore or slot)"
    )
    key = (Kind.DATA_RACE, frozenset((here.loc, there.loc)))
    return Finding(Kind.DATA_RACE, key, h.thread, here.loc, message, other=there.loc,
                   other_start=(h.other_thread, h.other_pc))


def _early_arrival_finding(system: System, h) -> Finding:
    here = system.bodies[h.thread][h.pc]
    message = (
        f"remote before entry: {system.thread_name(h.thread)} at {here.loc} "
        f"({_describe_instr(here)}) {h.detail}; a remote write or signal must wait for a "
        f"handshake on the barrier semaphore (or the default device barrier) that shows the "
        f"peer has entered this invocation"
    )
    return Finding(Kind.REMOTE_BEFORE_ENTRY, (Kind.REMOTE_BEFORE_ENTRY, here.loc), h.thread, here.loc, message)


def _leftover_at_exit_finding(system: System, h) -> Finding:
    here = system.bodies[h.thread][h.pc]
    sid = h.other_pc
    inst = system.instances[sid]
    message = (
        f"semaphore leftover: when {system.thread_name(h.thread)} enters the kernel again at "
        f"{here.loc}, {h.detail}; on TPU every {inst.decl.origin.value} semaphore must be back "
        f"to 0 at exit (the runtime crashes otherwise). It is declared at {inst.decl.loc}."
    )
    key = (Kind.SEMAPHORE_LEFTOVER, inst.decl.name, inst.index)
    return Finding(Kind.SEMAPHORE_LEFTOVER, key, h.thread, None, message, sem=sid)


def _phase_overrun_finding(system: System, h) -> Finding:
    here = system.bodies[h.thread][h.pc]
    message = (
        f"barrier phase overrun: {system.thread_name(h.thread)} at {here.loc} {h.detail}; a "
        f"thread waits for an mbarrier phase by its parity, so once the next phase has also "
        f"completed the wait mistakes it for a later phase (it hangs until that one completes, "
        f"or passes with the wrong data). Every waiting thread must observe every completion: "
        f"make the arriving side wait until this thread is done with the phase (e.g. on a "
        f"'consumed' barrier) before it arrives again."
    )
    return Finding(Kind.BARRIER_PHASE_OVERRUN, (Kind.BARRIER_PHASE_OVERRUN, here.loc), h.thread, here.loc,
                   message, sem=h.other_pc)


_HAZARD_RULES = {
    "data_race": _race_finding,
    "remote_before_entry": _early_arrival_finding,
    "semaphore_leftover": _leftover_at_exit_finding,
    "barrier_phase_overrun": _phase_overrun_finding,
}


# --- terminal states -------------------------------------------------------------------------


# How a state in which nothing can move ended (`end_kind`).
CLEAN_END, STUCK_END, FAULT_END = "clean", "stuck", "fault"


def end_kind(system: System, state: State) -> str:
    """A state in which nothing can move: after a fault, with a wait blocked, or clean."""
    if state.faults:
        return FAULT_END
    if any(system.blocked_wait(state, t) is not None for t in range(len(system.threads))):
        return STUCK_END
    return CLEAN_END


def terminal_findings(system: System, state: State) -> list[Finding]:
    """Judge a state in which nothing can move."""
    if state.faults:
        return []  # what follows a fault is its consequence; the fault is the report
    blocked = []
    for t in range(len(system.threads)):
        wait = system.blocked_wait(state, t)
        if wait is not None:
            blocked.append((t, *wait))
    found = _stuck_findings(system, state, blocked) if blocked else _leftover_findings(system, state)
    return [replace(f, at_end=True) for f in found]


def _stuck_findings(system: System, state: State, blocked) -> list[Finding]:
    info = [_blocked_info(system, state, *b) for b in blocked]
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(blocked)))
    roots = []
    for i, (t, sid, _need, _have) in enumerate(blocked):
        providers = [
            j
            for j, (q, *_rest) in enumerate(blocked)
            if _may_add(system, state, q, sid, after_current=q == t)
        ]
        graph.add_edges_from((i, j) for j in providers)
        if not providers:
            roots.append(i)
    findings = []
    for component in nx.strongly_connected_components(graph):
        sub = graph.subgraph(component)
        if len(component) == 1 and not sub.number_of_edges():
            continue
        cycle = [edge[0] for edge in nx.find_cycle(sub)]
        findings.append(_deadlock_finding(system, info, cycle))
    by_line: dict[ir.Loc, list[int]] = {}
    for i in roots:  # one wait stuck on many devices is one violation
        by_line.setdefault(info[i]["location"], []).append(i)
    for group in by_line.values():
        findings.append(_unsatisfied_finding(info, group, graph))
    return findings


def _may_add(system: System, state: State, t: int, sid: int, *, after_current: bool) -> bool:
    """Whether thread t may still add to `sid`. A blocked wait cannot enable itself, so for
    its own thread only what follows it counts (a wait whose amount may be negative would
    otherwise count as adding to the very semaphore it waits on)."""
    if not after_current:
        return bool(system.future_footprint(state, t).inc >> sid & 1)
    pc, body = state.pcs[t], system.bodies[t]
    return any(
        system.futures[t][s].inc >> sid & 1 for s in _successors(pc, body[pc], len(body)) if s < len(body)
    )


def _blocked_info(system: System, state: State, t: int, sid: int, need: int, have: int) -> dict:
    thread = system.threads[t]
    instr = system.current(state, t)
    return {
        "thread": t,
        "device": thread.device,
        "core": thread.core,
        "sub": thread.sub,
        "name": system.thread_name(t),
        "semaphore": system.instances[sid].label,
        "short": system.instances[sid].short,  # as trace steps name it, e.g. "barrier@d3"
        "sem": sid,
        "needs": need,
        "has": have,
        "location": instr.loc,
        "what": _describe_instr(instr),
    }


def _wait_text(b: dict) -> str:
    return (
        f"{system_name(b)} waits at {b['location']} ({b['what']}) for {b['semaphore']} "
        f"to reach {b['needs']}; it holds {b['has']}"
    )


def system_name(b: dict) -> str:
    return b["name"]


def _deadlock_finding(system: System, info: list[dict], cycle: list[int]) -> Finding:
    first = min(cycle, key=lambda i: info[i]["thread"])
    start = cycle.index(first)
    cycle = cycle[start:] + cycle[:start]
    lines = [f"  {_wait_text(info[i])}," for i in cycle]
    names = [system_name(info[i]) for i in cycle] + [system_name(info[cycle[0]])]
    message = (
        f"deadlock: {' -> '.join(names)} wait for each other in a cycle; each wait can only "
        f"be satisfied by the next thread in the cycle, which is itself blocked:\n"
        + "\n".join(lines)
    )
    head = info[cycle[0]]
    key = (Kind.DEADLOCK, frozenset((info[i]["location"], info[i]["semaphore"]) for i in cycle))
    return Finding(
        Kind.DEADLOCK, key, head["thread"], head["location"], message,
        sem=head["sem"], blocked=tuple(info), cycle=tuple(cycle),
    )


def _unsatisfied_finding(info: list[dict], group: list[int], graph) -> Finding:
    b = info[group[0]]
    message = "unsatisfied wait: " + ";\n  ".join(_wait_text(info[i]) for i in group)
    message += ("; nothing left in the system can add to " + ("them" if len(group) > 1 else "it"))
    behind = sorted(set().union(*(nx.ancestors(graph, i) for i in group)) - set(group))
    if behind:
        message += ". Blocked behind:\n" + "\n".join(f"  {_wait_text(info[i])}" for i in behind)
    key = (Kind.UNSATISFIED_WAIT, b["location"])
    return Finding(
        Kind.UNSATISFIED_WAIT, key, b["thread"], b["location"], message,
        sem=b["sem"], blocked=tuple(info),
    )


def spin_finding(system: System, t: int, cycle: list[tuple[State, tuple]]) -> Finding | None:
    """Thread t turns on `cycle` (pairs of state and the action taken from it), a cycle of
    states from which no schedule ends: it loops for ever. Reported as an unsatisfied wait
    at its loop's semaphore_read (or, without one, at the backward jump): a polling loop is
    a wait that nothing left can satisfy."""
    body = system.bodies[t]
    moves = [(state, state.pcs[t]) for state, action in cycle if action == ("t", t)]
    jumps = [body[pc] for _, pc in moves if isinstance(body[pc], (ir.Branch, ir.Jump)) and body[pc].target <= pc]
    if not jumps:
        return None
    reads = []
    for state, pc in moves:
        instr = body[pc]
        if isinstance(instr, ir.Read):
            try:
                sid = system.resolve(t, instr.sem, state)
            except _Fault:  # an index that faults: this read says nothing useful
                continue
            reads.append((instr, system.instances[sid], state.sems[sid]))
    loc = reads[0][0].loc if reads else jumps[0].loc
    message = (
        f"unsatisfied wait: {system.thread_name(t)} loops for ever at {loc}: from the state "
        f"this trace reaches, no schedule lets it leave the loop (its last {len(cycle)} "
        f"step{'s' if len(cycle) != 1 else ''} repeat for ever)"
    )
    if reads:
        seen = ", ".join(dict.fromkeys(f"{inst.label} = {count}" for _, inst, count in reads))
        message += f"; each turn it reads {seen}, and nothing left in the system changes that"
    return Finding(Kind.UNSATISFIED_WAIT, (Kind.UNSATISFIED_WAIT, loc), t, loc, message)


def _leftover_findings(system: System, state: State) -> list[Finding]:
    out = []
    for sid, count in enumerate(state.sems):
        if not count:
            continue
        inst = system.instances[sid]
        if not must_be_zero_at_exit(system.backend, inst.decl):
            continue
        message = (
            f"semaphore leftover: {inst.label} holds {count} when the kernel exits (or it was "
            f"added to after the kernel exited); on TPU every {inst.decl.origin.value} semaphore "
            f"must be back to 0 at exit (the runtime crashes otherwise). It is declared at "
            f"{inst.decl.loc}."
        )
        owner = next(
            (
                t
                for t, th in enumerate(system.threads)
                if th.device == inst.device and (inst.core is None or th.core == inst.core)
            ),
            None,
        )
        key = (Kind.SEMAPHORE_LEFTOVER, inst.decl.name, inst.index)
        out.append(Finding(Kind.SEMAPHORE_LEFTOVER, key, owner, None, message, sem=sid))
    return out


# --- static checks -----------------------------------------------------------------------------


def static_findings(system: System) -> list[Finding]:
    """Warnings that need no exploration: constructs the backend's compiler rejects."""
    out: dict[tuple, Finding] = {}
    if system.backend is ir.Backend.TPU:
        for t, body in enumerate(system.bodies):
            for instr in body:
                if isinstance(instr, ir.Wait) and not instr.decrement:
                    key = (Kind.NOT_LOWERABLE, instr.loc)
                    out.setdefault(
                        key,
                        Finding(
                            Kind.NOT_LOWERABLE, key, t, instr.loc,
                            f"semaphore_wait(decrement=False) at {instr.loc} traces, but TPU "
                            "lowering rejects it ('Non-decrementing wait is not supported.'); "
                            "semcheck analyzes it as a non-decrementing wait (Mosaic GPU "
                            "semantics) so the rest of the protocol is still checked",
                        ),
                    )
    return list(out.values())


def _describe_instr(instr: ir.Instr) -> str:
    name = type(instr).__name__
    return {
        "Signal": "semaphore_signal",
        "Wait": "semaphore_wait" + ("" if getattr(instr, "decrement", True) else "(decrement=False)"),
        "DmaWait": f"dma_wait ({getattr(instr, 'side', '')} side)",
        "DmaStart": "dma_start",
        "Read": "semaphore_read",
    }.get(name, name)
