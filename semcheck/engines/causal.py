"""Shorten a path to the actions one of its actions depends on (its causal past).

A solver's execution may contain steps that have nothing to do with the violation it shows.
The causal past of an action keeps: its thread's earlier steps; for every kept wait or read
of a semaphore, every earlier change to that semaphore (so the kept wait sees the same
count, and the kept read the same value); for every kept DMA completion, the start that
scheduled it. Every kept step then sees exactly what it saw in the full path, so the
shorter path replays to the same action with the same outcome.
"""

from __future__ import annotations

from semcheck import ir
from semcheck.semantics import FAULTED, Action, State, System

_READERS = (ir.Wait, ir.DmaWait, ir.Read)


def causal_past(system: System, states: list[State], actions: list[Action], last: int) -> list[Action]:
    """The sub-sequence of `actions[: last + 1]` that `actions[last]` depends on; `states`
    are the states along `actions` (as `trace.replay` returns them)."""
    reads: list[int | None] = []
    changes: list[set[int]] = []
    start_of: dict[int, int] = {}  # completion index -> index of the start that scheduled it
    pending: dict = {}  # event -> indices of starts whose copy of it is still in flight
    for j, action in enumerate(actions[: last + 1]):
        before, after = states[j], states[j + 1]
        changes.append({s for s, (a, b) in enumerate(zip(before.sems, after.sems)) if a != b})
        reads.append(None)
        kind, what = action
        if kind == "e":
            start_of[j] = pending[what].pop(0)
            continue
        instr = system.current(before, what)
        if after.pcs[what] != FAULTED and isinstance(instr, _READERS):
            reads[j] = system.resolve(what, instr.sem, before)
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
        kind, what = actions[j]
        wanted = (
            j == last
            or (kind == "t" and what in threads)
            or bool(changes[j] & semaphores)
            or j in starts
        )
        if not wanted:
            continue
        keep.append(j)
        if kind == "t":
            threads.add(what)
        else:
            starts.add(start_of[j])
        if reads[j] is not None:
            semaphores.add(reads[j])
    return [actions[j] for j in reversed(keep)]
