"""The explicit search's state store is exact: a state's tree unpacks to an equal state, and
two states get one key exactly when they are equal (`engines/explicit/store.py`), so the
search omits nothing and needs no collision probability stated. Checked against a plain
set (and, under symmetry, a plain dict of orbits) of the same states."""

from unittest import mock

import pytest
from hypothesis import HealthCheck

from semcheck.engines.explicit import store as store_module
from semcheck.engines.explicit import symmetry
from semcheck.engines.explicit.store import Fifo, SearchTree, StateStore
from semcheck.model import ProtocolBuilder
from semcheck.semantics import Counts, EventFires, System, ThreadStep
from tests.strategies import capacity_ring_protocols, control_flow_protocols, protocols, ring_protocols
from tests.test_scale_tables import reachable_states
from tests.test_symmetry import symmetric_protocols
from tests.tiers import example_counts, run_examples

ANY_PROTOCOL = protocols() | control_flow_protocols() | ring_protocols() | capacity_ring_protocols()


@pytest.mark.parametrize("examples", example_counts(fast=40, slow=300))
def test_every_state_unpacks_to_itself_and_roots_tell_states_apart(examples):
    run_examples(states_round_trip, ANY_PROTOCOL, examples=examples, suppress_health_check=[HealthCheck.too_slow])


def states_round_trip(protocol):
    system = System(protocol)
    store = StateStore(system)
    keys: dict[int, object] = {}
    plain: dict[object, int] = {}  # the same states in a plain dict: state -> position
    for state in [*reachable_states(system), *reachable_states(system, limit=50)]:  # each met again too
        key = store.pack(state)
        assert store.unpack(key) == state
        keys.setdefault(key, state)
        assert keys[key] == state  # one key, one state
        assert store.find(key) == plain.get(state)
        if state not in plain:
            position = plain[state] = store.add(key, state)
            assert store.find(key) == position and len(store) == len(plain)
            assert store[position] == state and store.holds(position, state, state, 0)
    assert len(set(keys.values())) == len(keys)
    assert [store[p] for p in range(len(store))] == list(plain)  # what `take` unpacks, in order


@pytest.mark.parametrize("examples", example_counts(fast=20, slow=100))
def test_what_pack_remembers_changes_no_key(examples):
    run_examples(keys_alike_remembering_one_part, ANY_PROTOCOL, examples=examples,
                 suppress_health_check=[HealthCheck.too_slow])


def keys_alike_remembering_one_part(protocol):
    """`pack` and `unpack` remember the parts met lately (`_RECENT` of each kind); with one
    of each remembered (nearly every part folded anew, the memory emptied at each new one),
    the same states get the same keys and unpack to the same states: new nodes are interned
    in the same order either way."""
    system = System(protocol)
    states = [*reachable_states(system), *reachable_states(system, limit=50)]  # each met again too
    remembering = StateStore(system)
    keys = [remembering.pack(state) for state in states]
    assert [remembering.unpack(key) for key in keys] == states
    with mock.patch.object(store_module, "_RECENT", 1):
        forgetting = StateStore(system)
        assert [forgetting.pack(state) for state in states] == keys
        assert [forgetting.unpack(key) for key in reversed(keys)] == states[::-1]
        assert len(forgetting._pairs) == len(remembering._pairs)


@pytest.mark.parametrize("examples", example_counts(fast=25, slow=200))
def test_under_symmetry_one_position_per_orbit_holding_the_state_reached(examples):
    # protocols made symmetric under rotation (random rings seldom are: then every image is 0)
    run_examples(orbits_match_a_plain_dict, symmetric_protocols(), examples=examples,
                 suppress_health_check=[HealthCheck.too_slow])


def orbits_match_a_plain_dict(protocol):
    """Each state looked up by its orbit's least image (as the search does where it
    branches): the store finds a position exactly when a plain dict of least images does,
    and gives back the state first stored there, not its key's."""
    system = System(protocol)
    group = symmetry.rotations(system)
    store = StateStore(system, group)
    plain: dict[object, tuple[int, object]] = {}  # least image -> (position, the state stored)
    for state in reachable_states(system):
        least, g = group.canonical(state) if group is not None else (state, 0)
        image = group.inverse(g) if group is not None else 0
        assert group is None or group.image(least, image) == state
        key = store.pack(least)
        known = plain.get(least)
        assert store.find(key) == (known[0] if known else None)
        if known is None:
            plain[least] = (store.add(key, state, image), state)
        else:
            position, stored = known
            assert store.holds(position, state, least, image) == (stored == state)
    for position, stored in plain.values():
        assert store[position] == stored and store.take(position) == stored


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


