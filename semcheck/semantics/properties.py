"""How each violation kind (the vocabulary is in `kinds.py`) is detected in a state of the
transition system.

Every property semcheck checks is a property of single states: faults are permanent once
they happen, and stuck or leftover conditions are read off terminal states. That is what
lets the explicit engine's reduction (which preserves every terminal state) stay exact.
"""

from __future__ import annotations

from array import array
from dataclasses import replace
from typing import Any, Callable

from semcheck import ir, tpu_facts
from semcheck.tpu_facts import ISSUE_ORDER_READING
from semcheck.records import record
from semcheck.semantics.footprints import successors
from semcheck.kinds import DESCRIPTIONS, FAULT_KINDS, FIX_HINTS, SEVERITY, Kind  # noqa: F401 (re-exported)
from semcheck.result import BlockedWait, Reading
from semcheck.semantics.instances import SemInstance
from semcheck.semantics.races import needs_landing_out_of_order
from semcheck.semantics.state import Action, Fault, Hazard, State, ThreadStep, must_be_zero_at_exit
from semcheck.semantics.system import System


@record(frozen=True)
class Finding:
    """A violation seen in one state, before the engine attaches the trace that reaches it."""

    kind: Kind
    key: tuple  # findings with one key are one violation; the first (shortest) one is kept
    thread: int | None
    loc: ir.Loc | None
    message: str
    sem: int | None = None  # the semaphore instance concerned, if any
    blocked: tuple[BlockedWait, ...] = ()
    cycle: tuple[int, ...] = ()
    other: ir.Loc | None = None  # the second source line of a race
    # (thread, pc) that started the copy in flight a race is with, or a leftover's copy still landing
    other_start: tuple[int, int] | None = None
    pc: int | None = None  # a race: the pc of `thread`'s access (the other's is `other_start`)
    at_end: bool = False  # judged in a state where nothing can move (stuck, or a leftover at exit)
    loop_steps: int = 0  # a loop that spins for ever: how many of the trace's last steps repeat
    hint: str | None = None  # a fix more specific than the kind's (FIX_HINTS)
    rests_on: tuple[Reading, ...] = ()  # the disputed modelling readings it rests on


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
        if hazard in already or hazard == WENT_WRONG:
            continue
        out.append(_HAZARD_RULES[hazard.kind](system, hazard))
    return out


def _race_finding(system: System, h) -> Finding:
    here = system.bodies[h.thread][h.pc]
    there = system.bodies[h.other_thread][h.other_pc]
    tpu = system.backend is ir.Backend.TPU  # the basis is JAX's TPU interpreter
    out_of_order = tpu and (h.same_path or needs_landing_out_of_order(system, h.thread, h.pc, h.other_thread, h.other_pc))
    readings = (Reading(ISSUE_ORDER_READING, None),) if out_of_order else ()
    return _race_between(h, here, there, (
        f"data race: {system.thread_name(h.thread)} at {here.loc} ({_describe_instr(here)}) "
        f"{h.detail}; that copy was started by {system.thread_name(h.other_thread)} at "
        f"{there.loc}, and nothing orders the two (wait for the copy's semaphore first, or "
        f"give each in-flight copy its own semaphore or slot){_same_bytes_note(here, h)}"
    ), rests_on=readings)


PLAIN_RACE_HINT = (
    "order the two accesses (a barrier, or a signal and the other thread's wait, between "
    "them), or let each thread touch its own part of the buffer"
)
WRITE_BACK_RACE_HINT = (
    "give each core its own output blocks: let the output's index map follow the parallel "
    "grid dimensions, or mark the dimensions it does not follow \"arbitrary\""
)


def _plain_race_finding(system: System, h) -> Finding:
    here = system.bodies[h.thread][h.pc]
    there = system.bodies[h.other_thread][h.other_pc]
    region = getattr(here, "region", None)
    decl = system.buffer_decl(region.buffer) if region is not None else None
    hint = WRITE_BACK_RACE_HINT if decl is not None and decl.written_back else PLAIN_RACE_HINT
    return _race_between(h, here, there, (
        f"data race: {system.thread_name(h.thread)} at {here.loc} ({_describe_instr(here)}) "
        f"{h.detail}: {system.thread_name(h.other_thread)} at {there.loc} "
        f"({_describe_instr(there)}), and nothing orders the two (a signal and wait, or a "
        f"barrier arrive and wait, between the store and the other thread's access){_same_bytes_note(here, h)}"
    ), hint)


