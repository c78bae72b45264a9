"""A primitive called inside a helper of the user's (a wrapper around a copy) is reported at
the helper's line *and* at the kernel lines that called it (`ir.Loc.chain`), in every
format: the text report, JSON, SARIF (related locations and the schedule's stack frames)
and the graph. Checked on the example pair forward_through_helper{,_early}.py, whose two
copies start on one line inside `send`."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from semcheck import ir
from semcheck.report import findings, graph, sarif
from semcheck.report import json as json_report
from semcheck.report.text import render_violation
from tests import sarif_schema
from tests.tpu_support import EXAMPLES, results

EARLY = os.path.join(EXAMPLES, "forward_through_helper_early.py")
SAFE = os.path.join(EXAMPLES, "forward_through_helper.py")


def _line_of(path: str, text: str) -> int:
    with open(path, encoding="utf-8") as f:
        [number] = [n for n, line in enumerate(f, start=1) if text in line]
    return number


def _race(devices: int = 2):
    [result] = results(EARLY, devices)
    [race] = [v for v in result.violations if v.kind == "data_race"]
    return result, race


@pytest.mark.parametrize("devices", [2, 4])
def test_the_race_names_the_helper_line_and_both_calls_of_it(devices):
    result, race = _race(devices)
    helper = _line_of(EARLY, "copy.start()")
    first = _line_of(EARLY, "first = send(")
    forward = _line_of(EARLY, "second = send(")
    assert race.location.line == helper and os.path.samefile(race.location.file, EARLY)
    [call] = race.location.chain
    assert (call.line, call.function) in {(first, "forward_kernel"), (forward, "forward_kernel")}
    [other] = race.related
    assert other.line == helper
    # the two parties are the two calls of the helper: the first hop and the forward
    assert {call.line, other.chain[0].line} == {first, forward}
    assert f"called from line {call.line} in forward_kernel" in race.message


def test_a_line_of_the_kernel_body_has_no_chain():
    [result] = results(SAFE, 2)
    assert result.verdict.value == "safe"
    [early], race = results(EARLY, 2), _race()[1]
    steps = [s for s in race.trace if s.location is not None]
    body = [s for s in steps if s.location.line == _line_of(EARLY, "pl.semaphore_wait(barrier, 2)")]
    assert body and all(s.location.chain == () for s in body)
    assert early.file == EARLY


def test_text_report_quotes_each_calling_line():
    result, race = _race()
    # the race leads with its root cause (the forward starts before the first hop's wait);
    # shown as the symptom it is, its line is quoted with each call that reached it
    assert race.cause is not None and race.cause.before is not None and race.cause.before.chain
    lines = render_violation(replace(race, cause=None), kernel_file=result.file, cores=result.cores,
                             max_trace_steps=50)
    call = race.location.chain[0]
    assert any(f"called at line {call.line} in forward_kernel: " in line and "send(" in line for line in lines)
    # a trace step inside the helper shows the kernel's line that called it
    assert any(f"[line {race.location.line} from " in line for line in lines)


def test_json_locations_carry_the_calls():
    result, race = _race()
    out = json_report.location(race.location)
    assert out["line"] == race.location.line
    assert out["calls"] == [{"file": ir.display_path(EARLY), "line": race.location.chain[0].line,
                             "function": "forward_kernel"}]
    assert "calls" not in json_report.location(ir.Loc(EARLY, 3))
    document = json.loads(json_report.render([result]))
    [violation] = document["results"][0]["violations"]
    assert violation["location"]["calls"][0]["line"] == race.location.chain[0].line


def test_sarif_relates_the_calls_and_stacks_the_schedule():
    result, race = _race()
    log = sarif.sarif_log([result])
    [run] = log["runs"]
    [out] = run["results"]
    related_lines = [loc["physicalLocation"]["region"]["startLine"] for loc in out["relatedLocations"]]
    assert race.location.chain[0].line in related_lines
    assert race.related[0].chain[0].line in related_lines
    stacked = [loc for flow in out["codeFlows"] for thread in flow["threadFlows"] for loc in thread["locations"]
               if "stack" in loc]
    assert stacked
    frames = stacked[0]["stack"]["frames"]
    assert frames[0]["location"]["physicalLocation"]["region"]["startLine"] == race.location.line
    assert len(frames) == 2
    for source in sarif_schema.sources().values():
        assert sarif_schema.errors(log, sarif_schema.load(source)) == []


def test_two_calls_of_one_helper_are_two_findings_with_their_own_fingerprints():
    result, race = _race()
    moved = ir.Loc(race.location.file, race.location.line, (ir.Frame(EARLY, 1, "elsewhere"),))
    other = type(race)(**{**race.__dict__, "location": moved})
    twin = type(result)(**{**result.__dict__, "violations": [race, other]})
    found = findings.collect([twin])
    assert len(found) == 2
    assert found[0].fingerprint != found[1].fingerprint
    # a line without a chain keeps the fingerprint it always had
    plain = findings.FindingId("data_race", "k.py", "kernel", "", "x = 1", 0)
    assert plain.fingerprint == findings.FindingId("data_race", "k.py", "kernel", "", "x = 1", 0, "").fingerprint


def test_graph_labels_name_the_calling_line():
    result, race = _race()
    drawn = graph.counterexample_graph(result, race)
    labels = [d.get("label", "") for _, d in drawn.nodes(data=True)]
    tooltips = [d.get("tooltip", "") for _, d in drawn.nodes(data=True)]
    calls = {f.line for f in race.location.chain} | {f.line for f in race.related[0].chain}
    assert any(f"line {race.location.line} (from {call})" in label for label in labels for call in calls)
    assert any("called from forward_through_helper_early.py:" in tip and "send(" in tip for tip in tooltips)


def test_loc_text():
    loc = ir.Loc("/k/kernel.py", 12, (ir.Frame("/k/kernel.py", 40, "body"), ir.Frame("/k/other.py", 7, "")))
    assert loc.chain_text() == "called from line 40 in body, from /k/other.py:7"
    assert str(loc) == "/k/kernel.py:12 (called from line 40 in body, from /k/other.py:7)"
    assert str(loc.bare()) == "/k/kernel.py:12" and loc.bare() != loc
    assert ir.Loc("/k/kernel.py", 12) == loc.bare()
