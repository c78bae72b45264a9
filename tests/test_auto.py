"""`--engine auto`: the explicit engine alone when it ends within its head start; otherwise
z3 beside it, the first conclusive answer taken, the other engine stopped, and the work of
both in the Result. The race itself is tested with stand-in engines that finish (or never
finish) on cue, so no test depends on how fast anything runs."""

from __future__ import annotations

import json
import threading

import pytest

from semcheck import cli
from semcheck.api import check_protocol
from semcheck.engines import auto
from semcheck.engines.budget import Budget, StopSignal
from semcheck.frontends import load
from semcheck.result import Result, Stats, Verdict
from semcheck.semantics import System
from tests.test_cli import model


def _ring(devices: int = 3):
    (protocol,) = load(model("ring_allgather"), devices)
    return protocol


def _result(system: System, engine: str, verdict: Verdict, states: int = 0, queries=None, exhausted=None) -> Result:
    from semcheck.engines.common import describing

    return Result(**describing(system.protocol), engine=engine, verdict=verdict,
                  stats=Stats(states=states, transitions=states, seconds=0.1, solver_queries=queries),
                  exhausted=exhausted)


def _until_stopped(engine: str, states: int = 0, queries=None):
    """An engine that never finishes on its own: it returns inconclusive once told to stop."""
    seen: dict = {}

    def run(system, budget, progress, **options):
        seen["budget"] = budget
        assert budget.stop is not None
        budget.stop._event.wait(30)
        seen["stopped"] = budget.stop.is_set()
        return _result(system, engine, Verdict.INCONCLUSIVE, states, queries, exhausted=budget.stop.reason or "timeout")

    return run, seen


def _at_once(engine: str, verdict: Verdict, states: int = 0, queries=None, after: threading.Event | None = None):
    def run(system, budget, progress, **options):
        if after is not None:
            after.wait(30)
        return _result(system, engine, verdict, states, queries)

    return run


@pytest.fixture
def no_head_start(monkeypatch):
    monkeypatch.setattr(auto, "HEAD_START", 0.0)


def test_z3_decides_when_the_search_cannot_finish_and_the_search_is_stopped(no_head_start):
    explicit, seen = _until_stopped("explicit", states=328_000)
    z3 = _at_once("z3", Verdict.SAFE, queries=2)
    result = auto.run(System(_ring()), Budget(), None, explicit=explicit, z3=z3)
    assert result.verdict is Verdict.SAFE and result.engine == "z3"
    assert seen["stopped"]
    # The check's stats count both engines' work: not 0 states after z3 decided.
    assert result.stats.states == 328_000 and result.stats.solver_queries == 2
    assert [(r.engine, r.verdict, r.decided) for r in result.runs] == [
        ("explicit", Verdict.INCONCLUSIVE, False), ("z3", Verdict.SAFE, True),
    ]
    assert result.runs[0].stopped == "engine auto: z3 decided first"
    assert result.notes[0].startswith("engine auto: z3 decided;") and "328,000 states" in result.notes[0]


def test_the_search_decides_and_z3_is_stopped(no_head_start):
    z3, seen = _until_stopped("z3", queries=5)
    started = threading.Event()

    def explicit(system, budget, progress, **options):
        started.set()
        return _result(system, "explicit", Verdict.VIOLATION, states=40)

    result = auto.run(System(_ring()), Budget(), None, explicit=explicit, z3=z3)
    assert result.verdict is Verdict.VIOLATION and result.engine == "explicit"
    assert seen["stopped"] and seen["budget"].stop.reason == "engine auto: the explicit engine decided first"
    assert [(r.engine, r.decided) for r in result.runs] == [("explicit", True), ("z3", False)]
    assert result.stats.states == 40 and result.stats.solver_queries == 5