def _same_bytes_note(here: ir.Instr, h) -> str:
    """What a race of two writes of one fill (`Hazard.same_bytes`) adds to its message."""
    if not h.same_bytes:
        return ""
    fill = getattr(here, "fill", None)
    assert fill is not None
    return (f"; both writes store the same value ({fill.text} in every element, whatever the inputs), "
            f"so the race alone cannot change the result")


def _race_between(h, here: ir.Instr, there: ir.Instr, message: str, hint: str | None = None,
                  rests_on: tuple[Reading, ...] = ()) -> Finding:
    """One data race per pair of lines, whatever the two accesses are."""
    key = (Kind.DATA_RACE, frozenset((here.loc, there.loc)))
    return Finding(Kind.DATA_RACE, key, h.thread, here.loc, message, other=there.loc,
                   other_start=(h.other_thread, h.other_pc), pc=h.pc, hint=hint, rests_on=rests_on)


def _early_arrival_finding(system: System, h) -> Finding:
    here = system.bodies[h.thread][h.pc]
    if isinstance(here, (ir.Wait, ir.DmaWait)):
        return _early_pass_finding(system, h, here)
    message = (
        f"remote before entry: {system.thread_name(h.thread)} at {here.loc} "
        f"({_describe_instr(here)}) {h.detail}; a remote write or signal must wait for a "
        f"handshake on the barrier semaphore (or the default device barrier) that shows the "
        f"peer has entered this invocation"
    )
    readings: tuple[Reading, ...] = ()
    if h.sem >= 0:
        target = system.instances[h.sem]
        readings = tuple(Reading(rule, switch)
                         for rule, switch in system.arrival_readings(system.threads[h.thread], target))
    return Finding(Kind.REMOTE_BEFORE_ENTRY, (Kind.REMOTE_BEFORE_ENTRY, here.loc), h.thread, here.loc, message,
                   rests_on=readings)


# What an early pass on a shared barrier semaphore needs (`rules._early_pass`).
EARLY_PASS_HINT = (
    "give the kernels that share this barrier semaphore different collective_ids, or add a second "
    "barrier round, so that no device can signal it for its next invocation before every peer has "
    "passed its wait of this one (the double barrier of JAX's distributed Pallas guide)"
)


def _early_pass_finding(system: System, h, here: ir.Instr) -> Finding:
    """remote_before_entry at a barrier wait: it passed on a signal sent from a later
    invocation, so the peers it waits for may not have entered (or reached the wait's
    partner signal of) this one; whatever it lets go arrives early."""
    message = (
        f"remote before entry: {system.thread_name(h.thread)} at {here.loc} ({_describe_instr(here)}) "
        f"{h.detail}. The barrier semaphore outlives the kernel: every invocation with its "
        f"collective_id counts on it, so this wait cannot tell the signal meant for it from one "
        f"sent for a later invocation: what it lets go runs before the peers it waits for are "
        f"ready (it may reach a peer that has not entered this invocation, or read what a peer "
        f"has not yet sent), and a later wait takes the signal meant for this one"
    )
    return Finding(Kind.REMOTE_BEFORE_ENTRY, (Kind.REMOTE_BEFORE_ENTRY, here.loc), h.thread, here.loc, message,
                   sem=h.sem, hint=EARLY_PASS_HINT)


def _leftover_at_exit_finding(system: System, h) -> Finding:
    """A later entry found what the previous invocation left: a count (located by the
    engine at its last addition) or a copy still landing (located at the copy's start)."""
    if h.other_pc >= 0:
        return _landing_at_entry_finding(system, h)
    here = system.bodies[h.thread][h.pc]
    inst = system.instances[h.sem]
    message = (
        f"semaphore leftover: when {system.thread_name(h.thread)} {_enters(system, h)} at "
        f"{here.loc}, {h.detail}; "
        f"{_zero_at_exit_rule(system, h.sem, system.invocation_at[h.thread][h.pc])}"
    )
    return Finding(Kind.SEMAPHORE_LEFTOVER, _leftover_key(inst), h.thread, None, message, sem=h.sem)


