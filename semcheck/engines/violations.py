"""A check's findings, with the paths that reach them, as the Result's violations: each
path replayed into the steps of its trace (with how much each step matters to the
finding), its root cause in words (`diagnosis.py`), what could have changed a stuck wait's
semaphore (`missing.py`), and the root cause a consequence was found through
(`causes.py`), placed before it.

Only a check that found something comes here, so a safe check imports none of it (nor the
trace, the causal analysis or the diagnosis: tests/test_startup.py)."""

from __future__ import annotations

from dataclasses import replace

from semcheck.semantics import trace as tracing
from semcheck.engines import causal, causes, diagnosis, missing
from semcheck.engines.merge import causes_first
from semcheck.semantics.properties import FAULT_KINDS, FIX_HINTS, SEVERITY, Finding, Kind
from semcheck.result import Violation
from semcheck.semantics import Action, State, System, ThreadStep

Entry = tuple[Finding, State, list[Action]]  # a finding, the state its path starts in, the path


def violations_of(system: System, entries: list[Entry], static: list[Finding], engine: str, *,
                  shorten_paths: bool = False) -> list[Violation]:
    """The violations of `entries` (found by `engine`), each consequence after its root
    cause, then those of the static findings (which have no path)."""
    if shorten_paths:
        entries = [(f, initial, causes.shorten(system, f, initial, actions)) for f, initial, actions in entries]
    entries, cause_of = _with_causes(system, entries)
    by_key = {f.key: to_violation(system, f, initial, actions, found_by=engine) for f, initial, actions in entries}
    for key, cause in cause_of.items():
        by_key[key].caused_by = by_key[cause]
    violations = causes_first(sorted(by_key.values(), key=lambda v: (v.severity != "error", len(v.trace))))
    return violations + [to_violation(system, f, None, []) for f in static]


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
