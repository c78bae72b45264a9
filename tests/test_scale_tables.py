"""The shortcuts behind the ring model at 64-256 devices give the answers of the plain
computations they replace, in every state of random protocols."""

from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semcheck.engines.explicit.independence import Independence
from semcheck.semantics import System
from tests.strategies import capacity_ring_protocols, protocols, ring_protocols
from tests.tiers import example_counts, run_examples

ANY_PROTOCOL = protocols() | ring_protocols() | capacity_ring_protocols()


def reachable_states(system: System, limit: int = 300):
    """Up to `limit` states reachable from the initial ones, breadth-first, unreduced."""
    seen, queue = set(), deque(system.iter_initial_states())
    while queue and len(seen) < limit:
        state = queue.popleft()
        if state in seen:
            continue
        seen.add(state)
        ready = system.movable_threads(state)
        for action in system.enabled(state, ready):
            queue.append(system.step(state, action))
    return seen


@pytest.mark.parametrize("examples", example_counts(fast=30, slow=120))
def test_pending_additions_match_the_pending_completions_on_the_semaphore(examples):
    """What the counting cut reads per semaphore: every distinct pending completion adding
    to it, with its multiplicity, exactly as `pending_on` finds them (so the index by
    semaphore neither misses nor invents a completion)."""
    run_examples(pending_additions_match_the_pending_completions, ANY_PROTOCOL, examples=examples,
                 suppress_health_check=[HealthCheck.too_slow])


def pending_additions_match_the_pending_completions(protocol):
    system = System(protocol)
    ind = Independence(system)
    for state in reachable_states(system):
        for sid in range(len(system.instances)):
            expected = sorted(
                (action, action.event.inc * state.events.count(action.event))
                for action, _x, _y in ind.pending_on(state.events, sid)
                if action.event.sem == sid and action.event.inc > 0
            )
            assert sorted(ind.pending_additions(state.events, sid)) == expected, (state, sid)


@pytest.mark.parametrize("examples", example_counts(fast=30, slow=120))
def test_resolved_semaphores_match_a_fresh_resolution(examples):
    """`_candidates` keeps constant references resolved per (ref, device, core): the kept
    answer is the one resolving it again gives, for every thread and instruction."""
    run_examples(resolved_semaphores_match_a_fresh_resolution, ANY_PROTOCOL, examples=examples,
                 suppress_health_check=[HealthCheck.too_slow])


def resolved_semaphores_match_a_fresh_resolution(protocol):
    from semcheck.semantics.instructions import sem_refs

    system = System(protocol)
    for t, body in enumerate(system.bodies):
        for instr in body:
            for ref in sem_refs(instr):
                assert system.candidates(t, ref) == system.resolve_all(system.threads[t], ref)


def test_copy_index_shares_entries_between_resources():
    """The copy index of a ring keeps one entry object per (side, issuer, starts): the
    N^2 resources of a ring of N devices point at shared entries, not copies of them."""
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", "ring_allgather.py")
    spec = importlib.util.spec_from_file_location("ring_allgather_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    system = System(module.model(8))
    ind = Independence(system)
    entries = [entry for r in range(system.resource_count) for entry in ind.copies.copies_on(r)]
    distinct = {id(entry) for entry in entries}
    assert len(distinct) == len(set(entries)) < len(entries)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ANY_PROTOCOL)
def test_protocols_survive_pickling(protocol):
    """IR classes pickle through a field tuple kept per class (`ir._fast_pickling`): what
    comes back equals what went in, down to each instruction's class."""
    import pickle

    back = pickle.loads(pickle.dumps(protocol, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == protocol
    assert [type(i) for t in back.threads for i in t.body] == [type(i) for t in protocol.threads for i in t.body]


@st.composite
def region_keys(draw):
    """Regions of one declaration as cells key them ((starts), (sizes)): mostly of one rank,
    sometimes another (whose overlap cannot be told), empty ones, whole ones."""
    rank = draw(st.integers(0, 3))

    def key():
        r = rank if draw(st.integers(0, 9)) else draw(st.integers(0, 3))
        starts = tuple(draw(st.integers(0, 6)) for _ in range(r))
        sizes = tuple(draw(st.integers(0, 4)) for _ in range(r))
        return starts, sizes

    return [key() for _ in range(draw(st.integers(0, 12)))]


def test_the_overlap_sweep_finds_every_overlap_that_comparing_every_pair_finds():
    """`cells.overlapping_keys` sweeps one dimension (the one with most distinct starts)
    instead of comparing every two regions: the same answer as the comparison of all pairs,
    regions of another rank included (which the sweep along dim 0 it replaces missed)."""
    from semcheck.semantics.cells import _keys_overlap, overlapping_keys

    @settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(region_keys())
    def check(keys):
        expected = [tuple(j for j in range(len(keys)) if j == k or _keys_overlap(keys[k], keys[j]))
                    for k in range(len(keys))]
        assert overlapping_keys(keys) == expected

    check()
    # Tiles that all span the rows of an output: told apart by their columns.
    tiles = [((0, 64 * c), (1024, 64)) for c in range(16)]
    assert overlapping_keys(tiles) == [(k,) for k in range(16)]


@st.composite
def views_of_positions(draw):
    """A shape, and an NDIndexer inside it of slices (strided or not, empty or not) and scalars."""
    from jax._src.state import indexing

    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    indices = []
    for extent in shape:
        if draw(st.booleans()):
            indices.append(draw(st.integers(0, extent - 1)))
            continue
        stride = draw(st.integers(1, 3))
        start = draw(st.integers(0, extent - 1))
        size = draw(st.integers(0, (extent - 1 - start) // stride + 1))
        indices.append(indexing.Slice(start, size, stride))
    return shape, indexing.NDIndexer.from_indices_shape(tuple(indices), shape)


def test_a_view_of_slices_and_scalars_selects_what_jaxs_discharge_selects():
    """`memory._positions` takes a window of slices and scalars as a NumPy basic index rather
    than through JAX's discharge (`transform_array`): the same positions, in the same shape."""
    import jax
    import numpy as np
    from jax._src.state import discharge

    from semcheck.lower.memory import _basic_window

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(views_of_positions())
    def check(case):
        shape, indexer = case
        positions = np.arange(int(np.prod(shape))).reshape(shape)
        window = _basic_window(indexer)
        assert window is not None
        try:
            with jax.ensure_compile_time_eval():
                expected = np.asarray(discharge.transform_array(positions, [indexer]))
        except TypeError:  # JAX 0.10.2's lax.slice refuses an empty strided window
            assert positions[window].size == 0
            return
        assert positions[window].shape == expected.shape and (positions[window] == expected).all()

    check()
