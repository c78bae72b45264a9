"""Shorten a path to the actions one of its actions depends on (its causal past).

A solver's execution may contain steps that have nothing to do with the violation it shows.
The causal past of an action keeps: its thread's earlier steps; for every kept wait or read
of a semaphore, every earlier change to that semaphore (so the kept wait sees the same
count, and the kept read the same value); for every kept DMA completion, the start that
scheduled it. Every kept step then sees exactly what it saw in the full path, so the
shorter path replays to the same action with the same outcome.
"""

from __future__ import annotations

from collections import deque

from semcheck import ir
from semcheck.records import record
from semcheck.semantics import FAULTED, Action, EventFires, State, System, ThreadStep

_READERS = (ir.Wait, ir.DmaWait, ir.Read)


def causal_past(system: System, states: list[State], actions: list[Action], last: int) -> list[Action]:
    """The sub-sequence of `actions[: last + 1]` that `actions[last]` depends on; `states`
    are the states along `actions` (as `trace.replay` returns them)."""
    return [actions[j] for j in past_of(system, states, actions, (last,))]


def past_of(system: System, states: list[State], actions: list[Action], seeds: tuple[int, ...]) -> list[int]:
    """The indices, in order, of the actions that some action at `seeds` depends on (the
    seeds included): `causal_past` of several actions at once."""
    last = max(seeds)
    reads: list[int | None] = []
    changes: list[set[int]] = []
    start_of: dict[int, int] = {}  # completion index -> index of the start that scheduled it
    pending: dict = {}  # event -> indices of starts whose copy of it is still in flight
    for j, action in enumerate(actions[: last + 1]):
        before, after = states[j], states[j + 1]
        changes.append({s for s, (a, b) in enumerate(zip(before.sems, after.sems)) if a != b})
        reads.append(None)
        if isinstance(action, EventFires):
            start_of[j] = pending[action.event].pop(0)
            continue
        t = action.thread
        instr = system.current(before, t)
        if after.pcs[t] != FAULTED and isinstance(instr, _READERS):
            reads[j] = system.resolve(t, instr.sem, before)
        added = list(after.events)
        for e in before.events:
            added.remove(e)
        for e in added:
            pending.setdefault(e, []).append(j)

    keep: list[int] = []
    threads: set[int] = set()
    semaphores: set[int] = set()
    starts: set[int] = set()
    for j in range(last, -1, -1):
        action = actions[j]
        wanted = (
            j in seeds
            or (isinstance(action, ThreadStep) and action.thread in threads)
            or bool(changes[j] & semaphores)
            or j in starts
        )
        if not wanted:
            continue
        keep.append(j)
        if isinstance(action, ThreadStep):
            threads.add(action.thread)
        else:
            starts.add(start_of[j])
        if (read := reads[j]) is not None:
            semaphores.add(read)
    return keep[::-1]


# --- relevance: how far each step of a trace is from the violation it shows ------------------


@record(frozen=True)
class Focus:
    """What a violation is about, as the seeds of its happens-before past.

    `steps` are the violating actions themselves (a fault, a racing access and the start of
    the copy it races with); `threads` are threads whose own history matters (a stuck
    wait's thread); `semaphores` are semaphores whose every change matters (the one a stuck
    wait waits on, the one left non-zero at exit)."""

    steps: tuple[int, ...] = ()  # indices into the path's actions
    threads: frozenset[int] = frozenset()
    semaphores: frozenset[int] = frozenset()


def relevance(system: System, states: list[State], actions: list[Action], focus: Focus) -> dict[int, int]:
    """For each action of the path in the happens-before past of `focus`, its distance
    from it (0 for a violating action, 1 for the last step of a focus thread and for each
    change of a focus semaphore, one more per dependency edge). An action depends on its
    thread's previous action (program order), a wait or read on every earlier change of the
    semaphore it looks at (what fed it), and a DMA completion on the start of its copy.
    Actions not in the dict are in nobody's past: other threads' chatter."""
    depends = _dependencies(system, states, actions)
    distance: dict[int, int] = {}
    queue: deque[int] = deque()

    def reach(j: int, d: int) -> None:
        if j not in distance:
            distance[j] = d
            queue.append(j)

    for j in focus.steps:
        reach(j, 0)
    last_of: dict[int, int] = {}
    for j, action in enumerate(actions):
        if isinstance(action, ThreadStep):
            last_of[action.thread] = j
    for t in sorted(focus.threads):
        if t in last_of:
            reach(last_of[t], 1)
    for j, (before, after) in enumerate(zip(states, states[1:])):
        if any(before.sems[s] != after.sems[s] for s in focus.semaphores):
            reach(j, 1)
    while queue:
        j = queue.popleft()
        for k in depends[j]:
            reach(k, distance[j] + 1)
    return distance


def _dependencies(system: System, states: list[State], actions: list[Action]) -> list[list[int]]:
    """For each action, the earlier actions it depends on (see `relevance`)."""
    depends: list[list[int]] = []
    previous: dict[int, int] = {}  # thread -> its last action so far
    changed_by: dict[int, list[int]] = {}  # semaphore -> actions that changed it so far
    pending: dict = {}  # event -> actions whose copy of it is still in flight
    for j, action in enumerate(actions):
        before, after = states[j], states[j + 1]
        deps: list[int] = []
        if isinstance(action, EventFires):
            starts = pending.get(action.event)
            if starts:
                deps.append(starts.pop(0))
        else:
            t = action.thread
            if t in previous:
                deps.append(previous[t])
            previous[t] = j
            instr = system.current(before, t)
            if after.pcs[t] != FAULTED and isinstance(instr, _READERS):
                deps.extend(changed_by.get(system.resolve(t, instr.sem, before), ()))
            added = list(after.events)
            for e in before.events:
                added.remove(e)
            for e in added:
                pending.setdefault(e, []).append(j)
        for s, (a, b) in enumerate(zip(before.sems, after.sems)):
            if a != b:
                changed_by.setdefault(s, []).append(j)
        depends.append(deps)
    return depends
