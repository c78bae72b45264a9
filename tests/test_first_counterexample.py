"""A check stops at its first counterexample by default; a path that no breadth-first search
found is cut down to what its violation depends on; a violation whose path passes through
another violation is reported as its consequence, after its root cause."""

from __future__ import annotations

import json
import os

from semcheck import cli
from semcheck.semantics import trace as tracing
from semcheck.api import check_protocol
from semcheck.engines import causes
from semcheck.engines.common import Exploration, to_result
from semcheck.engines.explicit import search
from semcheck.engines import simulate
from semcheck.frontends import load, model_file
from semcheck.semantics.properties import Kind
from semcheck.report import json as json_report, sarif, text
from semcheck.semantics import System
from semcheck.engines.options import ExplicitOptions, SimulateOptions
from tests.engine_check import check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")
# The producer refills slot 0 while the first copy into it is still landing: its copy start
# races (line 49); the consumer's wait, satisfied by the first copy, lets its read race with
# the second (line 56), and a wait that sees both land overruns the phase (line 55).
PIPELINE = os.path.join(ROOT, "examples", "gpu", "warp_producer_consumer_no_release.py")


def _model(name: str, devices: int):
    return model_file.load(os.path.join(MODELS, name + ".py"), devices)


def test_each_engine_stops_at_its_first_error():
    every = check(_pipeline(), "explicit", exhaustive=True)
    first = check(_pipeline(), "explicit")
    assert first.verdict is every.verdict and first.first_only and not every.first_only
    assert len(first.errors) == 1 and len(every.errors) == 3
    assert (first.stats.states, every.stats.states) == (8, 102)
    # breadth-first: the first is the shallowest, with the same shortest path
    assert [s.text for s in first.errors[0].trace] == [s.text for s in every.errors[0].trace]
    protocol = _model("ring_allgather_shared_recv", 8)
    walked = check(protocol, "simulate", runs=500, seed=1)
    assert len(walked.errors) == 1 and walked.stats.states < check(
        protocol, "simulate", runs=500, seed=1, exhaustive=True).stats.states


def test_simulate_says_it_walked_at_random_and_which_walk_found_it():
    result = check(_model("circular_wait", 4), "simulate", runs=5, seed=3)
    [deadlock] = result.errors
    assert deadlock.found_by == ("simulate",)
    assert any(n.startswith("simulate: random schedules seeded 3; deadlock") and "first in schedule 1" in n
               for n in result.notes)


def test_a_random_walk_is_cut_down_to_what_its_race_depends_on():
    system = System(_model("ring_allgather_shared_recv", 4))
    found = simulate.explore(system, SimulateOptions(runs=500, seed=1, stop_at_first=True))
    [(finding, initial, walk)] = found.findings.values()
    short = causes.shorten(system, finding, initial, walk)
    assert len(short) < len(walk)
    states = tracing.replay(system, initial, short)
    from semcheck.semantics.properties import hazard_findings

    assert finding.key in {f.key for f in hazard_findings(system, states[-1], states[-2].hazards)}
    result = to_result(found, "simulate", first_only=True, shorten_paths=True)
    assert len(result.errors[0].trace) == len(short)


def _pipeline():
    (protocol,) = load(PIPELINE, 2)
    return protocol


def test_consequences_are_linked_to_their_root_cause_and_reported_after_it():
    result = check_protocol(_pipeline(), engine="explicit", exhaustive=True)
    assert [(v.kind, v.location.line) for v in result.errors] == [
        ("data_race", 49), ("data_race", 56), ("barrier_phase_overrun", 55)]
    cause, race, overrun = result.errors
    assert cause.caused_by is None and race.caused_by is cause and overrun.caused_by is cause
    report = json.loads(json_report.render([result]))["results"][0]["violations"]
    assert "caused_by" not in report[0]
    assert report[1]["caused_by"] == {"index": 0, "kind": "data_race",
                                      "location": json_report.location(cause.location)}
    lines = text.render([result])
    # the two races are one problem, the consumed barrier nobody waits on; the overrun follows from it
    assert "error: no wait on `consumed` exists" in lines and "found as: data_race at lines 49, 56" in lines
    assert lines.count("consequence of the data_race at ") == 1 and "warp_producer_consumer_no_release.py:49 above" in lines


def test_a_first_counterexample_that_is_a_consequence_is_reported_with_its_cause():
    """The read race found first (as a random walk or a solver may find it) brings the copy
    start it depends on, found by replaying its path through the semantics."""
    system = System(_pipeline())
    every = search.explore(system, ExplicitOptions(stop_at_first=False))
    [(finding, initial, path)] = [entry for key, entry in every.findings.items()
                                  if entry[0].kind is Kind.DATA_RACE and entry[0].loc.line == 56]
    only = Exploration(system)
    only.add(finding, initial, path)
    result = to_result(only, "z3", first_only=True, shorten_paths=True)
    assert [(v.kind, v.location.line, v.found_by) for v in result.errors] == [
        ("data_race", 49, ("z3",)), ("data_race", 56, ("z3",))]
    assert result.errors[1].caused_by is result.errors[0] and result.first_only


def test_the_default_cli_report_is_the_first_counterexample(capsys):
    code = cli.main(["verify", PIPELINE, "--devices", "2", "-q"])
    out = capsys.readouterr().out
    assert code == 1
    assert "1 violation: data_race (the first counterexample found; --exhaustive reports every finding)" in out
    code = cli.main(["verify", PIPELINE, "--devices", "2", "-q", "--exhaustive"])
    out = capsys.readouterr().out
    assert code == 1 and "3 violations of 2 problems: barrier_phase_overrun, data_race" in out \
        and "first counterexample" not in out


def test_a_copy_started_into_a_slot_still_being_read_is_the_root_cause_of_the_read_race():
    """The TPU ring without capacity: the left neighbour's next copy into the landing slot
    starts while the slot is still being read (line of `copy.start()`); the read of the
    slot that then races with that copy follows from it."""
    path = os.path.join(ROOT, "examples", "tpu", "allgather_ring_overwrite.py")
    (protocol,) = load(path, 4)
    result = check_protocol(protocol, engine="explicit", exhaustive=True)
    lines = open(path).read().splitlines()
    start_line = 1 + next(i for i, text in enumerate(lines) if "copy.start()  # <- data_race" in text)
    read_line = 1 + next(i for i, text in enumerate(lines) if "o_ref[origin] = landing[...]" in text)
    start, read = result.errors
    assert (start.location.line, read.location.line) == (start_line, read_line)
    assert read.caused_by is start and start.caused_by is None
    [_, consequence] = json.loads(sarif.render([result]))["runs"][0]["results"]
    assert consequence["properties"]["causedBy"]["line"] == start_line
