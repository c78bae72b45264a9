"""What every engine hands back before it becomes a Result: findings with the paths that
reach them, counts, and whether a budget ran out."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from semcheck import trace as tracing
from semcheck.engines import causal, missing
from semcheck.properties import FAULT_KINDS, FIX_HINTS, SEVERITY, Finding, Kind, static_findings
from semcheck.result import Result, Stats, Verdict, Violation
from semcheck.semantics import Action, State, System


@dataclass
class Exploration:
    system: System
    findings: dict[tuple, tuple[Finding, State, list[Action]]] = field(default_factory=dict)
    states: int = 0
    transitions: int = 0
    seconds: float = 0.0
    peak_memory_mb: float | None = None
    exhausted: str | None = None  # why the search stopped early, if it did
    encoded_events: int | None = None  # z3: instruction occurrences and DMA completions
    solver_queries: int | None = None  # z3: how many satisfiability checks it took
    stored_states: int | None = None  # explicit: the states it stored (a one-path stretch stores none)
    store_bytes: int | None = None  # explicit: what its store held for them
    ends: set[str] = field(default_factory=set)  # how the end states found ended (properties.end_kind)
    notes: list[str] = field(default_factory=list)  # what the engine's search rested on (e.g. symmetry)

    def add(self, finding: Finding, initial: State, actions: list[Action]) -> None:
        self.findings.setdefault(finding.key, (finding, initial, actions))

    @property
    def has_errors(self) -> bool:
        return any(SEVERITY[f.kind] == "error" for f, _, _ in self.findings.values())


def to_result(exploration: Exploration, engine: str) -> Result:
    system = exploration.system
    protocol = system.protocol
    violations = [
        to_violation(system, finding, initial, actions)
        for finding, initial, actions in exploration.findings.values()
    ]
    violations.sort(key=lambda v: (v.severity != "error", len(v.trace)))
    violations += [to_violation(system, f, None, []) for f in static_findings(system)]
    if any(v.severity == "error" for v in violations):
        verdict = Verdict.VIOLATION
    elif exploration.exhausted:
        verdict = Verdict.INCONCLUSIVE
    else:
        verdict = Verdict.SAFE
    notes = list(protocol.notes) + exploration.notes
    if exploration.exhausted:
        work = (
            f"{exploration.solver_queries:,} solver queries"
            if exploration.solver_queries is not None
            else f"{exploration.states:,} states"
        )
        notes.append(
            f"search stopped early: {exploration.exhausted} after {work}; "
            "no verdict for what was not explored"
        )
    return Result(
        **describing(protocol),
        engine=engine,
        verdict=verdict,
        violations=violations,
        stats=Stats(
            states=exploration.states,
            transitions=exploration.transitions,
            seconds=round(exploration.seconds, 4),
            peak_memory_mb=exploration.peak_memory_mb,
            encoded_events=exploration.encoded_events,
            solver_queries=exploration.solver_queries,
            stored_states=exploration.stored_states,
            store_bytes=exploration.store_bytes,
        ),
        notes=notes,
        ends=frozenset(exploration.ends),
        exhausted=exploration.exhausted,
    )


def describing(protocol) -> dict:
    """The Result fields that say which kernel was checked, and how."""
    return dict(
        kernel=protocol.name,
        file=protocol.loc.file,
        line=protocol.loc.line,
        frontend=protocol.frontend,
        backend=protocol.backend.value,
        devices=protocol.devices,
        cores=protocol.cores,
    )


def to_violation(system: System, finding: Finding, initial: State | None, actions) -> Violation:
    steps = tracing.build(system, initial, actions) if initial is not None else []
    racing_step = _racing_start_step(system, initial, actions, finding.other_start)
    states = tracing.replay(system, initial, actions) if initial is not None else []
    if steps:
        focus = _focus(system, finding, len(actions), racing_step)
        distance = causal.relevance(system, states, actions, focus)
        for j, step in enumerate(steps):
            step.relevance = distance.get(j)
    loc, message = finding.loc, finding.message
    if loc is None and finding.sem is not None:
        # A leftover count is best shown where the last unbalanced addition happened.
        loc = _last_addition(system, steps, finding.sem)
        if loc is not None and finding.kind is Kind.SEMAPHORE_LEFTOVER:
            message += f" The last addition to it is at {loc}."
        loc = loc or system.instances[finding.sem].decl.loc
    thread = system.threads[finding.thread] if finding.thread is not None else None
    return Violation(
        kind=finding.kind.value,
        severity=SEVERITY[finding.kind],
        message=message,
        device=thread.device if thread else None,
        core=thread.core if thread else None,
        location=loc,
        trace=steps,
        blocked=list(finding.blocked),
        cycle=list(finding.cycle),
        inputs=(
            {inp.name: value for inp, value in zip(system.protocol.inputs, initial.inputs)}
            if initial is not None
            else {}
        ),
        related=[finding.other] if finding.other else [],
        semaphore=system.instances[finding.sem].short if finding.sem is not None else None,
        semaphore_name=system.instances[finding.sem].decl.name if finding.sem is not None else None,
        racing_step=racing_step,
        missing=_missing_actions(system, finding, states, actions),
        hint=finding.hint or FIX_HINTS.get(finding.kind),
        loop_from=len(steps) - finding.loop_steps + 1 if finding.loop_steps else None,
        identity=_identity(system, finding),
        at_end=finding.at_end,
    )


def _last_addition(system: System, steps, sid: int):
    """Where the trace last added to semaphore `sid`, or None if it never did."""
    short = system.instances[sid].short
    adders = [s for s in steps if s.semaphore == short
              and s.after is not None and s.before is not None and s.after > s.before]
    return adders[-1].location if adders else None


def _focus(system: System, finding: Finding, length: int, racing_step: int | None) -> causal.Focus:
    """What the trace of `finding` is about: a stuck state's root waits (the cycle of a
    deadlock, the waits nothing can satisfy), with their threads and semaphores; a loop's
    thread; a leftover's semaphore; otherwise the path's last action (where the fault or
    hazard happened) and, for a race, the start of the copy in flight."""
    if finding.blocked:
        if finding.cycle:
            roots = [finding.blocked[i] for i in finding.cycle]
        else:
            roots = [b for b in finding.blocked if b.location == finding.loc] or list(finding.blocked)
        return causal.Focus(threads=frozenset(b.thread for b in roots), semaphores=frozenset(b.sem for b in roots))
    if finding.loop_steps:
        turn = tuple(range(length - finding.loop_steps, length))
        return causal.Focus(steps=turn, threads=frozenset() if finding.thread is None else frozenset({finding.thread}))
    sems = frozenset({finding.sem}) if finding.sem is not None else frozenset()
    if finding.at_end:
        return causal.Focus(semaphores=sems)
    steps = (length - 1,) + ((racing_step - 1,) if racing_step is not None else ())
    return causal.Focus(steps=steps, semaphores=sems)


def _missing_actions(system: System, finding: Finding, states, actions) -> list:
    """What could have changed the semaphore of each root wait (one per distinct line and
    semaphore declaration: the same wait on every device of a ring is one), or of a leftover."""
    if not states:
        return []
    if finding.blocked:
        roots = [finding.blocked[i] for i in finding.cycle] if finding.cycle else [
            b for b in finding.blocked if b.location == finding.loc]
        seen, out = set(), []
        for b in roots:
            key = (b.location, system.instances[b.sem].decl.name)
            if key not in seen:
                seen.add(key)
                out.append(missing.missing_action(system, states, actions, b.sem, b.needs, adds=True))
        return out
    if finding.kind is Kind.SEMAPHORE_LEFTOVER and finding.sem is not None:
        # Found by a later entry, which resets the count: what it held is judged just before.
        judged = states[-2] if not finding.at_end and len(states) > 1 else None
        takes = missing.missing_action(system, states, actions, finding.sem, None, adds=False, judged=judged)
        adds = missing.missing_action(system, states, actions, finding.sem, None, adds=True)
        return [replace(takes, sites=takes.sites + tuple(s for s in adds.sites if s.ran))]
    return []


def _identity(system: System, finding: Finding) -> tuple:
    """The finding's key, with a faulting thread named by where it runs instead of by its
    index (which differs between a protocol and its independent parts)."""
    if finding.kind in FAULT_KINDS:
        kind, t, pc = finding.key
        thread = system.threads[t]
        return (kind, thread.device, thread.core, thread.sub, pc)
    return finding.key


def _racing_start_step(system: System, initial: State | None, actions, start) -> int | None:
    """The trace step at which the racing copy was started: the last time its thread ran
    the start instruction before the race (an earlier copy from the same line, of another
    device or an earlier loop step, may be pending too, but it is not the one that races)."""
    if start is None or initial is None:
        return None
    thread, pc = start
    found = None
    for index, (action, before) in enumerate(zip(actions, tracing.replay(system, initial, actions)), 1):
        if action == ("t", thread) and before.pcs[thread] == pc:
            found = index
    return found
