"""The explicit engine: exhaustive breadth-first search with state hashing.

Breadth-first order makes the first path found to each violation a shortest one (in the
reduced graph). With `reduce=True` each state expands only a stubborn subset of its enabled
actions, minus its sleep set (actions already covered by an independent sibling). A state
reached again with a sleep set that is not a superset of the one it was expanded with is
expanded again with the intersection (Godefroid's condition for sleep sets with state
matching), so the reduction stays exact.

When some thread can jump backwards, the explored graph's edges are kept for the
non-progress check (`endless.py`): states from which no schedule ends are a loop that
spins for ever. With every finding asked for (`--exhaustive`) they also serve the
reduction's proviso against ignoring (`proviso.py`): once the queue is empty, each bottom
component of the explored graph with a cycle in which an enabled actor is never taken gets
a state expanded again with a stubborn set seeded by that actor, and the search goes on.
"""

from __future__ import annotations

from semcheck.engines.explicit import symmetry as symmetries
from semcheck.engines.explicit import endless
from semcheck.engines.budget import JUDGING, Budget, BudgetExceeded, Monitor, ProgressFn, bounded_phase, rss_mb
from semcheck.engines.common import Exploration
from semcheck.engines.explicit.independence import Independence
from semcheck.engines.explicit.path import OnePath
from semcheck.engines.explicit.proviso import Proviso
from semcheck.engines.explicit.reduction import isolated_action, stubborn_subset
from semcheck.engines.explicit.store import Fifo, SearchTree, StateStore
from semcheck.engines.options import ExplicitOptions
from semcheck.semantics.properties import Kind, end_kind, fault_findings, hazard_findings, hazards_to_keep, terminal_findings
from semcheck.semantics import Action, State, System, without_gc

NAME = "explicit"
_MOVABLE_KEPT = 4096  # queued states whose movable threads are kept (others find them again)


def explore(
    system: System,
    options: ExplicitOptions = ExplicitOptions(),
    *,
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
) -> Exploration:
    """Explore every schedule (up to the reduction). Once a data race is reported between
    two lines, later races of that pair are dropped, and a line all of whose possible
    pairs are reported is no longer watched (`Independence.report`, this search's own
    state: the System is never changed): one report per pair of lines, without paying for
    every other schedule in which the same two lines race.
    With that default, states also drop every hazard as soon as its finding is recorded:
    hazards never change what happens next, and carrying them would only tell apart states
    that differ in which devices have already been reported (2^N of them for N devices).

    With `symmetry` (default: when reducing), a protocol invariant under rotations of the
    device axis (`symmetry.rotations`, checked on the IR) stores one state per orbit where
    the search branches: a successor of a state with more than one action to take is looked
    up by its least image under the group, so one whose orbit was seen is not explored
    again. The state stored is the one reached, so every path is a path of the system; the
    images of each finding under the group are added at the end by replaying the image of
    its path (docs/search.md, "Symmetry")."""
    with without_gc():  # the search's tables and states hold no cycles (`without_gc`)
        return _explore(system, reduce=options.reduce, budget=budget, progress=progress,
                        stop_at_first=options.stop_at_first, silence_reported_races=options.silence_reported_races,
                        symmetry=options.symmetry)


