"""Every shipped model gets its documented verdict, with exact state counts for small
instances (a changed count is a changed semantics)."""

import glob
import os

import pytest

from semcheck.engines.explicit import search as explicit
from semcheck.engines.common import to_result
from semcheck.frontends import model_file
from semcheck.semantics import System
from semcheck.engines.options import ExplicitOptions
from tests.tpu_support import expectation

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")

# (model, devices) -> (reduced states, reduced transitions, full states, full transitions)
STATE_COUNTS = {
    ("circular_wait", 2): (1, 0, 1, 0),
    ("circular_wait", 3): (1, 0, 1, 0),
    ("dma_wait_mismatch", 2): (9, 8, 49, 112),  # full: 7 states per independent device, 7**2
    ("dma_wait_mismatch", 3): (13, 12, 343, 1176),  # 7**3
    # reads of a slot order against copies into it, except reads behind a wait that only
    # the reader's partner can satisfy, counted (Independence.cut)
    ("double_buffer", 2): (32, 31, 137, 263),
    ("double_buffer", 3): (32, 31, 137, 263),  # device 2 has no partner and idles
    ("nondec_poll", 2): (4, 3, 4, 3),
    ("nondec_poll", 3): (6, 5, 9, 11),  # full: 4 + 3 + 1 + 1 by poller position
    ("nondec_poll_leak", 2): (3, 2, 3, 2),
    ("nondec_poll_leak", 3): (5, 4, 8, 10),
    ("remote_out_of_range", 2): (4, 3, 4, 3),
    ("remote_out_of_range", 3): (6, 5, 6, 5),
    ("ring_allgather", 2): (17, 16, 85, 184),
    ("ring_allgather", 3): (40, 39, 3045, 10911),  # a copy start need not wait for reads behind the wait it feeds
    ("ring_allgather_shared_recv", 2): (17, 16, 85, 184),
    ("ring_allgather_shared_recv", 3): (140, 147, 6174, 22056),  # races recorded in states
    ("ring_allgather_missing_signal", 2): (9, 8, 13, 16),
    ("ring_allgather_missing_signal", 3): (21, 20, 137, 312),
}


def load(name, devices):
    return model_file.load(os.path.join(MODELS, name + ".py"), devices)


SHIPPED = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(MODELS, "*.py")))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_model_file_has_an_expectation(name):
    """Its `# semcheck: expect` comments: what the gate and test_model_verdict hold it to."""
    assert expectation(os.path.join(MODELS, name + ".py")).declarations


@pytest.mark.parametrize("devices", [2, 4, 8])
@pytest.mark.parametrize("name", SHIPPED)
def test_model_verdict(name, devices):
    result = to_result(explicit.explore(System(load(name, devices))), "explicit")
    errors, warnings = expectation(os.path.join(MODELS, name + ".py")).kinds_for(result)
    assert {v.kind for v in result.errors} == errors
    assert {v.kind for v in result.warnings} == warnings
    assert result.verdict.value == ("violation" if errors else "safe")
    for v in result.errors:
        assert os.path.basename(v.location.file) == name + ".py"  # points into the model


@pytest.mark.parametrize("name,devices", sorted(STATE_COUNTS))
def test_exact_state_counts(name, devices):
    protocol = load(name, devices)
    # every race of every schedule; the partial-order reduction alone (symmetry's own
    # counts are in tests/test_symmetry.py)
    exact = dict(silence_reported_races=False, symmetry=False)
    reduced = explicit.explore(System(protocol), ExplicitOptions(reduce=True, **exact))
    full = explicit.explore(System(protocol), ExplicitOptions(reduce=False, **exact))
    assert (reduced.states, reduced.transitions, full.states, full.transitions) == STATE_COUNTS[name, devices]
    assert set(reduced.findings) == set(full.findings)


@pytest.mark.parametrize("devices", [2, 4, 8, 16])
def test_ring_allgather_is_one_path(devices):
    """Semaphore operations of different devices all commute, so the reduced search is one
    path of 1 + N * (3 + 5 * (N - 1)) states (per device: two barrier signals, a barrier
    wait, and per step a start, two completions and two waits). A copy landing in a slot
    does not commute with the receiver's later read of that slot, but that read sits behind
    the receiver's wait for the copy, which only the copy can satisfy: neither the copy's
    start nor its completion needs the other order (`Independence.cut`, guard stops)."""
    reduced = explicit.explore(System(load("ring_allgather", devices)))
    assert reduced.states == 1 + devices * (3 + 5 * (devices - 1))
    assert reduced.transitions == reduced.states - 1


@pytest.mark.parametrize("devices", [4, 8, 16])
def test_a_reported_race_is_not_paid_for_again(devices):
    """With every device racing, recording every race would multiply the schedules; once
    the pair of lines is reported it is no longer watched, and the search stays small."""
    result = to_result(explicit.explore(System(load("ring_allgather_shared_recv", devices))), "explicit")
    [race] = result.errors
    assert race.kind == "data_race" and race.related == [race.location]  # the copy races with itself
    assert result.stats.states < 12 * devices * devices  # quadratic, like the race-free ring


