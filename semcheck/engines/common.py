"""What every engine hands back before it becomes a Result: findings with the paths that
reach them, counts, and whether a budget ran out."""

from __future__ import annotations

from dataclasses import field, replace

from semcheck.records import record
from semcheck.semantics import trace as tracing
from semcheck.engines import causal, causes, diagnosis, missing
from semcheck.semantics.properties import FAULT_KINDS, FIX_HINTS, SEVERITY, Finding, Kind, static_findings
from semcheck.result import Result, Stats, Verdict, Violation, verdict_of
from semcheck.semantics import Action, State, System, ThreadStep


@record
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
    store_fixed_bytes: int | None = None  # explicit: of those, what grows with the protocol, not the states
    ends: set[str] = field(default_factory=set)  # how the end states found ended (properties.end_kind)
    notes: list[str] = field(default_factory=list)  # what the engine's search rested on (e.g. symmetry)

    def add(self, finding: Finding, initial: State, actions: list[Action]) -> None:
        self.findings.setdefault(finding.key, (finding, initial, actions))

    @property
    def has_errors(self) -> bool:
        return any(SEVERITY[f.kind] == "error" for f, _, _ in self.findings.values())


def to_result(exploration: Exploration, engine: str, *, first_only: bool = False,
              shorten_paths: bool = False) -> Result:
    """The Result of one engine's run. `first_only`: the run stopped at its first
    counterexample, which alone is reported (with its root cause, `causes.py`).
    `shorten_paths`: the paths are not a breadth-first search's, so each is cut down to the
    steps its finding depends on (`causes.shorten`)."""
    system = exploration.system
    protocol = system.protocol
    entries = list(exploration.findings.values())
    if first_only:
        entries = first_counterexample(entries)
    if shorten_paths:
        entries = [(f, initial, causes.shorten(system, f, initial, actions)) for f, initial, actions in entries]
    entries, cause_of = _with_causes(system, entries)
    by_key = {f.key: to_violation(system, f, initial, actions, found_by=engine) for f, initial, actions in entries}
    for key, cause in cause_of.items():
        by_key[key].caused_by = by_key[cause]
    violations = causes.causes_first(sorted(by_key.values(), key=lambda v: (v.severity != "error", len(v.trace))))
    violations += [to_violation(system, f, None, []) for f in static_findings(system)]
    verdict = verdict_of(violations, complete=not exploration.exhausted)
    notes = list(protocol.notes) + exploration.notes
    if exploration.exhausted:
        notes.append(stopped_early(exploration.exhausted, exploration.states, exploration.solver_queries))
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
            store_fixed_bytes=exploration.store_fixed_bytes,
        ),
        notes=notes,
        ends=frozenset(exploration.ends),
        exhausted=exploration.exhausted,
        first_only=first_only and verdict is Verdict.VIOLATION,
    )


def stopped_early(reason: str, states: int, solver_queries: int | None) -> str:
    """The note of a run that stopped before it explored everything."""
    work = f"{solver_queries:,} solver queries" if solver_queries is not None else f"{states:,} states"
    return f"search stopped early: {reason} after {work}; no verdict for what was not explored"


Entry = tuple[Finding, State, list[Action]]


def first_counterexample(entries: list[Entry]) -> list[Entry]:
    """The first error found: what a check that stops at its first counterexample reports
    (one state can hold several, e.g. a leftover on every device at exit: the first stands
    for them, and `--exhaustive` lists each). Without an error, every finding."""
    first = next((e for e in entries if SEVERITY[e[0].kind] == "error"), None)
    return entries if first is None else [first]


def _with_causes(system: System, entries: list[Entry]) -> tuple[list[Entry], dict[tuple, tuple]]:
    """`entries` with the root cause of each consequence added where no engine reported it
    (found by replaying the consequence's path), and which finding's cause is which."""
    known = {f.key for f, _, _ in entries}
    out = list(entries)
    cause_of: dict[tuple, tuple] = {}
    for finding, initial, actions in entries:
        found = causes.first_cause(system, finding, initial, actions)
        if found is None:
            continue
        cause, path = found
        if _leads_back(cause_of, cause.key, finding.key):
            continue  # each is on the other's path (the same pair of lines racing twice): no order
        cause_of[finding.key] = cause.key
        if cause.key not in known:
            known.add(cause.key)
            out.insert(0, (cause, initial, causes.shorten(system, cause, initial, path)))
    return out, cause_of


def _leads_back(cause_of: dict[tuple, tuple], start: tuple, to: tuple) -> bool:
    """Whether following causes from `start` reaches `to`."""
    seen = set()
    while start in cause_of and start not in seen:
        seen.add(start)
        start = cause_of[start]
    return start == to


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


def to_violation(system: System, finding: Finding, initial: State | None, actions,
                 found_by: str | None = None) -> Violation:
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
        kind=finding.kind,
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
        cause=diagnosis.diagnose(system, finding, steps, racing_step),
        loop_from=len(steps) - finding.loop_steps + 1 if finding.loop_steps else None,
        identity=_identity(system, finding),
        at_end=finding.at_end,
        found_by=(found_by,) if found_by else (),
        rests_on=finding.rests_on,
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
    starts = ThreadStep(thread)
    found = None
    for index, (action, before) in enumerate(zip(actions, tracing.replay(system, initial, actions)), 1):
        if action == starts and before.pcs[thread] == pc:
            found = index
    return found