def _explore(system: System, *, reduce: bool, budget: Budget | None, progress: ProgressFn | None,  # noqa: C901
             stop_at_first: bool, silence_reported_races: bool, symmetry: bool | None) -> Exploration:
    budget = (budget or Budget.from_env()).started()
    monitor = Monitor(budget, progress)
    found = Exploration(system)
    try:
        monitor.check()  # a budget already spent: said as the search's own first check says it
        # The tables are linear in the protocol but not free (at 256 devices about 13 CPU s
        # and 600 MB): they count against the budget like the search itself.
        with bounded_phase("building the search's independence and symmetry tables", budget,
                           monitor.start, progress=progress):
            ind = Independence(system)
            # With loops, the non-progress check (endless.py) needs the explored graph's edges.
            edges: list[list] | None = [] if endless.loops(system) else None
            group = None
            if (reduce if symmetry is None else symmetry) and edges is None:
                group = symmetries.rotations(system)
    except BudgetExceeded as exceeded:
        found.exhausted, found.stopped_by = exceeded.reason, exceeded.by
        found.seconds = monitor.elapsed()
        found.peak_memory_mb = max(monitor.peak_mb, rss_mb())
        return found
    if group is not None:
        found.notes.append(group.describe())
    states = StateStore(system, group)  # position -> state, in a tree of shared pairs; looked up by key
    tree = SearchTree(states)  # position -> parent, action, sleep set
    # queued state -> threads that can move in it (while few are queued: else found again)
    movable: dict[int, tuple[int, ...]] = {}
    queue = Fifo()
    transitions = 0
    skipped: list[tuple[int, Action]] = []  # (state, action) pairs a sleep set skipped
    ended: set[int] = set()
    # while the reduced graph is one path from the one initial state, no state is stored
    # (`path.py`); the search goes on breadth-first from the first state that branches
    path: OnePath | None = None

    def tree_path(i: int) -> tuple[int, list]:
        """The stored root of state i and the actions from it to i."""
        actions = []
        while tree.parent[i] >= 0:
            actions.append(tree.via(i))
            i = tree.parent[i]
        return i, actions[::-1]

    def path_to(i: int) -> tuple[State, list]:
        """The initial state and the actions from it to stored state i."""
        root, actions = tree_path(i)
        if path is not None:  # the root is where the one path ended
            return path.initial, path.actions() + actions
        return states[root], actions

    def record(findings, i: int | None, then=None) -> None:
        """Findings seen in stored state i (None: at the end of the path), with their path."""
        for finding in findings:
            if finding.key not in found.findings:
                if i is not None:
                    initial, actions = path_to(i)
                else:
                    assert path is not None, "only the one path records findings without a stored state"
                    initial, actions = path.initial, path.actions()
                found.add(finding, initial, actions if then is None else actions + [then])
                if finding.kind is Kind.DATA_RACE and silence_reported_races:
                    ind.report(finding.loc, finding.other)

    def store(state: State, key_state: State, image: int, sleeping: frozenset, at_depth: int,
              ready: tuple[int, ...] | None) -> int:
        position = states.add(states.pack(key_state), state, image)
        tree.add(-1, None, sleeping)
        queue.append(position, at_depth)
        if ready is not None:
            movable[position] = ready
        if edges is not None:
            edges.append([])
        return position

    try:
        initial_states = iter(system.iter_initial_states())  # one per input value: check the budget
        first = next(initial_states, None)
        second = next(initial_states, None) if first is not None else None
        if first is not None and second is None and reduce and edges is None:
            path = OnePath(system, first)
            ended_on_path = _follow_path(system, ind, path, monitor, found, record, silence_reported_races,
                                         stop_at_first)
            transitions = len(path)
            if ended_on_path is not None:  # the whole reduced graph is one path: nothing stored
                found.states = len(path) + 1
                found.transitions = transitions
                found.stored_states, found.store_bytes, found.store_fixed_bytes = 0, 0, 0
                if group is not None and not (stop_at_first and found.has_errors):  # as below
                    _add_images(system, ind, group, found, silence_reported_races, monitor)
                found.seconds = monitor.elapsed()
                found.peak_memory_mb = monitor.peak_mb
                return found
            assert path.end is not None
            store(path.end, path.end, 0, frozenset(), len(path), path.ready)
        else:
            for state in _chain(first, second, initial_states):
                monitor.tick(len(states), 0)
                key_state, image = _key_state(group, state)
                if states.find(states.pack(key_state)) is None:
                    store(state, key_state, image, frozenset(), 0, None)
    except BudgetExceeded as exceeded:
        queue.clear()
        found.exhausted, found.stopped_by = exceeded.reason, exceeded.by
        transitions = len(path) if path is not None else 0
    # the states visited on the path before the first one stored (all of them, the one it
    # stopped at included, when the budget ran out there)
    on_path = 0 if path is None else len(path) + (0 if len(states) else 1)

    def hangs(graph: list[list]) -> list:
        """The runs that never end (`endless.py`) on the explored graph `graph`, with the
        edges that sleep sets skipped added to it."""
        can_end = set(ended)
        for i, action in skipped:  # a skipped action's successor was reached another way
            successor = ind.normalize(system.step(states[i], action))
            if silence_reported_races:
                successor = successor._replace(hazards=hazards_to_keep(successor))
            j = states.find(states.pack(successor))
            if j is None:
                can_end.add(i)  # not found under this name: count it as able to end
            else:
                graph[i].append((j, action))
        return endless.findings(system, states, graph, can_end, tree_path)

    def proviso_round() -> bool:
        """Seed each ignored actor in its state and queue the state again; whether any was.
        Before the first round, the runs that never end are found as the search without
        the proviso finds them: if the proviso runs out of states, they are what stands."""
        assert proviso is not None and edges is not None
        ignored = proviso.ignored(ind, states, edges)
        if not ignored:
            return False
        if proviso.started_at is None:
            proviso.start(len(states))
            for finding, initial, actions in hangs([list(out) for out in edges]):
                found.add(finding, initial, actions)
        for i, actor in ignored:
            proviso.seed(i, actor, tree)
            queue.append(i, len(tree_path(i)[1]))
        return True

    # With loops and every finding asked for, the proviso against ignoring (`proviso.py`).
    # Stopping at the first finding, it is not needed: a bottom component with a cycle is a
    # run that never ends, an error the non-progress check reports as it is.
    proviso = Proviso() if reduce and edges is not None and not stop_at_first else None
    try:
        while queue or (proviso is not None and proviso_round()):
            if proviso is not None and proviso.spent(len(states)):
                queue.clear()
                break
            i, depth = queue.popleft()
            state = states.take(i)
            monitor.tick(on_path + len(states), transitions, len(queue), depth)
            kept = movable.pop(i, None)
            ready = system.movable_threads(state) if kept is None else kept
            # most states have a thread whose action is a stubborn set of its own: then
            # the pending completions need not be listed as actions
            chosen = isolated_action(ind, state, ready) if reduce and (proviso is None or i not in proviso.seeds) else None
            if chosen is not None:
                enabled = chosen
            else:
                enabled = system.enabled(state, ready)
            if not enabled:
                ended.add(i)
                found.ends.add(end_kind(system, state))
                with monitor.during(JUDGING):
                    record(terminal_findings(system, state, monitor.check), i)
                if stop_at_first and found.has_errors:
                    break
                continue
            if chosen is None:
                if proviso is not None and i in proviso.seeds:
                    chosen = proviso.choose(ind, state, enabled, i)
                else:
                    chosen = stubborn_subset(ind, state, enabled, isolated_tried=True) if reduce else enabled
            asleep = tree.sleep(i)
            done: list = []
            for action in chosen:
                if asleep and action in asleep:  # (an empty set still hashes the action)
                    if edges is not None:
                        skipped.append((i, action))
                    continue
                successor = ind.normalize(system.step(state, action))
                transitions += 1
                if silence_reported_races and successor.hazards:
                    record(hazard_findings(system, successor, state.hazards), i, action)
                    successor = successor._replace(hazards=hazards_to_keep(successor))
                if reduce and not (proviso is not None and proviso.leaves_nothing_asleep(i)):
                    inherited = frozenset(
                        b for b in (*asleep, *done) if ind.independent(state, action, b)
                    )
                else:
                    inherited = frozenset()
                done.append(action)
                # where the search branches, a successor is looked up by its orbit
                if group is None or len(chosen) == 1:
                    key_state, image = successor, 0
                else:
                    key_state, image = _key_state(group, successor)
                key = states.pack(key_state)
                j = states.find(key)
                if j is None:
                    j = states.add(key, successor, image)
                    tree.add(i, action, inherited)
                    queue.append(j, depth + 1)
                    if len(movable) < _MOVABLE_KEPT:
                        movable[j] = system.movable_after(state, ready, action, successor)
                    if edges is not None:
                        edges.append([])
                    if successor.faults != state.faults:
                        record(fault_findings(system, successor, state.faults), j)
                    if successor.hazards != state.hazards:
                        record(hazard_findings(system, successor, state.hazards), j)
                elif group is not None and not states.holds(j, successor, key_state, image):
                    # another state of the orbit: its sleep set names that state's actions,
                    # so it is expanded again with none asleep
                    if tree.sleep(j):
                        tree.set_sleep(j, frozenset())
                        queue.append(j, depth + 1)  # queued again at this path's depth (its first was no longer)
                elif reduce and not tree.sleep(j) <= inherited:  # unreduced, every sleep set is empty
                    tree.set_sleep(j, tree.sleep(j) & inherited)
                    queue.append(j, depth + 1)
                if edges is not None:
                    edges[i].append((j, action))
            if stop_at_first and found.has_errors:
                break
    except BudgetExceeded as exceeded:
        found.exhausted, found.stopped_by = exceeded.reason, exceeded.by
    if proviso is not None and proviso.cut:
        found.notes.append(
            f"a thread spins for ever here, and the threads beside it were followed for {proviso.allowance():,} "
            "more states only (the proviso against ignoring, --exhaustive): what they would do later (a fault, "
            "a race, an early arrival) may be missing; the spin is reported as it is (docs/search.md, \"Runs "
            "that never end\")")
    elif edges is not None and not found.exhausted and not queue:
        for finding, initial, actions in hangs(edges):
            found.add(finding, initial, actions)
    if group is not None and not (stop_at_first and found.has_errors):  # one counterexample: no images
        _add_images(system, ind, group, found, silence_reported_races, monitor)
    found.states = on_path + len(states)
    found.transitions = transitions
    found.stored_states = len(states)
    found.store_fixed_bytes = states.fixed_nbytes()
    found.store_bytes = states.nbytes() + tree.nbytes() + found.store_fixed_bytes
    found.seconds = monitor.elapsed()
    found.peak_memory_mb = monitor.peak_mb
    return found