def _landing_at_entry_finding(system: System, h) -> Finding:
    here = system.bodies[h.thread][h.pc]
    start = system.bodies[h.other_thread][h.other_pc]
    inst = system.instances[h.sem]
    message = (
        f"semaphore leftover: the copy {system.thread_name(h.other_thread)} started at {start.loc} "
        f"in {_left(system, h)} is still landing on "
        f"{system.sem_as(h.sem, system.invocation_at[h.thread][h.pc] + 1).label} when "
        f"{system.thread_name(h.thread)} {_enters(system, h)} at {here.loc}: nothing waited "
        f"for it to land; "
        f"{_zero_at_exit_rule(system, h.sem, system.invocation_at[h.thread][h.pc])}"
    )
    return Finding(Kind.SEMAPHORE_LEFTOVER, _leftover_key(inst), h.thread, start.loc, message, sem=h.sem,
                   other_start=(h.other_thread, h.other_pc))


def _enters(system: System, h) -> str:
    """How the entry of hazard `h` reads: the same kernel again, or the next of a program."""
    other = system.other_kernel_before(h.thread, h.pc)
    if other is None:
        return "enters the kernel again"
    return f"enters kernel `{system.kernel_of(system.invocation_at[h.thread][h.pc] + 1)}` after `{other}`"


def _left(system: System, h) -> str:
    """The invocation that the entry of hazard `h` follows, as a message names it."""
    other = system.other_kernel_before(h.thread, h.pc)
    return "the previous invocation" if other is None else f"kernel `{other}`"


def _zero_at_exit_rule(system: System, sid: int, invocation: int | None) -> str:
    """The rule, and what the chip does, for semaphore instance `sid` as the kernel of
    `invocation`, the one that exits holding it, declares it (a carried semaphore: that
    kernel's checks and line)."""
    inst = system.instances[sid]
    if invocation is None:
        decl, declared = inst.decl, str(inst.decl.loc)
    else:
        seen = system.sem_as(sid, invocation)
        decl, declared = seen.decl, seen.declared
    return (
        f"on TPU every {decl.origin.value} semaphore must be back to 0 at exit: "
        f"{leftover_consequence(decl)}. It is declared at {declared}."
    )


def _leftover_key(inst: SemInstance) -> tuple:
    """One leftover per semaphore declaration and index, however it was found."""
    return (Kind.SEMAPHORE_LEFTOVER, inst.decl.name, inst.index)


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
                   message, sem=h.sem)


_HAZARD_RULES = {
    "data_race": _race_finding,
    "plain_race": _plain_race_finding,
    "remote_before_entry": _early_arrival_finding,
    "semaphore_leftover": _leftover_at_exit_finding,
    "barrier_phase_overrun": _phase_overrun_finding,
}


# --- no cascades: a schedule that went wrong is not judged at its end -------------------------

# Hazards that change what happens next: an early signal is wiped by the peer's entry, an
# entry resets what the previous invocation left, a wait mistakes an overrun phase. A stuck
# state or leftover after one of them is its consequence, not another bug (as SPIN and TLC
# stop a schedule at its first error). Data races change no count, so they do not count.
CASCADING_KINDS = frozenset({"remote_before_entry", "semaphore_leftover", "barrier_phase_overrun"})

# What the explicit engine keeps of a state's hazards once it has reported them: this one
# mark, when one of them cascades (so states do not differ by which thread erred).
WENT_WRONG = Hazard("went_wrong", -1, -1, -1, -1, "a hazard that changes what happens next happened")


def went_wrong(state: State) -> bool:
    """Whether the schedule to `state` passed a hazard whose consequences are not reported."""
    return any(h.kind in CASCADING_KINDS or h == WENT_WRONG for h in state.hazards)


def hazards_to_keep(state: State) -> tuple:
    """A state's hazards once their findings are recorded (`explicit.explore`)."""
    return (WENT_WRONG,) if went_wrong(state) else ()


# --- terminal states -------------------------------------------------------------------------


# How a state in which nothing can move ended (`end_kind`).
CLEAN_END, STUCK_END, FAULT_END, CUT_END = "clean", "stuck", "fault", "cut"


def end_kind(system: System, state: State) -> str:
    """A state in which nothing can move: after a fault, at a thread's cut (where lowering
    stopped: not an end of the program), with a wait blocked, or clean."""
    if state.faults:
        return FAULT_END
    if system.at_cut(state):
        return CUT_END
    if any(system.blocked_wait(state, t) is not None for t in range(len(system.threads))):
        return STUCK_END
    return CLEAN_END


