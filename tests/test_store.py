"""The explicit search's state store is exact: a state's tree unpacks to an equal state, and
two states get one root exactly when they are equal (`engines/explicit/store.py`), so the
search omits nothing and needs no collision probability stated."""

import pytest
from hypothesis import HealthCheck

from semcheck.engines.explicit.store import Fifo, SearchTree, StateStore
from semcheck.model import ProtocolBuilder
from semcheck.semantics import Counts, EventFires, System, ThreadStep
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


def test_inputs_are_leaves_of_their_own_and_every_value_comes_back():
    """Inputs are leaves beside the registers (not numbered with the faults: one input of
    64 values made 64 times the combinations there), big and negative ones included."""
    p = ProtocolBuilder("inputs", devices=2, backend="tpu")
    sem = p.semaphore("s")
    n = p.input("n", -5, 2**40)
    for d in range(2):
        p.thread(d).signal(sem, inc=n, device=d)
    system = System(p.build())
    store = StateStore(system)
    states = [system.initial_state((value,)) for value in (-5, 0, 7, 2**31, 2**40)]
    roots = [store.pack(state) for state in states]
    assert len(set(roots)) == len(states)
    assert [store.unpack(root) for root in roots] == states
    assert len(store._rest_values) == 1  # no faults, no hazards: one combination for all


def test_the_search_tree_gives_back_actions_and_sleep_sets():
    from semcheck.semantics import RECV, Event

    store = StateStore(_two_threads())
    tree = SearchTree(store)
    event = Event(RECV, 0, 3, 0, 4)
    asleep = frozenset({ThreadStep(1), EventFires(event)})
    tree.add(-1, None, frozenset())
    tree.add(0, ThreadStep(2), asleep)
    tree.add(1, EventFires(event), frozenset())
    assert [tree.via(i) for i in range(3)] == [None, ThreadStep(2), EventFires(event)]
    assert list(tree.parent) == [-1, 0, 1]
    assert tree.sleep(1) == asleep and tree.sleep(2) == frozenset()
    tree.set_sleep(1, frozenset())
    assert tree.sleep(1) == frozenset()


def test_sleep_sets_past_two_bytes_of_names_keep_theirs():
    tree = SearchTree(StateStore(_two_threads()))
    sets = [frozenset({ThreadStep(k)}) for k in range(70_000)]
    for k, sleep in enumerate(sets):
        tree.add(k - 1, ThreadStep(0), sleep)
    assert [tree.sleep(k) for k in (0, 65_534, 65_535, 65_536, 69_999)] == [sets[k] for k in (0, 65_534, 65_535, 65_536, 69_999)]
    tree.set_sleep(3, sets[69_999])
    assert tree.sleep(3) == sets[69_999]


def test_the_queue_is_first_in_first_out_across_its_compaction():
    queue = Fifo()
    for k in range(200_000):
        queue.append(k, k // 7)
    assert [queue.popleft() for _ in range(150_000)] == [(k, k // 7) for k in range(150_000)]
    queue.append(7, 1)
    assert len(queue) == 50_001
    assert [queue.popleft() for _ in range(50_001)] == [(k, k // 7) for k in range(150_000, 200_000)] + [(7, 1)]
    assert not queue


def test_roots_other_than_their_keys_are_kept_sparse_then_in_an_array():
    """Under symmetry a state is looked up by its orbit's least image (its key) and stored
    as reached (its root): a few such roots in a dict, then every root in an array."""
    system = _two_threads()
    store = StateStore(system)
    initial = system.initial_state(())
    states = [initial._replace(regs=((k,), (k + 1,))) for k in range(4000)]
    images = [s._replace(regs=(s.regs[1], s.regs[0])) for s in states]
    for k, (state, image) in enumerate(zip(states, images)):
        reached = image if k % 3 == 0 else state  # every third stored under another's key
        store.add(store.pack(state), reached, state)
        if k == 300:
            assert store._roots is None and len(store._other_roots) == 101  # sparse while few
    assert store._roots is not None and not store._other_roots
    for k, (state, image) in enumerate(zip(states, images)):
        assert store.find(store.pack(state)) == k
        assert store[k] == (image if k % 3 == 0 else state)
        assert store.holds(k, store[k]) and not store.holds(k, image if k % 3 else state)