def _replay(system: System, ind: Independence, initial, actions, silence_reported_races: bool):
    """The states along `actions` from `initial`, stepped as the search steps (races at
    reported pairs dropped, recorded hazards trimmed), each with the findings its
    transition saw."""
    state = initial
    for action in actions:
        before = state
        state = ind.normalize(system.step(before, action))
        seen = [*fault_findings(system, state, before.faults), *hazard_findings(system, state, before.hazards)]
        if silence_reported_races and state.hazards:
            state = state._replace(hazards=hazards_to_keep(state))
        yield state, seen


def _add_images(system: System, ind: Independence, group: symmetries.Rotations, found: Exploration,
                silence_reported_races: bool, monitor: Monitor) -> None:
    """Every finding's images under the group: the image of a path is a path of the system
    (the group's elements are automorphisms), replayed to name what it reaches. The replays
    count against the budget (the group's order times each path: 1,000 devices times a
    5,000-step path, minutes); where it runs out, the images named so far are reported and
    a note says the list is incomplete. The search itself covered everything: every image
    is a finding of a kind already found, so the verdict stands."""
    try:
        for _finding, initial, actions in list(found.findings.values()):
            if not actions and group.image(initial, 1) == initial:
                continue  # every image of the path is the path itself: nothing new to name
            for g in range(1, group.order):
                monitor.check()
                state = start = group.image(initial, g)
                path = [group.action(a, g) for a in actions]
                # the state each step reaches; the last is judged below the loop
                for k, (state, seen) in enumerate(_replay(system, ind, start, path, silence_reported_races), 1):  # noqa: B007
                    monitor.check()
                    for image in seen:
                        found.add(image, start, path[:k])
                if not system.enabled(state, system.movable_threads(state)):
                    for image in terminal_findings(system, state, monitor.check):
                        found.add(image, start, path)
    except BudgetExceeded as exceeded:
        found.notes.append(f"not every image of the findings under the rotations of the device axis is listed: "
                           f"{exceeded.reason} while naming them (those named so far are reported; the verdict "
                           "rests on the search, which covered every orbit)")