def test_an_inconclusive_search_waits_for_z3(no_head_start):
    """The explicit engine ran out of its states; z3, still running, then decides."""
    search_ended = threading.Event()

    def explicit(system, budget, progress, **options):
        try:
            return _result(system, "explicit", Verdict.INCONCLUSIVE, states=1000,
                           exhausted="state budget of 1,000 states ran out")
        finally:
            search_ended.set()

    z3 = _at_once("z3", Verdict.VIOLATION, queries=3, after=search_ended)
    result = auto.run(System(_ring()), Budget(), None, explicit=explicit, z3=z3)
    assert (result.verdict, result.engine) == (Verdict.VIOLATION, "z3")
    assert "ended without a verdict (state budget of 1,000 states ran out)" in result.notes[0]


def test_a_search_that_ends_within_its_head_start_runs_alone(monkeypatch):
    monkeypatch.setattr(auto, "HEAD_START", 30.0)
    calls = []

    def z3(system, budget, progress, **options):
        calls.append("z3")
        return _result(system, "z3", Verdict.SAFE)

    explicit = _at_once("explicit", Verdict.SAFE, states=7)
    result = auto.run(System(_ring()), Budget(), None, explicit=explicit, z3=z3)
    assert (result.engine, result.stats.states, result.runs, calls) == ("explicit", 7, [], [])


def test_the_real_engines_side_by_side_agree_with_each_alone(no_head_start):
    """With no head start both engines really run; whichever decides, the verdict and the
    kinds found are the ones each engine finds alone, and both runs are reported."""
    for name in ("ring_allgather", "ring_allgather_missing_signal"):
        (protocol,) = load(model(name), 4)
        alone = check_protocol(protocol, engine="explicit")
        both = check_protocol(protocol, engine="auto")
        assert both.verdict == alone.verdict
        assert {v.kind for v in both.errors} == {v.kind for v in alone.errors}
        assert both.engine in ("explicit", "z3") and [r.engine for r in both.runs] == ["explicit", "z3"]
        assert sum(r.decided for r in both.runs) == 1


def test_json_lists_every_engine_that_ran(capsys, monkeypatch):
    monkeypatch.setattr(auto, "HEAD_START", 0.0)
    code = cli.main(["verify", model("ring_allgather"), "--devices", "4", "--format", "json", "-q"])
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert code == 0
    engines = result["stats"]["engines"]
    assert [e["engine"] for e in engines] == ["explicit", "z3"]
    assert [e["decided"] for e in engines].count(True) == 1
    decided = next(e for e in engines if e["decided"])
    assert decided["engine"] == result["engine"] and decided["verdict"] == "safe"
    assert result["stats"]["states"] == engines[0]["states"]


def test_a_stop_signal_ends_the_explicit_search_at_its_first_check():
    from semcheck.engines.explicit import search as explicit

    stop = StopSignal()
    stop.stop("told to stop")
    found = explicit.explore(System(_ring()), budget=Budget(stop=stop))
    assert found.exhausted == "told to stop" and found.states == 0


def test_a_stop_signal_ends_z3_before_it_encodes():
    from semcheck.engines.z3 import engine as smt

    stop = StopSignal()
    stop.stop("told to stop")
    found = smt.explore(System(_ring()), budget=Budget(stop=stop))
    assert found.exhausted == "told to stop" and found.solver_queries == 0


def test_z3_joins_once_the_search_has_stored_enough_states(monkeypatch):
    """The head start is counted in states, so whether z3 runs does not depend on the load."""
    from semcheck.engines.budget import BudgetExceeded, Monitor

    monkeypatch.setattr(auto, "HEAD_START", 600.0)
    monkeypatch.setattr(auto, "HEAD_START_STATES", 100)

    def explicit(system, budget, progress, **options):
        monitor = Monitor(budget)
        states = 0
        try:
            while True:  # a search that never ends (the state budget would end it at 2 M)
                states += 1
                monitor.tick(states, states)
        except BudgetExceeded as e:
            return _result(system, "explicit", Verdict.INCONCLUSIVE, states, exhausted=e.reason)

    result = auto.run(System(_ring()), Budget(), None, explicit=explicit, z3=_at_once("z3", Verdict.SAFE, queries=1))
    assert (result.verdict, result.engine) == (Verdict.SAFE, "z3")
    assert result.runs[0].stopped == "engine auto: z3 decided first"
    assert 100 <= result.runs[0].stats.states < Budget().max_states


