"""Root causes, and the shortest explanation of a path another engine found.

A counterexample is a path of the semantics. When the steps a violation depends on (its path
cut down by `shorten`) include a step that is itself a violation, that violation is its root
cause: reported first (`merge.causes_first`), at its own line, with the consequence linked
to it (`Violation.caused_by`). The steps that can be causes (`CAUSE_KINDS`) are those that
change what happens next or what a later step reads: a copy or signal reaching a peer before
it entered, a leftover a later entry finds, an overrun mbarrier phase (the
`CASCADING_KINDS`), a fault (its thread never moves again), and a copy started into memory
another copy is still writing (a data race at the start: a later wait satisfied by the first
copy lets a read race with the second, "a wait satisfied by the wrong copy"). Cutting the
path first names a cause only when the consequence depends on it, not when it merely
happened earlier in the schedule.

`shorten` is the shortening pass for paths that no breadth-first search found (a random
walk, a solver's witness): the steps a hazard or fault depends on, and those the copy it
races with depends on, replayed through the semantics; if the shorter path does not reach
the same finding at its end, the path is kept as it was.
"""

from __future__ import annotations

from semcheck.semantics import trace as tracing
from semcheck.engines import causal
from semcheck.semantics.properties import CASCADING_KINDS, FAULT_KINDS, Finding, Kind, fault_findings, hazard_findings
from semcheck.semantics import Action, State, System, ThreadStep

CAUSE_KINDS = FAULT_KINDS | {Kind(k) for k in CASCADING_KINDS} | {Kind.DATA_RACE}


def shorten(system: System, finding: Finding, initial: State, actions: list[Action]) -> list[Action]:
    """The steps of `actions` that the finding at its last step depends on, when they reach
    the same finding there; otherwise `actions` itself. A finding judged where nothing can
    move (stuck, a leftover at exit) needs every thread at its end: its path is kept."""
    if finding.at_end or finding.loop_steps or len(actions) < 2:
        return actions
    states = tracing.replay(system, initial, actions)
    last = len(actions) - 1
    if finding.key not in {f.key for f in _seen_at(system, states, last)}:
        return actions  # recorded earlier on the path (not at its end): nothing to cut to
    seeds: tuple[int, ...] = (last,)
    start = _start_index(system, states, actions, finding.other_start)
    if start is not None:
        seeds += (start,)
    kept = [actions[j] for j in causal.past_of(system, states, actions, seeds)]
    if len(kept) == len(actions):
        return actions
    try:
        shorter = tracing.replay(system, initial, kept)
    except AssertionError:
        return actions
    if finding.key not in {f.key for f in _seen_at(system, shorter, len(kept) - 1)}:
        return actions
    return kept


def first_cause(system: System, finding: Finding, initial: State,
                actions: list[Action]) -> tuple[Finding, list[Action]] | None:
    """The first violation of a `CAUSE_KINDS` kind other than `finding` itself that its
    path (cut down to what the finding depends on) passes through, with the path to it."""
    path = shorten(system, finding, initial, actions)
    states = tracing.replay(system, initial, path)
    own = len(path) if finding.at_end else len(path) - 1  # the finding's own step is not its cause
    for j in range(own):
        for seen in _seen_at(system, states, j):
            if seen.key != finding.key and seen.kind in CAUSE_KINDS:
                return seen, path[: j + 1]
    return None


def _seen_at(system: System, states: list[State], j: int) -> list[Finding]:
    """What step j of a path recorded: its faults and hazards."""
    before, after = states[j], states[j + 1]
    return [*fault_findings(system, after, before.faults), *hazard_findings(system, after, before.hazards)]


def _start_index(system: System, states: list[State], actions: list[Action], start) -> int | None:
    """The index of the last action before the end that ran the copy start `start`
    ((thread, pc)): the copy a race is with."""
    if start is None:
        return None
    thread, pc = start
    starts = ThreadStep(thread)
    found = None
    for j, action in enumerate(actions[:-1]):
        if action == starts and states[j].pcs[thread] == pc:
            found = j
    return found
