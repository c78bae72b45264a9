"""The bottom strongly connected components of an explored graph (`engines/explicit/bottoms.py`),
the one helper the non-progress check and the proviso against ignoring share."""

from semcheck.engines.explicit import bottoms, endless, proviso
from semcheck.semantics import ThreadStep


def _edges(n: int, arcs: list[tuple[int, int]]):
    edges: list[list] = [[] for _ in range(n)]
    for i, j in arcs:
        edges[i].append((j, ThreadStep(i % 3)))
    return edges


def test_bottom_components_are_the_cycles_no_edge_leaves_and_no_end_reaches():
    """0 -> 1 <-> 2 (a bottom cycle), 0 -> 3 -> 4 (4 ends), 3 <-> 5 (a cycle that can leave
    to the end), 6 -> 6 (a self-loop: a component of one state), 7 -> 8 <-> 9 with 9 named an
    end (a state whose successors are not all known): only {1, 2} and {6} are bottom."""
    edges = _edges(10, [(0, 1), (1, 2), (2, 1), (0, 3), (3, 4), (3, 5), (5, 3), (6, 6),
                        (7, 8), (8, 9), (9, 8)])
    graph = bottoms.stuck_graph(edges, ends={9})
    assert graph is not None
    assert sorted(graph.nodes) == [1, 2, 6]
    assert bottoms.bottom_components(graph) == [{1, 2}, {6}]
    assert graph.edges[6, 6]["action"] == ThreadStep(0)


def test_a_graph_whose_every_state_can_end_has_no_bottom_cycle_and_needs_no_networkx():
    edges = _edges(4, [(0, 1), (1, 0), (1, 2), (0, 3)])
    assert bottoms.stuck_graph(edges) is None


def test_a_spin_longer_than_pythons_stack_is_one_component():
    """A ring of 50,000 states (a spin's cycle can be deeper than Python's recursion limit)."""
    n = 50_000
    edges = _edges(n + 1, [(n, 0)] + [(i, (i + 1) % n) for i in range(n)])
    graph = bottoms.stuck_graph(edges)
    assert graph is not None
    assert [len(c) for c in bottoms.bottom_components(graph)] == [n]


def test_the_proviso_and_the_non_progress_check_share_the_one_helper():
    """The proviso's hand-written Tarjan is gone: both read the components from `bottoms`."""
    assert proviso.bottom_components is endless.bottom_components is bottoms.bottom_components
    assert proviso.stuck_graph is endless.stuck_graph is bottoms.stuck_graph