def test_a_state_stored_under_its_images_key_comes_back_as_reached():
    """Under symmetry a state is looked up by its orbit's least image (its key) and stored
    as the group element that maps the key's state to it: one byte, not a second tree."""
    system = _two_threads()
    group = symmetry.rotations(system)
    assert group is not None and group.order == 2
    store = StateStore(system, group)
    initial = system.initial_state(())
    states = [initial._replace(pcs=(k % 3, k // 3 % 3), regs=((k,), (k + 1,))) for k in range(40)]
    for k, state in enumerate(states):
        least, g = group.canonical(state)
        assert store.add(store.pack(least), state, group.inverse(g)) == k
    assert store._images is not None and store._images.typecode == "B"
    for k, state in enumerate(states):
        assert store.find(store.pack(group.canonical(state)[0])) == k
        assert store[k] == state and store.take(k) == state
        least, g = group.canonical(state)
        assert store.holds(k, state, least, group.inverse(g))
        swapped, (same, h) = group.image(state, 1), group.canonical(group.image(state, 1))
        assert same == least  # one orbit, one key
        assert store.holds(k, swapped, least, group.inverse(h)) == (swapped == state)


def test_actions_past_two_bytes_widen_the_record():
    tree = SearchTree(StateStore(_two_threads()))
    tree.add(-1, None, frozenset())
    tree.add(0, ThreadStep(40_000), frozenset())
    tree.add(1, ThreadStep(1), frozenset())
    assert [tree.via(i) for i in range(3)] == [None, ThreadStep(40_000), ThreadStep(1)]


def test_interned_sequences_number_each_distinct_one_once():
    from array import array
    from random import Random

    from semcheck.engines.explicit.store import _Sequences

    sequences, numbers, plain = _Sequences(), [], {(): 0}
    rng = Random(7)
    drawn = [tuple(sorted(rng.sample(range(-40, 40), rng.randrange(0, 4)))) for _ in range(3000)]
    for items in drawn:
        plain.setdefault(items, len(plain))
        numbers.append(sequences.intern(array("i", items)))
    assert numbers == [plain[items] for items in drawn] and len(sequences) == len(plain)
    assert all(tuple(sequences[number]) == items for items, number in plain.items())


def test_a_search_reports_its_fixed_tables_apart_from_what_grows_with_the_states():
    """`store_fixed_bytes` (the numbered completions) is part of `store_bytes`, and the rest
    is what the states' own tables hold (benchmarks/scale.py prints their ratio)."""
    from semcheck.engines.explicit import search
    from semcheck.engines.options import ExplicitOptions

    system = _two_threads()
    found = search.explore(system, ExplicitOptions(reduce=False))
    assert found.stored_states == found.states > 1
    assert found.store_fixed_bytes is not None and found.store_bytes is not None
    assert 0 < found.store_fixed_bytes < found.store_bytes


def test_the_visited_set_matches_a_dict_whatever_lookups_come_between_adds():
    """`add` reuses the empty slot the last `find` of the same key ended at (the search looks
    a key up just before adding it); another key added between them, into that very slot
    or growing the index, leaves every key where `find` finds it again."""
    from semcheck.engines.explicit.store import _FIRST_SLOTS, _Positions, _slot

    def slot(key: int) -> int:
        return _slot((key >> 64) ^ (key & (2**64 - 1)), _FIRST_SLOTS)

    first = 1 << 70
    second = next(k for k in range(first + 1, first + 10_000) if slot(k) == slot(first))
    index = _Positions()
    assert index.find(first) is None  # ends at the slot both keys hash to
    assert index.add(second) == 0  # and another key takes it
    assert index.add(first) == 1
    assert index.find(second) == 0 and index.find(first) == 1

    index, plain = _Positions(), {}
    for key in range(3, 1000, 3):  # across every growth: a miss, another key added, the key
        assert index.find(key) is None
        plain[key + 1] = index.add(key + 1)
        plain[key] = index.add(key)
        assert all(index.find(k) == p for k, p in plain.items() if k >= key - 30)
    assert all(index.find(k) == p for k, p in plain.items())
    assert [index.key(p) for p in range(len(index))] == list(plain)