def test_buggy_models_point_at_the_buggy_line():
    cases = {
        "ring_allgather_missing_signal": "t.wait(barrier, 2)",
        "circular_wait": "t.wait(token, 1)",
        "dma_wait_mismatch": "t.dma_wait(recv_sem",
        "remote_out_of_range": "t.signal(token, device=d + 1)",
        "nondec_poll_leak": ".signal(counter, device=0)",
    }
    for name, code in cases.items():
        result = to_result(explicit.explore(System(load(name, 4))), "explicit")
        loc = result.errors[0].location
        with open(loc.file) as f:
            assert code in f.read().splitlines()[loc.line - 1], name


def test_missing_signal_names_the_root_and_who_is_stuck_behind_it():
    result = to_result(explicit.explore(System(load("ring_allgather_missing_signal", 4))), "explicit")
    [v] = result.errors
    assert v.device == 3  # device 0's left neighbour never gets its second barrier signal
    assert "barrier on device 3 to reach 2; it holds 1" in v.message
    assert "Blocked behind" in v.message
    assert v.trace and v.trace[-1].index == len(v.trace)


def test_circular_wait_cycle_covers_every_device():
    result = to_result(explicit.explore(System(load("circular_wait", 4))), "explicit")
    [v] = result.errors
    assert sorted(v.blocked[i].device for i in v.cycle) == [0, 1, 2, 3]
    assert "device 0 -> device 1 -> device 2 -> device 3 -> device 0" in v.message


def test_a_long_cycle_is_told_in_a_screen_and_kept_whole_in_the_result():
    result = to_result(explicit.explore(System(load("circular_wait", 64))), "explicit")
    [v] = result.errors
    assert len(v.cycle) == 64  # what JSON and the graph read
    assert "device 0 -> device 1 -> device 2 -> (59 more) -> device 62 -> device 63 -> device 0" in v.message
    lines = v.message.splitlines()
    assert len(lines) == 7  # the chain, three waits, the 59 between them at one line, two waits
    assert lines[4].strip().startswith("59 more between them, from device 3 to device 61, each waiting at ")


def _wait_graph(n: int, edges):
    """A `_WaitGraph` of n waits with `edges` (wait -> a wait whose thread could add to it)."""
    from array import array

    from semcheck.semantics.properties import _WaitGraph

    first, targets = array("q", [0]), array("q")
    for i in range(n):
        targets.extend(j for a, j in edges if a == i)
        first.append(len(targets))
    return _WaitGraph(first, targets)


def test_the_cycle_told_is_a_cycle_of_its_component_even_where_it_holds_several():
    """The walk that names a deadlock's cycle follows successors inside the strongly
    connected component until it meets a node again: what it returns closes, every step is
    an edge, and it starts from the component's least node only when that node is on it."""
    from semcheck.semantics.properties import _cycle_within

    edges = [(0, 5), (5, 0), (0, 1), (1, 2), (2, 0), (3, 4), (4, 3), (2, 9)]
    graph = _wait_graph(10, edges)
    components = list(graph.components(lambda: None))
    assert sorted(sorted(c) for c in components) == [[0, 1, 2, 5], [3, 4]]
    for component in components:
        cycle = _cycle_within(graph, component)
        assert set(cycle) <= set(component) and len(set(cycle)) == len(cycle) >= 2
        assert all((a, b) in edges for a, b in zip(cycle, cycle[1:] + cycle[:1]))
    tail = _wait_graph(3, [(0, 1), (1, 2), (2, 1)])  # 0 leads into the cycle but is not on it
    assert _cycle_within(tail, [1, 2]) == [1, 2]


def test_the_wait_graph_finds_what_networkx_finds_on_random_graphs():
    """The stuck-state judgement's own graph (flat arrays, not networkx: 46 MB at 30,000
    blocked waits, now 14) against networkx on 300 random graphs: the same strongly
    connected components of more than one node, in the same order, and the same ancestors."""
    import random

    import networkx as nx

    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 12)
        edges = sorted({(rng.randrange(n), rng.randrange(n)) for _ in range(rng.randint(0, 2 * n))})
        edges = [(a, b) for a, b in edges if a != b]
        graph = _wait_graph(n, edges)
        theirs = nx.DiGraph()
        theirs.add_nodes_from(range(n))
        for i in range(n):  # edges in the order the judgement adds them
            theirs.add_edges_from((i, j) for a, j in edges if a == i)
        assert [set(c) for c in graph.components(lambda: None)] == [
            c for c in nx.strongly_connected_components(theirs) if len(c) > 1]
        group = rng.sample(range(n), rng.randint(1, n))
        assert graph.ancestors(group, lambda: None) == set().union(*(nx.ancestors(theirs, i) for i in group)) - set(group)
