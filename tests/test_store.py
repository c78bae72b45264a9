"""The explicit search's state store is exact: a state's tree unpacks to an equal state, and
two states get one root exactly when they are equal (`engines/explicit/store.py`), so the
search omits nothing and needs no collision probability stated."""

import pytest
from hypothesis import HealthCheck

from semcheck.engines.explicit.store import Fifo, SearchTree, StateStore
from semcheck.model import ProtocolBuilder
from semcheck.semantics import Counts, System
from tests.strategies import capacity_ring_protocols, control_flow_protocols, protocols, ring_protocols
from tests.test_scale_tables import reachable_states
from tests.tiers import example_counts, run_examples

ANY_PROTOCOL = protocols() | control_flow_protocols() | ring_protocols() | capacity_ring_protocols()


@pytest.mark.parametrize("examples", example_counts(fast=40, slow=300))
def test_every_state_unpacks_to_itself_and_roots_tell_states_apart(examples):
    run_examples(states_round_trip, ANY_PROTOCOL, examples=examples, suppress_health_check=[HealthCheck.too_slow])


def states_round_trip(protocol):
    system = System(protocol)
    store = StateStore(system)
    roots = {}
    for state in reachable_states(system):
        root = store.pack(state)
        assert store.unpack(root) == state
        roots.setdefault(root, state)
        assert roots[root] == state  # one root, one state
        if store.find(root) is None:
            position = store.add(root, state, state)
            assert store.find(root) == position
            assert store[position] == state and store.holds(position, state)
    assert len(set(roots.values())) == len(roots)


def _two_threads() -> System:
    p = ProtocolBuilder("big", devices=2, backend="tpu")
    sem = p.semaphore("s")
    for d in range(2):
        t = p.thread(d)
        t.read(sem, "r")
        t.signal(sem, device=d)
    return System(p.build())


def test_values_past_31_bits_negative_values_and_faulted_pcs_come_back():
    """Counts, registers and pcs outside the leaves' range are numbered on the side."""
    system = _two_threads()
    store = StateStore(system)
    initial = system.initial_state(())
    odd = initial._replace(pcs=(-1, 1), regs=((2**40,), (-3,)), sems=Counts(len(system.instances), ((0, -(2**33)), (1, 2**62))))
    assert store.unpack(store.pack(odd)) == odd
    assert store.pack(odd) != store.pack(initial)
    assert store.unpack(store.pack(initial)) == initial


def test_the_search_tree_gives_back_actions_and_sleep_sets():
    from semcheck.semantics import Event

    store = StateStore(_two_threads())
    tree = SearchTree(store)
    event = Event(1, 0, 3, 0, 4)
    asleep = frozenset({("t", 1), ("e", event)})
    tree.add(-1, None, 0, frozenset())
    tree.add(0, ("t", 2), 1, asleep)
    tree.add(1, ("e", event), 2, frozenset())
    assert [tree.via(i) for i in range(3)] == [None, ("t", 2), ("e", event)]
    assert list(tree.parent) == [-1, 0, 1] and list(tree.depth) == [0, 1, 2]
    assert tree.sleep(1) == asleep and tree.sleep(2) == frozenset()
    tree.set_sleep(1, frozenset())
    assert tree.sleep(1) == frozenset()


def test_the_queue_is_first_in_first_out_across_its_compaction():
    queue = Fifo()
    for k in range(200_000):
        queue.append(k)
    assert [queue.popleft() for _ in range(150_000)] == list(range(150_000))
    queue.append(7)
    assert len(queue) == 50_001
    assert [queue.popleft() for _ in range(50_001)] == list(range(150_000, 200_000)) + [7]
    assert not queue
