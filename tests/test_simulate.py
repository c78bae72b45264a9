"""The simulate engine: reproducible random schedules that never claim "safe"."""

import os

from tests.engine_check import check
from semcheck.frontends import model_file

MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")


def load(name, devices=4):
    return model_file.load(os.path.join(MODELS, name + ".py"), devices)


def test_finds_what_every_schedule_has():
    for name, kind in [("circular_wait", "deadlock"), ("ring_allgather_missing_signal", "unsatisfied_wait"),
                       ("remote_out_of_range", "invalid_device_id")]:
        result = check(load(name), "simulate", runs=5)
        assert result.verdict.value == "violation" and [v.kind for v in result.errors] == [kind], name
        assert result.engine == "simulate"


def test_nothing_found_is_inconclusive_not_safe():
    result = check(load("ring_allgather"), "simulate", runs=10)
    assert result.verdict.value == "inconclusive"
    assert "not a proof" in result.notes[-1]


def test_same_seed_same_schedule():
    a = check(load("ring_allgather_shared_recv", 8), "simulate", runs=30, seed=7)
    b = check(load("ring_allgather_shared_recv", 8), "simulate", runs=30, seed=7)
    assert [s.text for v in a.errors for s in v.trace] == [s.text for v in b.errors for s in v.trace]
    assert a.stats.transitions == b.stats.transitions


def test_its_counterexamples_replay_through_the_semantics():
    # A rare race: the copy must stay in flight while a later one lands; 500 runs find it.
    result = check(load("ring_allgather_shared_recv", 4), "simulate", runs=500, seed=1)
    [race] = result.errors
    assert race.kind == "data_race" and race.trace[-1].location == race.location
    # the trace was rebuilt by replaying the schedule through the semantics
    assert [s.index for s in race.trace] == list(range(1, len(race.trace) + 1))