# --- the counting probe on large protocols ---------------------------------------------------


def test_a_large_protocol_that_counting_decides_never_reaches_the_search(monkeypatch):
    """Above the probe's size, z3 with counting only answers first; the search never runs."""
    (protocol,) = load(model("ring_allgather"), 4)
    monkeypatch.setattr(auto, "PROBE_INSTRUCTIONS", range(1, 10**6))
    result = check_protocol(protocol, engine="auto")
    assert result.verdict is Verdict.SAFE and result.engine == "z3"
    assert result.stats.states == 0 and result.runs == []
    assert any("counting relaxation" in note and "answered every question" in note for note in result.notes)


def test_the_probe_leaves_small_protocols_to_the_search():
    (protocol,) = load(model("ring_allgather"), 4)
    assert auto.instruction_count(System(protocol)) not in auto.PROBE_INSTRUCTIONS
    assert check_protocol(protocol, engine="auto").engine == "explicit"


@pytest.mark.parametrize("name", [
    "ring_allgather", "ring_allgather_missing_signal", "ring_allgather_shared_recv", "ring_recv_before_send",
    "circular_wait", "dma_wait_mismatch", "double_buffer", "poll_flag", "poll_flag_never_set", "nondec_poll_leak",
])
def test_with_the_probe_on_every_check_auto_finds_what_the_search_finds(monkeypatch, name):
    """A probe that decides reports what the search reports; one that cannot hands on."""
    (protocol,) = load(model(name), 3)
    by_search = check_protocol(protocol, engine="explicit")
    monkeypatch.setattr(auto, "PROBE_INSTRUCTIONS", range(1, 10**6))
    probed = check_protocol(protocol, engine="auto")
    assert probed.verdict is by_search.verdict
    assert {v.kind for v in probed.errors} == {v.kind for v in by_search.errors}


def _probe_found_a_violation(calls: list):
    """A z3 stand-in whose counting probe found a violation and then stopped at a question
    counting cannot answer; a second (full) z3 run would be recorded in `calls`."""
    def run(system, budget, progress, **options):
        calls.append(options.get("counting_only", False))
        return _result(system, "z3", Verdict.VIOLATION, queries=2,
                       exhausted="counting alone does not answer the question about hazards")

    return run


def test_a_probe_violation_stands_once_the_search_is_past_its_head_start(monkeypatch):
    """The probe's violation is a verdict: the search gets its head start to report every
    finding, then is stopped, and z3 is not run (encoded) a second time."""
    monkeypatch.setattr(auto, "PROBE_INSTRUCTIONS", range(1, 10**6))
    monkeypatch.setattr(auto, "HEAD_START", 0.0)
    explicit, seen = _until_stopped("explicit", states=7)
    calls: list = []
    result = auto.run(System(_ring()), Budget(), None, explicit=explicit, z3=_probe_found_a_violation(calls))
    assert (result.verdict, result.engine) == (Verdict.VIOLATION, "z3")
    assert calls == [True]  # the probe only
    assert seen["stopped"] and result.runs[0].stopped == "engine auto: z3 decided first"
    assert result.exhausted  # not every question was answered: said, never hidden
    assert any("counting probe" in n and "had found a violation" in n for n in result.notes)


def test_a_search_that_ends_within_its_head_start_overrides_a_probe_violation(monkeypatch):
    """A search that ends reports every finding; the probe's partial Result is dropped."""
    monkeypatch.setattr(auto, "PROBE_INSTRUCTIONS", range(1, 10**6))
    calls: list = []
    result = auto.run(System(_ring()), Budget(), None, explicit=_at_once("explicit", Verdict.VIOLATION, states=5),
                      z3=_probe_found_a_violation(calls))
    assert (result.verdict, result.engine, result.exhausted) == (Verdict.VIOLATION, "explicit", None)
    assert calls == [True] and result.runs == []

