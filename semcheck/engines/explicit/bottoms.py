"""The bottom strongly connected components of the explicit search's explored graph: where
a run that never ends settles. Shared by the non-progress check (`endless.py`, the hangs it
reports) and the reduction's proviso against ignoring (`proviso.py`, the cycles it must
not leave an actor standing in).

A bottom component with a cycle reaches no state that ends, so both look only at the
states that cannot reach one (a reverse search from the ends, usually a small part of the
graph) and let networkx (`condensation`) find the components there: every state left has
an edge and all its successors are left too, so the components no edge leaves in that part
are exactly the bottom components of the whole graph that have an edge inside.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

from semcheck.semantics import Action

if TYPE_CHECKING:
    import networkx as nx


def stuck_graph(edges: list[list[tuple[int, Action]]], ends: Iterable[int] = ()) -> "nx.DiGraph | None":
    """The explored graph (`edges[i]`: state i's (successor, action) pairs; an edge's
    action is its `action` attribute) on the states from which no state of `ends` and no
    state without edges is reachable; None where there is none (networkx is then not
    imported: most kernels end)."""
    can_end = set(ends)
    can_end.update(i for i, out in enumerate(edges) if not out)
    if len(can_end) == len(edges):
        return None
    reverse: list[list[int]] = [[] for _ in edges]
    for i, out in enumerate(edges):
        for j, _action in out:
            reverse[j].append(i)
    work = deque(can_end)
    while work:
        j = work.popleft()
        for i in reverse[j]:
            if i not in can_end:
                can_end.add(i)
                work.append(i)
    if len(can_end) == len(edges):
        return None
    import networkx as nx  # only when some state cannot end: not at start-up

    graph = nx.DiGraph()
    for i, out in enumerate(edges):
        if i not in can_end:
            graph.add_node(i)
            for j, action in out:
                graph.add_edge(i, j, action=action)  # j cannot end either
    return graph


def bottom_components(graph: "nx.DiGraph") -> list[set[int]]:
    """The strongly connected components of a `stuck_graph` that no edge leaves, by their
    first state in the search's order (each has a cycle: every state of it has an edge)."""
    import networkx as nx

    condensed = nx.condensation(graph)
    sinks = [condensed.nodes[c]["members"] for c in condensed.nodes if condensed.out_degree(c) == 0]
    return sorted(sinks, key=min)
