"""States from which no schedule ends: a thread spinning for ever (the explicit engine's
non-progress check).

A loop that polls (`semaphore_read` in a `while`) hangs the kernel without any wait being
blocked, so the stuck-state check never sees it. The explicit search folds repeated states,
so such a hang is a set of reachable states from which no end state (every thread finished,
blocked or faulted) can be reached. That is decided on the explored graph: the stubborn
sets keep an end state reachable from every explored state from which the full system can
reach one (the deadlock-preserving property holds from any state), and the edges that sleep
sets skip are added back for the check. Weak fairness needs no special treatment: from
these states no schedule at all ends, fair or not.

The report follows the search into a bottom strongly connected component of those states
(where the hang settles) and shows a lasso: a path in, then one turn of the cycle, starting
at the spinning thread's read. Each thread that turns in it at a backward jump gets a finding at that jump's line.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from semcheck import ir
from semcheck.engines.explicit.bottoms import bottom_components, stuck_graph
from semcheck.semantics.properties import Finding, spin_finding
from semcheck.semantics import Action, State, System, ThreadStep

if TYPE_CHECKING:
    import networkx as nx


def loops(system: System) -> bool:
    """Whether any thread has a backward jump (otherwise every schedule ends)."""
    return any(
        isinstance(instr, (ir.Branch, ir.Jump)) and instr.target <= pc
        for body in system.bodies
        for pc, instr in enumerate(body)
    )


class Visited(Protocol):
    """The search's visited states by position (a list, or the packed store)."""

    def __getitem__(self, position: int) -> State: ...


def findings(
    system: System,
    states: Visited,
    edges: list[list[tuple[int, Action]]],
    ends: set[int],
    path_to,
) -> list[tuple[Finding, State, list[Action]]]:
    """(finding, initial state, actions) for each hang found. `edges[i]` lists the explored
    (successor, action) pairs of state i; `ends` the states that end, or whose successors
    are not all known (no hang is reported on a guess); `path_to(i)` the search tree's
    (root, actions) path to state i."""
    graph = stuck_graph(edges, ends)
    if graph is None:
        return []
    found: list[tuple[Finding, State, list[Action]]] = []
    seen: set[tuple] = set()
    for members in bottom_components(graph):
        entry = min(members)  # the first one the breadth-first search reached
        cycle = [(states[i], action) for i, action in _cycle(graph, members, entry)]
        spinning = sorted({action.thread for _, action in cycle if isinstance(action, ThreadStep)})
        new = [f for t in spinning if (f := spin_finding(system, t, cycle)) is not None and f.key not in seen]
        if not new:
            continue
        root, prefix = path_to(entry)
        actions = [action for _, action in cycle]
        for finding in new:
            seen.add(finding.key)
            # Walk on to the finding's own line, so the turn shown starts where it reads.
            t = finding.thread
            assert t is not None, "an endless loop is some thread's"
            k = next(
                (n for n, (state, action) in enumerate(cycle)
                 if action == ThreadStep(t) and system.bodies[t][state.pcs[t]].loc == finding.loc),
                0,
            )
            lasso = prefix + actions[:k] + actions[k:] + actions[:k]
            found.append((replace(finding, loop_steps=len(cycle)), states[root], lasso))
    return found


def _cycle(graph: "nx.DiGraph", members: set[int], entry: int) -> list[tuple[int, Action]]:
    """The shortest walk from `entry` back to itself inside its component, as (state before,
    action) pairs."""
    parent: dict[int, tuple[int, Action]] = {}
    work = deque([entry])
    while work:
        i = work.popleft()
        for j in graph.successors(i):
            if j not in members:
                continue
            action = graph.edges[i, j]["action"]
            if j == entry:
                walk = [(i, action)]
                while i != entry:
                    i, action = parent[i]
                    walk.append((i, action))
                return walk[::-1]
            if j not in parent:
                parent[j] = (i, action)
                work.append(j)
    raise AssertionError("a bottom component of a graph without end states has a cycle")
