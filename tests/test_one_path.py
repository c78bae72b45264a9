"""While the reduced graph is one path from the one initial state, the explicit search stores
no state (`engines/explicit/path.py`): it must find what the search that stores every state
finds, with the same paths, the same state and transition counts, and store fewer states."""

from unittest import mock

import pytest
from hypothesis import HealthCheck, assume

from semcheck.engines.budget import Budget
from semcheck.engines.explicit import search as explicit
from semcheck.semantics import System
from semcheck.engines.options import ExplicitOptions
from tests.strategies import capacity_ring_protocols, protocols, ring_protocols
from tests.test_models import load
from tests.tiers import example_counts, run_examples

ANY_PROTOCOL = protocols() | ring_protocols() | capacity_ring_protocols()
# a few random protocols reach 50k states and more: they are left out, not cut short
BUDGET = Budget(max_states=20_000)


def _no_path(system, ind, path, *_args):
    """In place of `_follow_path`: stop at the initial state, so it is stored and the search
    is breadth-first from it, storing every state (as it did before paths were followed)."""
    path.end, path.ready = path.initial, system.movable_threads(path.initial)
    return None


def _both(protocol, options=ExplicitOptions(), budget=None):
    followed = explicit.explore(System(protocol), options, budget=budget)
    with mock.patch.object(explicit, "_follow_path", _no_path):
        stored = explicit.explore(System(protocol), options, budget=budget)
    return followed, stored


def _same_search(followed, stored) -> None:
    assert (followed.states, followed.transitions, followed.ends) == (stored.states, stored.transitions, stored.ends)
    assert {key: actions for key, (_f, _i, actions) in followed.findings.items()} == \
        {key: actions for key, (_f, _i, actions) in stored.findings.items()}
    assert stored.stored_states == stored.states
    assert followed.stored_states is not None and followed.stored_states <= stored.stored_states


@pytest.mark.parametrize("examples", example_counts(fast=40, slow=300))
def test_following_the_one_path_finds_what_storing_every_state_finds(examples):
    def check(protocol):
        for options in (ExplicitOptions(), ExplicitOptions(silence_reported_races=False, symmetry=False)):
            followed, stored = _both(protocol, options, budget=BUDGET)
            assume(stored.exhausted is None and followed.exhausted is None)
            _same_search(followed, stored)

    run_examples(check, ANY_PROTOCOL, examples=examples,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.mark.parametrize("name", ["ring_allgather", "ring_allgather_missing_signal", "ring_allgather_shared_recv",
                                  "dma_wait_mismatch", "moe_dispatch_capacity", "poll_flag_never_set"])
def test_the_models_find_the_same_along_their_paths(name):
    followed, stored = _both(load(name, 4))
    _same_search(followed, stored)


@pytest.mark.parametrize("devices", [2, 8])
def test_the_ring_stores_no_state(devices):
    """The ring all-gather's reduced graph is one path: each of its 1 + N(3 + 5(N - 1))
    states is visited and none stored."""
    followed = explicit.explore(System(load("ring_allgather", devices)))
    assert followed.states == 1 + devices * (3 + 5 * (devices - 1))
    assert (followed.stored_states, followed.store_bytes) == (0, 0)
