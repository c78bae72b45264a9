"""The explicit engine: exhaustive breadth-first search with state hashing.

Breadth-first order makes the first path found to each violation a shortest one (in the
reduced graph). With `reduce=True` each state expands only a stubborn subset of its enabled
actions, minus its sleep set (actions already covered by an independent sibling). A state
reached again with a sleep set that is not a superset of the one it was expanded with is
expanded again with the intersection (Godefroid's condition for sleep sets with state
matching), so the reduction stays exact.

When some thread can jump backwards, the explored graph's edges are kept for the
non-progress check (`endless.py`): states from which no schedule ends are a loop that
spins for ever.
"""

from __future__ import annotations

from collections import deque

from semcheck.engines.explicit import endless
from semcheck.engines.budget import Budget, BudgetExceeded, Monitor, ProgressFn
from semcheck.engines.common import Exploration
from semcheck.engines.explicit.independence import Independence
from semcheck.engines.explicit.reduction import stubborn_subset
from semcheck.properties import Kind, end_kind, fault_findings, hazard_findings, hazards_to_keep, terminal_findings
from semcheck.semantics import Action, System

NAME = "explicit"


def explore(
    system: System,
    *,
    reduce: bool = True,
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
    stop_at_first: bool = False,
    silence_reported_races: bool = True,
) -> Exploration:
    """Explore every schedule (up to the reduction). Once a data race is reported between
    two lines, those lines are no longer watched (`Independence.silence`, this search's own
    state: the System is never changed): one report per pair of
    lines, without paying for every other schedule in which the same two lines race.
    With that default, states also drop every hazard as soon as its finding is recorded:
    hazards never change what happens next, and carrying them would only tell apart states
    that differ in which devices have already been reported (2^N of them for N devices)."""
    monitor = Monitor(budget or Budget.from_env(), progress)
    found = Exploration(system)
    ind = Independence(system)
    index: dict = {}
    parent: list[int] = []
    via: list = []
    depth: list[int] = []
    sleep: list[frozenset] = []
    movable: dict[int, tuple[int, ...]] = {}  # queued state -> threads that can move in it
    queue: deque[int] = deque()

    states: list = []  # position -> state
    transitions = 0
    # With loops, the non-progress check (endless.py) needs the explored graph's edges.
    edges: list[list] | None = [] if endless.loops(system) else None
    skipped: list[tuple[int, Action]] = []  # (state, action) pairs a sleep set skipped
    ended: set[int] = set()
    try:
        for state in system.iter_initial_states():  # one per input value: check the budget
            monitor.tick(len(states), 0)
            if state not in index:
                index[state] = len(parent)
                states.append(state)
                parent.append(-1)
                via.append(None)
                depth.append(0)
                sleep.append(frozenset())
                queue.append(index[state])
                if edges is not None:
                    edges.append([])
    except BudgetExceeded as exceeded:
        queue.clear()
        found.exhausted = exceeded.reason

    def path_to(i: int) -> tuple[int, list]:
        actions = []
        while parent[i] >= 0:
            actions.append(via[i])
            i = parent[i]
        return i, actions[::-1]

    def record(findings, i: int, then=None) -> None:
        for finding in findings:
            if finding.key not in found.findings:
                root, actions = path_to(i)
                found.add(finding, states[root], actions if then is None else actions + [then])
                if finding.kind is Kind.DATA_RACE and silence_reported_races:
                    ind.silence(finding.loc, finding.other)

    try:
        while queue:
            i = queue.popleft()
            state = states[i]
            monitor.tick(len(states), transitions, len(queue), depth[i])
            ready = movable.pop(i, None)
            if ready is None:
                ready = system.movable_threads(state)
            enabled = system.enabled(state, ready)
            if not enabled:
                ended.add(i)
                found.ends.add(end_kind(system, state))
                record(terminal_findings(system, state), i)
                if stop_at_first and found.has_errors:
                    break
                continue
            chosen = stubborn_subset(ind, state, enabled) if reduce else enabled
            asleep = sleep[i]
            done: list = []
            for action in chosen:
                if action in asleep:
                    if edges is not None:
                        skipped.append((i, action))
                    continue
                successor = ind.normalize(system.step(state, action))
                transitions += 1
                if silence_reported_races and successor.hazards:
                    record(hazard_findings(system, successor, state.hazards), i, action)
                    successor = successor._replace(hazards=hazards_to_keep(successor))
                if reduce:
                    inherited = frozenset(
                        b for b in (*asleep, *done) if ind.independent(state, action, b)
                    )
                else:
                    inherited = frozenset()
                done.append(action)
                j = index.get(successor)
                if j is None:
                    j = index[successor] = len(states)
                    states.append(successor)
                    parent.append(i)
                    via.append(action)
                    depth.append(depth[i] + 1)
                    sleep.append(inherited)
                    queue.append(j)
                    movable[j] = system.movable_after(state, ready, action, successor)
                    if edges is not None:
                        edges.append([])
                    if successor.faults != state.faults:
                        record(fault_findings(system, successor, state.faults), j)
                    if successor.hazards != state.hazards:
                        record(hazard_findings(system, successor, state.hazards), j)
                elif not sleep[j] <= inherited:
                    sleep[j] = sleep[j] & inherited
                    queue.append(j)
                if edges is not None:
                    edges[i].append((j, action))
            if stop_at_first and found.has_errors:
                break
    except BudgetExceeded as exceeded:
        found.exhausted = exceeded.reason
    if edges is not None and not found.exhausted and not queue:
        for i, action in skipped:  # a skipped action's successor was reached another way
            successor = ind.normalize(system.step(states[i], action))
            if silence_reported_races:
                successor = successor._replace(hazards=hazards_to_keep(successor))
            j = index.get(successor)
            if j is None:
                ended.add(i)  # not found under this name: count it as able to end
            else:
                edges[i].append((j, action))
        for finding, initial, actions in endless.findings(system, states, edges, ended, path_to):
            found.add(finding, initial, actions)
    found.states = len(states)
    found.transitions = transitions
    found.seconds = monitor.elapsed()
    found.peak_memory_mb = monitor.peak_mb
    return found