def _no_check() -> None:
    return None


def terminal_findings(system: System, state: State, check: Callable[[], object] = _no_check) -> list[Finding]:
    """Judge a state in which nothing can move. `check` is called at every step of the
    judgement's loops (each thread, blocked wait, non-zero semaphore, and each step through
    the graph of blocked waits); an engine passes its budget's check, which raises
    `BudgetExceeded`: at 30,000 blocked threads the judgement takes seconds and MBs, and a
    run's time and memory bounds hold through it as through the search."""
    if state.faults or went_wrong(state):
        return []  # what follows a fault (or a cascading hazard) is its consequence; that is the report
    if system.at_cut(state):
        return []  # a thread would go on past its cut, doing what semcheck could not lower
    blocked = []
    for t in range(len(system.threads)):
        check()
        wait = system.blocked_wait(state, t)
        if wait is not None:
            blocked.append((t, *wait))
    found = _stuck_findings(system, state, blocked, check) if blocked else _leftover_findings(system, state, check)
    return [replace(f, at_end=True) for f in found]


@record
class _WaitGraph:
    """Who could add to whom among the blocked waits: wait i's successors (the waits whose
    threads could add to its semaphore) are targets[first[i]:first[i + 1]], in the order
    they were found. Flat integer arrays: a networkx DiGraph of 30,000 blocked waits took
    25 MB, and its strongly connected components 8 MB more."""

    first: array
    targets: array
    _into: tuple[array, array] | None = None  # the reversed graph, built when first asked for

    def successors(self, i: int) -> array:
        return self.targets[self.first[i]:self.first[i + 1]]

    def __len__(self) -> int:
        return len(self.first) - 1

    def components(self, check: Callable[[], object]):
        """Its strongly connected components of more than one wait (Tarjan's algorithm,
        without recursion: a ring is one path as deep as it has devices), in the order
        Tarjan completes them, as networkx's strongly_connected_components does."""
        n = len(self)
        index = array("q", [-1]) * n
        low = array("q", [0]) * n
        on_stack = bytearray(n)
        stack: list[int] = []
        counter = 0
        for root in range(n):
            if index[root] >= 0:
                continue
            index[root] = low[root] = counter
            counter += 1
            stack.append(root)
            on_stack[root] = 1
            nodes, edges = [root], [self.first[root]]  # the DFS path, and where each is in its successors
            while nodes:
                check()
                v, e = nodes[-1], edges[-1]
                if e < self.first[v + 1]:
                    edges[-1] = e + 1
                    w = self.targets[e]
                    if index[w] < 0:
                        index[w] = low[w] = counter
                        counter += 1
                        stack.append(w)
                        on_stack[w] = 1
                        nodes.append(w)
                        edges.append(self.first[w])
                    elif on_stack[w]:
                        low[v] = min(low[v], index[w])
                    continue
                nodes.pop()
                edges.pop()
                if nodes:
                    low[nodes[-1]] = min(low[nodes[-1]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack[w] = 0
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        yield component

    def ancestors(self, nodes: list[int], check: Callable[[], object]) -> set[int]:
        """The waits with a path to one of `nodes`, but those."""
        if self._into is None:
            counts = array("q", [0]) * (len(self) + 1)
            for j in self.targets:
                counts[j + 1] += 1
            for i in range(len(self)):
                counts[i + 1] += counts[i]
            sources = array("q", [0]) * len(self.targets)
            filled = array("q", counts)
            for i in range(len(self)):
                for j in self.successors(i):
                    sources[filled[j]] = i
                    filled[j] += 1
            self._into = (counts, sources)
        first, sources = self._into
        seen = set(nodes)
        todo = list(nodes)
        while todo:
            check()
            j = todo.pop()
            for i in sources[first[j]:first[j + 1]]:
                if i not in seen:
                    seen.add(i)
                    todo.append(i)
        return seen - set(nodes)


def _stuck_findings(system: System, state: State, blocked, check: Callable[[], object]) -> list[Finding]:
    info = []
    for b in blocked:
        check()
        info.append(_blocked_info(system, state, *b))
    first, targets = array("q", [0]), array("q")
    roots = []
    at = array("q", [-1]) * len(system.threads)  # thread -> its blocked wait
    for j, (q, *_rest) in enumerate(blocked):
        at[q] = j
    for i, (_t, sid, _need, _have) in enumerate(blocked):
        check()
        # No edge to the wait itself: what its own thread would add after it cannot run
        # before it passes, so a wait only its own thread could satisfy is a root (an
        # unsatisfied wait), not a cycle of one thread. Only the threads that may touch the
        # semaphore are asked (`System.touchers`): asking every blocked thread about every
        # wait was blocked^2 (10^10 questions at 100,000 devices).
        before = len(targets)
        targets.extend(j for q in system.touchers.get(sid)
                       if (j := at[q]) >= 0 and j != i and system.may_add(q, state.pcs[q], sid))
        first.append(len(targets))
        if len(targets) == before:
            roots.append(i)
    graph = _WaitGraph(first, targets)
    findings = [_deadlock_finding(system, info, _cycle_within(graph, component))
                for component in graph.components(check)]
    by_line: dict[ir.Loc | None, list[int]] = {}
    for i in roots:  # one wait stuck on many devices is one violation
        by_line.setdefault(info[i].location, []).append(i)
    for group in by_line.values():
        own = [i for i in group if _adds_after_its_wait(system, state, *blocked[i][:2])]
        findings.append(_unsatisfied_finding(info, group, graph.ancestors(group, check), own))
    return findings


def _cycle_within(graph: _WaitGraph, component: list[int]) -> list[int]:
    """A cycle of `graph` through waits of the strongly connected `component`: each of them
    has a successor inside it, so following one from the least must come back to a wait
    already passed. (networkx's find_cycle on a subgraph view of the component took 87 MB
    at 30,000 blocked threads; this walk keeps one index per wait passed.)"""
    inside = bytearray(len(graph))
    for i in component:
        inside[i] = 1
    position: dict[int, int] = {}
    path: list[int] = []
    node = min(component)
    while node not in position:
        position[node] = len(path)
        path.append(node)
        node = next(j for j in graph.successors(node) if inside[j])
    return path[position[node]:]


def _adds_after_its_wait(system: System, state: State, t: int, sid: int) -> bool:
    """Whether thread t, blocked at a wait on `sid`, would add to it after that wait (a
    wait whose amount may be negative does not count as adding to the very semaphore it
    waits on)."""
    pc, body = state.pcs[t], system.bodies[t]
    return any(system.may_add(t, s, sid) for s in successors(pc, body[pc]) if s < len(body))


def _blocked_info(system: System, state: State, t: int, sid: int, need: int, have: int) -> BlockedWait:
    thread = system.threads[t]
    instr = system.current(state, t)
    assert instr is not None, "a blocked thread is at its wait"
    return BlockedWait(
        thread=t,
        device=thread.device,
        core=thread.core,
        sub=thread.sub,
        name=system.thread_name(t),
        semaphore=system.instances[sid].label,
        short=system.instances[sid].short,
        sem=sid,
        needs=need,
        has=have,
        location=instr.loc,
        what=_describe_instr(instr),
        shown=system.instances[sid].shown_to(thread.device, thread.core) if system.instances[sid].decl.shown_as else "",
    )


def _wait_text(b: BlockedWait) -> str:
    return (
        f"{b.name} waits at {b.location} ({b.what}) for {b.semaphore} "
        f"to reach {b.needs}; it holds {b.has}"
    )


def _deadlock_finding(system: System, info: list[BlockedWait], cycle: list[int]) -> Finding:
    first = min(cycle, key=lambda i: info[i].thread)
    start = cycle.index(first)
    cycle = cycle[start:] + cycle[:start]
    message = (
        f"deadlock: {' -> '.join(_cycle_names(info, cycle))} wait for each other in a cycle; each wait can only "
        f"be satisfied by the next thread in the cycle, which is itself blocked:\n"
        + "\n".join(_cycle_lines(info, cycle))
    )
    head = info[cycle[0]]
    key = (Kind.DEADLOCK, frozenset((info[i].location, info[i].semaphore) for i in cycle))
    return Finding(
        Kind.DEADLOCK, key, head.thread, head.location, message,
        sem=head.sem, blocked=tuple(info), cycle=tuple(cycle),
    )


# A cycle longer than this is shown by its first and last threads in full and the rest by
# line (a ring of 256 devices is a screen, not 256 lines); the JSON's `cycle` and
# `blocked` keep every thread.
_CYCLE_SHOWN = 8
_CYCLE_HEAD, _CYCLE_TAIL = 3, 2


def _cycle_names(info: list[BlockedWait], cycle: list[int]) -> list[str]:
    names = [info[i].name for i in cycle]
    if len(cycle) > _CYCLE_SHOWN:
        hidden = len(cycle) - _CYCLE_HEAD - _CYCLE_TAIL
        names = names[:_CYCLE_HEAD] + [f"({hidden} more)"] + names[-_CYCLE_TAIL:]
    return names + [info[cycle[0]].name]


def _cycle_lines(info: list[BlockedWait], cycle: list[int]) -> list[str]:
    if len(cycle) <= _CYCLE_SHOWN:
        return [f"  {_wait_text(info[i])}," for i in cycle]
    head, middle, tail = cycle[:_CYCLE_HEAD], cycle[_CYCLE_HEAD:-_CYCLE_TAIL], cycle[-_CYCLE_TAIL:]
    by_line: dict = {}
    for i in middle:
        by_line.setdefault((info[i].location, info[i].what), []).append(info[i])
    between = [f"  {len(same)} more between them, from {same[0].name} to {same[-1].name}, each waiting at "
               f"{location} ({what}) for a semaphore the next thread in the cycle would add to,"
               for (location, what), same in by_line.items()]
    return [f"  {_wait_text(info[i])}," for i in head] + between + [f"  {_wait_text(info[i])}," for i in tail]


def _unsatisfied_finding(info: list[BlockedWait], group: list[int], behind_waits: set[int], own: list[int]) -> Finding:
    """`behind_waits`: the blocked waits that wait, directly or not, on those of `group`;
    `own`: the waits of `group` that only their own thread's later instructions could satisfy."""
    b = info[group[0]]
    message = "unsatisfied wait: " + ";\n  ".join(_wait_text(info[i]) for i in group)
    message += ("; nothing left in the system can add to " + ("them" if len(group) > 1 else "it"))
    if own:
        message += _own_later_addition_text([info[i] for i in own], whole_group=len(own) == len(group))
    behind = sorted(behind_waits)
    if behind:
        message += ". Blocked behind:\n" + "\n".join(_behind_lines([info[i] for i in behind]))
    key = (Kind.UNSATISFIED_WAIT, b.location)
    return Finding(
        Kind.UNSATISFIED_WAIT, key, b.thread, b.location, message,
        sem=b.sem, blocked=tuple(info),
    )


def _own_later_addition_text(waits: list[BlockedWait], *, whole_group: bool) -> str:
    """Why a wait its own thread adds to later is not satisfied by it: that thread is the
    one waiting, so what follows the wait never runs."""
    if whole_group:
        who = f"{waits[0].name} itself, after this wait" if len(waits) == 1 else "each waiting thread itself, after its wait"
        return f" but {who}, which it never gets past"
    names = ", ".join(b.name for b in waits[:4]) + (f" and {len(waits) - 4} more" if len(waits) > 4 else "")
    one = len(waits) == 1
    return (f"; {names} would add to {'its' if one else 'their'} own only after "
            f"{'its' if one else 'their'} wait, which {'it never gets' if one else 'none gets'} past")


def _behind_lines(waits: list[BlockedWait]) -> list[str]:
    """One line per stuck line of source: the first wait in full, then how many more threads
    wait there (a ring of 8 devices stuck at one line is one line, not 7)."""
    by_line: dict = {}
    for b in waits:
        by_line.setdefault((b.location, b.what), []).append(b)
    out = []
    for same in by_line.values():
        out.append(f"  {_wait_text(same[0])}")
        if len(same) > 1:
            names = ", ".join(b.name for b in same[1:4]) + (f" and {len(same) - 4} more" if len(same) > 4 else "")
            out.append(f"  and {len(same) - 1} more at the same line: {names}")
    return out


def spin_finding(system: System, t: int, cycle: list[tuple[State, Action]]) -> Finding | None:
    """Thread t turns on `cycle` (pairs of state and the action taken from it), a cycle of
    states from which no schedule ends: it loops for ever. Reported as an unsatisfied wait
    at its loop's semaphore_read (or, without one, at the backward jump): a polling loop is
    a wait that nothing left can satisfy."""
    if cycle and system.at_cut(cycle[0][0]):
        return None  # the thread it waits for may be the one stopped at its cut
    body = system.bodies[t]
    moves = [(state, state.pcs[t]) for state, action in cycle if action == ThreadStep(t)]
    jumps = [jump for _, pc in moves if isinstance(jump := body[pc], (ir.Branch, ir.Jump)) and jump.target <= pc]
    if not jumps:
        return None
    reads = []
    for state, pc in moves:
        instr = body[pc]
        if isinstance(instr, ir.Read):
            try:
                sid = system.resolve(t, instr.sem, state)
            except Fault:  # an index that faults: this read says nothing useful
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


def leftover_consequence(decl: ir.SemDecl) -> str:
    """What the chip does with a leftover on `decl` (semcheck/tpu_facts.py)."""
    if decl.origin is ir.SemOrigin.BARRIER:
        return tpu_facts.BARRIER_LEFTOVER_CARRIES
    if not decl.checked_at_exit:
        return tpu_facts.LEFTOVER_CARRIES
    return tpu_facts.LEFTOVER_HALTS


def _leftover_findings(system: System, state: State, check: Callable[[], object]) -> list[Finding]:
    out = []
    for sid, count in enumerate(state.sems):
        if not count:
            continue
        check()
        inst = system.instances[sid]
        if not must_be_zero_at_exit(system.backend, inst.decl):
            continue
        owner = next(
            (
                t
                for t, th in enumerate(system.threads)
                if th.device == inst.device and (inst.core is None or th.core == inst.core)
            ),
            None,
        )
        # as the kernel that holds it at the end calls it (a semaphore carried into a later
        # kernel of a program has that kernel's name there)
        invocation = None if owner is None else system.invocation_at[owner][state.pcs[owner]]
        if invocation is None:
            label, declared = inst.label, str(inst.decl.loc)
        else:
            seen = system.sem_as(sid, invocation)
            label, declared = seen.label, seen.declared
        if inst.decl.origin is ir.SemOrigin.HANDED_ON:
            message = (
                f"semaphore leftover: {label} holds {count} when the program ends: a kernel "
                f"handed it on and no later kernel of the program waited for everything it "
                f"received (a copy nobody waits for may still be landing). It is declared at "
                f"{declared}."
            )
        elif system.backend is ir.Backend.GPU:  # a barrier semaphore (plgpu.get_barrier_semaphore)
            message = (
                f"semaphore leftover: {label} holds {count} when the kernel exits; Mosaic GPU's "
                f"barrier semaphores are zeroed only before the module starts, so the next kernel "
                f"with collective_id {inst.decl.collective_id} starts from it. It is declared at "
                f"{declared}."
            )
        else:
            message = (
                f"semaphore leftover: {label} holds {count} when the kernel exits (or it was "
                f"added to after the kernel exited); {_zero_at_exit_rule(system, sid, invocation)}"
            )
        out.append(Finding(Kind.SEMAPHORE_LEFTOVER, _leftover_key(inst), owner, None, message, sem=sid))
    return out


# --- static checks -----------------------------------------------------------------------------


def static_findings(system: System) -> list[Finding]:
    """Findings that need no exploration: what the frontend found while lowering (the
    backend's own lowering rejects the kernel, or lowers a construct otherwise than it reads:
    `ir.LoweringFinding`), each once, at its line."""
    out: dict[tuple, Finding] = {}
    for found in system.protocol.findings:
        key = (found.kind, found.loc)
        out.setdefault(key, Finding(found.kind, key, None, found.loc, found.message, hint=found.hint))
    return list(out.values())


def _describe_instr(instr: ir.Instr) -> str:
    """What an instruction is, in the words of the primitive a kernel author wrote."""
    describe = _DESCRIBED.get(type(instr))
    return describe(instr) if describe is not None else type(instr).__name__


_DESCRIBED: dict[type, Callable[[Any], str]] = {
    ir.Signal: lambda _: "semaphore_signal",
    ir.Wait: lambda i: "semaphore_wait" + ("" if i.decrement else "(decrement=False)"),
    ir.DmaWait: lambda i: f"dma_wait ({i.side} side)",
    ir.DmaStart: lambda _: "dma_start",
    ir.Read: lambda _: "semaphore_read",
    ir.Load: lambda _: "load",
    ir.Store: lambda i: "atomic update" if i.atomic else "store",
}