def _key_state(group: symmetries.Rotations | None, state: State) -> tuple[State, int]:
    """The state `state` is looked up by (its orbit's least image under `group`, if any)
    and the group element that maps that one back to `state`."""
    if group is None:
        return state, 0
    least, g = group.canonical(state)
    return least, group.inverse(g)


def _chain(first, second, rest):
    for state in (first, second):
        if state is None:
            return
        yield state
    yield from rest


def _follow_path(system: System, ind: Independence, path: OnePath, monitor: Monitor, found: Exploration, record,
                 silence_reported_races: bool, stop_at_first: bool) -> bool | None:
    """Follow the reduced graph from `path.initial` while each state has one action to
    take, keeping no state (`path.py`). True when it ended there (an end state, or
    `stop_at_first` with an error found); None when a state with more than one action was
    reached: `path.end` and `path.ready` are that state and its threads that can move."""
    state = path.initial
    ready = system.movable_threads(state)
    while True:
        monitor.tick(len(path) + 1, len(path), 0, len(path))
        chosen = isolated_action(ind, state, ready)
        enabled = chosen if chosen is not None else system.enabled(state, ready)
        if not enabled:
            found.ends.add(end_kind(system, state))
            with monitor.during(JUDGING):
                record(terminal_findings(system, state, monitor.check), None)
            return True
        if chosen is None:
            chosen = stubborn_subset(ind, state, enabled, isolated_tried=True)
        if len(chosen) != 1:
            path.end, path.ready = state, ready
            return None
        action = chosen[0]
        successor = ind.normalize(system.step(state, action))
        if silence_reported_races and successor.hazards:
            path.append(state, action)
            record(hazard_findings(system, successor, state.hazards), None)
            successor = successor._replace(hazards=hazards_to_keep(successor))
        else:
            path.append(state, action)
        ready = system.movable_after(state, ready, action, successor)
        if successor.faults != state.faults:
            record(fault_findings(system, successor, state.faults), None)
        if successor.hazards != state.hazards:
            record(hazard_findings(system, successor, state.hazards), None)
        state = successor
        if stop_at_first and found.has_errors:
            return True
