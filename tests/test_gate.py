"""The gate for GitHub: SARIF that code scanning handles right (fingerprints, help, URIs,
categories, small code flows), the concise and github formats, the Markdown job summary,
--baseline, and [tool.semcheck] defaults."""

import json
import os
import re
import shutil
import textwrap

import pytest

from semcheck import cli
from semcheck.semantics.properties import Kind
from semcheck.report.findings import FINGERPRINT_KEY
from tests import sarif_schema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")

# Two waits with the same text on two lines, both stuck: two findings.
TWINS = textwrap.dedent('''\
    from semcheck.model import ProtocolBuilder


    def model(devices: int):
        p = ProtocolBuilder("twins", devices=devices, backend="tpu")
        s = p.semaphore("s")
        for d in range(devices):
            t = p.thread(d)
            if d % 2 == 0:
                t.wait(s, 1)
            else:
                t.wait(s, 1)
        return p.build()
''')


def run(capsys, *argv):
    code = cli.main(["verify", *argv, "-q"])
    out, err = capsys.readouterr()
    return code, out, err


def sarif(capsys, *argv):
    code, out, _ = run(capsys, *argv, "--format", "sarif")
    return code, json.loads(out)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository of its own (root marked by $GITHUB_WORKSPACE) holding the twins model."""
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "twins.py").write_text(TWINS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- SARIF -----------------------------------------------------------------------------------


def test_same_text_findings_get_different_fingerprints_that_are_stable(capsys, repo):
    code, first = sarif(capsys, "kernels/twins.py", "--devices", "2")
    assert code == 1
    results = first["runs"][0]["results"]
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in results] == [10, 12]
    prints = [r["partialFingerprints"][FINGERPRINT_KEY] for r in results]
    assert len(set(prints)) == 2
    _, again = sarif(capsys, "kernels/twins.py", "--devices", "2")
    assert [r["partialFingerprints"][FINGERPRINT_KEY] for r in again["runs"][0]["results"]] == prints
    # An edit above the findings moves their lines but keeps their identity.
    (repo / "kernels" / "twins.py").write_text("# a new first line\n" + TWINS)
    _, shifted = sarif(capsys, "kernels/twins.py", "--devices", "2")
    shifted_results = shifted["runs"][0]["results"]
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in shifted_results] == [11, 13]
    assert [r["partialFingerprints"][FINGERPRINT_KEY] for r in shifted_results] == prints


def test_every_rule_has_a_full_description_help_and_a_help_page_in_the_repository(capsys):
    _, doc = sarif(capsys, os.path.join(MODELS, "circular_wait.py"), "--devices", "2")
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [k.value for k in Kind]
    for rule in rules:
        assert rule["fullDescription"]["text"] != rule["shortDescription"]["text"]
        assert len(rule["fullDescription"]["text"]) > len(rule["shortDescription"]["text"])
        assert "helpUri" not in rule  # no link that may not resolve: the page itself is the help
        page = f"docs/kinds/{rule['id']}.md"
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            text = f.read()
        assert rule["help"]["markdown"] == text
        assert text.startswith(f"# {rule['id']}") and "**Bad**" in text or "**Pattern**" in text
    with open(os.path.join(ROOT, "docs", "kinds", "README.md"), encoding="utf-8") as f:
        index = f.read()
    assert all(f"[{k.value}]({k.value}.md)" in index for k in Kind)


def test_each_kinds_page_names_files_that_exist():
    for kind in Kind:
        with open(os.path.join(ROOT, "docs", "kinds", f"{kind.value}.md"), encoding="utf-8") as f:
            named = re.findall(r"`((?:examples|models)/[\w/]+\.py)`", f.read())
        for path in named:
            assert os.path.exists(os.path.join(ROOT, path)), (kind, path)


@pytest.mark.parametrize("where", ["root", "models", "elsewhere"])
def test_uris_are_relative_to_the_repository_root_from_any_directory(capsys, monkeypatch, tmp_path, where):
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    target = os.path.join(MODELS, "ring_allgather_missing_signal.py")
    if where == "root":
        monkeypatch.chdir(ROOT)
        path = "models/ring_allgather_missing_signal.py"
    elif where == "models":
        monkeypatch.chdir(MODELS)
        path = "ring_allgather_missing_signal.py"
    else:  # outside any repository: GITHUB_WORKSPACE says where the root is
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("GITHUB_WORKSPACE", ROOT)
        path = target
    code, doc = sarif(capsys, path, "--devices", "2", "-j", "1")
    assert code == 1
    run_ = doc["runs"][0]
    [result] = run_["results"]
    artifact = result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": "models/ring_allgather_missing_signal.py", "uriBaseId": "%SRCROOT%"}
    assert run_["originalUriBaseIds"]["%SRCROOT%"]["uri"] == "file://" + os.path.realpath(ROOT) + "/"
    flows = [loc for flow in result["codeFlows"] for t in flow["threadFlows"] for loc in t["locations"]]
    assert all(loc["location"]["physicalLocation"]["artifactLocation"]["uri"].startswith("models/")
               for loc in flows)


def test_message_starts_with_the_headline_and_the_category_names_the_run(capsys):
    _, doc = sarif(capsys, os.path.join(MODELS, "circular_wait.py"), "--devices", "2",
                   "--category", "semcheck-2dev")
    run_ = doc["runs"][0]
    assert run_["automationDetails"] == {"id": "semcheck-2dev/"}
    [result] = run_["results"]
    first_line = result["message"]["text"].splitlines()[0]
    assert first_line == "device 0 -> device 1 -> device 0 wait for each other in a cycle; each wait can only be satisfied by the next thread in the cycle, which is itself blocked."
    assert "(kernel circular_wait; found with 2 devices)" in result["message"]["text"]
    _, plain = sarif(capsys, os.path.join(MODELS, "circular_wait.py"), "--devices", "2")
    assert "automationDetails" not in plain["runs"][0]


def test_code_flows_keep_only_the_threads_involved(capsys):
    _, doc = sarif(capsys, os.path.join(MODELS, "ring_allgather_missing_signal.py"), "--devices", "8")
    [result] = doc["runs"][0]["results"]
    [flow] = result["codeFlows"]
    # device 7 waits for a second barrier signal; device 6 gave it the first; the other six
    # devices' steps are not part of the finding.
    assert [t["id"] for t in flow["threadFlows"]] == ["device 6", "device 7"]
    assert "of the 2 threads involved" in flow["message"]["text"]
    _, deadlock = sarif(capsys, os.path.join(MODELS, "circular_wait.py"), "--devices", "4")
    [cycle] = deadlock["runs"][0]["results"][0]["codeFlows"]
    assert [t["id"] for t in cycle["threadFlows"]] == [f"device {d}" for d in range(4)]  # the whole cycle


def test_gate_sarif_validates(capsys, repo):
    _, doc = sarif(capsys, "kernels/twins.py", MODELS, "--devices", "2", "--category", "x", "--expectations")
    schemas = sarif_schema.sources()
    assert schemas
    for path in schemas.values():
        assert sarif_schema.errors(doc, sarif_schema.load(path)) == []


# --- concise, github, summary ----------------------------------------------------------------


def test_concise_is_one_line_per_finding(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    # (a path that does not exist is a usage error before any check: tests/test_hostile_input.py)
    code, out, _ = run(capsys, "models/circular_wait.py", "models/ring_allgather_missing_signal.py",
                       "models/ring_allgather.py", "--devices", "2,4", "--format", "concise")
    assert code == 1
    assert out.splitlines() == [
        "models/circular_wait.py:20:1: deadlock: device 0 -> device 1 -> device 0 wait for each other "
        "in a cycle; each wait can only be satisfied by the next thread in the cycle, which is itself "
        "blocked [circular_wait, 2, 4 devices]",
        "models/ring_allgather_missing_signal.py:30:1: unsatisfied_wait: device 1 waits at "
        "models/ring_allgather_missing_signal.py:30 (semaphore_wait) for barrier on device 1 to reach 2; "
        "it holds 1; nothing left in the system can add to it [ring_allgather_missing_signal, 2, 4 devices]",
    ]


def test_github_format_is_workflow_commands_at_repository_paths(capsys, monkeypatch):
    monkeypatch.chdir(MODELS)
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    warned = os.path.join(ROOT, "examples", "tpu", "nondecrementing_poll_leftover.py")
    code, out, _ = run(capsys, "circular_wait.py", "nondec_poll_leak.py", warned, "--devices", "2", "--format", "github")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == ("::error file=models/circular_wait.py,line=20,title=semcheck%3A deadlock::device 0 -> "
                        "device 1 -> device 0 wait for each other in a cycle; each wait can only be satisfied "
                        "by the next thread in the cycle, which is itself blocked (kernel circular_wait; 2 devices)")
    assert lines[1].startswith("::error file=models/nondec_poll_leak.py,line=26,title=semcheck%3A semaphore_leftover::")
    assert lines[2].startswith("::warning file=examples/tpu/nondecrementing_poll_leftover.py,line=39,"
                               "title=semcheck%3A lowered_as_decrementing::")
    assert len(lines) == 3


def test_github_format_names_the_blocks_of_a_gpu_check(capsys, monkeypatch):
    # it said "(kernel barrier_kernel; 1, 2 devices)", where the text report says "x 4 blocks"
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    code, out, _ = run(capsys, "examples/gpu/grid_barrier_competing_waits.py", "--devices", "1,2", "--format", "github", "-q")
    assert code == 1
    [line] = out.splitlines()
    assert line.startswith("::error file=examples/gpu/grid_barrier_competing_waits.py,line=29,title=semcheck%3A unsatisfied_wait::")
    # the root cause leads (the waits compete for one count), then where it was checked, then its fix
    assert "::the waits at line 29 compete for one count of `arrived`" in line
    assert "(kernel barrier_kernel; 1, 2 devices x 4 blocks). Fix: let the wait at line 29 leave the count" in line


def test_summary_findings_name_the_blocks_of_a_gpu_check(capsys, monkeypatch, tmp_path):
    # as the annotation above: it said "(barrier_kernel, 1, 2 devices)"
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    summary = tmp_path / "summary.md"
    run(capsys, "examples/gpu/grid_barrier_competing_waits.py", "--devices", "1,2", "--summary", str(summary), "-q")
    [finding] = [line for line in summary.read_text().splitlines() if line.startswith("- **unsatisfied_wait**")]
    assert "(barrier_kernel, 1, 2 devices x 4 blocks): " in finding


def test_summary_table_headers_name_the_blocks_of_a_gpu_check_as_its_findings_do(capsys, monkeypatch, tmp_path):
    # the headers said "1 devices | 2 devices" above findings "at 1, 2 devices x 4 blocks"
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    summary = tmp_path / "summary.md"
    run(capsys, "examples/gpu/grid_barrier_competing_waits.py", "models/circular_wait.py", "--devices", "1,2",
        "--summary", str(summary), "-q")
    lines = summary.read_text().splitlines()
    [header] = [line for line in lines if line.startswith("| kernel |")]
    assert header == "| kernel | file | 1 device | 2 devices | 1 device x 4 blocks | 2 devices x 4 blocks |"
    [gpu] = [line for line in lines if line.startswith("| barrier_kernel |")]
    assert gpu.split(" | ")[2:4] == ["", ""] and "unsatisfied_wait" in gpu.split(" | ")[5]
    [tpu] = [line for line in lines if line.startswith("| circular_wait |")]
    assert "deadlock" in tpu.split(" | ")[3] and tpu.endswith("|  |  |")


def test_github_format_marks_declared_findings_as_notices(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, _ = run(capsys, "models/circular_wait.py", "--devices", "2", "--format", "github", "--expectations")
    assert code == 0
    assert out.startswith("::notice file=models/circular_wait.py,line=20,title=semcheck%3A deadlock::")
    assert out.rstrip().endswith("; declared expected")


def test_a_summary_of_one_check_says_one_check_of_one_kernel(capsys, monkeypatch, tmp_path):
    # it said "1 checks of 1 kernels", where the text report says "1 check of 1 kernel"
    monkeypatch.chdir(ROOT)
    summary = tmp_path / "summary.md"
    run(capsys, "models/circular_wait.py", "--devices", "2", "--summary", str(summary))
    assert summary.read_text().splitlines()[2] == "1 check of 1 kernel: 1 violation."


def test_summary_file_and_the_github_step_summary(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    step_summary = tmp_path / "step_summary.md"
    step_summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    summary = tmp_path / "summary.md"
    code, _, _ = run(capsys, "models/circular_wait.py", "models/ring_allgather.py", "--devices", "2,4",
                     "--summary", str(summary))
    assert code == 1
    text = summary.read_text()
    assert step_summary.read_text() == "earlier step\n" + text  # appended, not overwritten
    lines = text.splitlines()
    assert lines[0] == "## semcheck: ❌ violation"
    assert lines[2] == "4 checks of 2 kernels: 2 safe, 2 violations."  # not "2 violation"
    assert "| kernel | file | 2 devices | 4 devices |" in lines
    assert "| circular_wait | `models/circular_wait.py:16` | ❌ deadlock | ❌ deadlock |" in lines
    assert "| ring_allgather | `models/ring_allgather.py:29` | ✅ safe | ✅ safe |" in lines
    assert any(line.startswith("- **deadlock** `models/circular_wait.py:20` (circular_wait, 2, 4 devices): ")
               for line in lines)


# --- baseline --------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_baseline_hides_known_findings_and_gates_on_a_new_one(capsys, repo, fmt):
    shutil.copy(os.path.join(MODELS, "circular_wait.py"), repo / "kernels" / "circular_wait.py")
    baseline = repo / f"baseline.{fmt}"
    code, _, _ = run(capsys, "kernels/", "--devices", "2", "--format", fmt, "-o", str(baseline))
    assert code == 1
    # Nothing new: the gate passes, and says what it hid.
    code, out, _ = run(capsys, "kernels/", "--devices", "2", "--baseline", str(baseline), "--format", "json")
    assert code == 0
    results = json.loads(out)["results"]
    assert [(r["kernel"], r["verdict"], r["violations"]) for r in results] == [
        ("circular_wait", "safe", []), ("twins", "safe", [])]
    assert results[1]["notes"][-1] == f"2 findings known from the baseline {baseline} not reported"
    # The text report does not claim more than the gate knows: known findings are not "safe in any schedule".
    code, out, _ = run(capsys, "kernels/", "--devices", "2", "--baseline", str(baseline))
    verdicts = [line for line in out.splitlines() if line.startswith("SAFE: ")]
    assert [line.split(": ", 2)[2].split("  (")[0] for line in verdicts] == [
        "no new findings: 1 known from the baseline is not reported",
        "no new findings: 2 known from the baseline are not reported"]
    # A new bug is reported, and only it.
    shutil.copy(os.path.join(MODELS, "ring_allgather_missing_signal.py"), repo / "kernels" / "ring_bug.py")
    code, out, _ = run(capsys, "kernels/", "--devices", "2", "--baseline", str(baseline), "--format", "concise")
    assert code == 1
    assert out.splitlines() == [
        "kernels/ring_bug.py:30:1: unsatisfied_wait: device 1 waits at kernels/ring_bug.py:30 (semaphore_wait) "
        "for barrier on device 1 to reach 2; it holds 1; nothing left in the system can add to it "
        "[ring_allgather_missing_signal, 2 devices]"]


def test_a_baseline_that_is_not_a_semcheck_result_is_an_error(capsys, tmp_path):
    bad = tmp_path / "other.json"
    bad.write_text('{"hello": 1}')
    code, _, err = run(capsys, os.path.join(MODELS, "circular_wait.py"), "--devices", "2", "--baseline", str(bad))
    assert code == 2 and "neither semcheck's --format json nor SARIF" in err
    code, _, err = run(capsys, os.path.join(MODELS, "circular_wait.py"), "--devices", "2",
                       "--baseline", str(tmp_path / "missing.json"))
    assert code == 2 and "cannot read it" in err


# --- [tool.semcheck] -------------------------------------------------------------------------


def test_pyproject_defaults_apply_and_flags_override_them(capsys, repo):
    shutil.copy(os.path.join(MODELS, "ring_allgather.py"), repo / "kernels" / "ring_allgather.py")
    (repo / "kernels" / "twins.py").unlink()
    (repo / "pyproject.toml").write_text(textwrap.dedent('''\
        [tool.semcheck]
        paths = ["kernels/"]
        devices = [2, 3]
        engine = "z3"
        invocations = 2
        colour = "blue"
    '''))
    code, out, err = run(capsys, "--format", "json")
    assert code == 0
    assert "unknown key 'colour' in [tool.semcheck]" in err
    results = json.loads(out)["results"]
    assert [(r["kernel"], r["devices"], r["engine"]) for r in results] == [
        ("ring_allgather x2", 2, "z3"), ("ring_allgather x2", 3, "z3")]
    code, out, _ = run(capsys, "kernels/ring_allgather.py", "--devices", "3", "--engine", "explicit",
                       "--invocations", "1", "--format", "json")
    [result] = json.loads(out)["results"]
    assert (result["devices"], result["engine"], result["stats"]["states"]) == (3, "explicit", 40)  # test_models (the counting cut)


def test_pyproject_can_make_every_check_exhaustive(capsys, repo):
    shutil.copy(os.path.join(MODELS, "nondec_poll_leak.py"), repo / "kernels" / "leak.py")
    (repo / "pyproject.toml").write_text("[tool.semcheck]\nexhaustive = true\n")
    code, out, _ = run(capsys, "kernels/leak.py", "--devices", "2", "--format", "json")
    [result] = json.loads(out)["results"]
    assert code == 1 and result["first_only"] is False
    code, out, _ = run(capsys, "kernels/leak.py", "--devices", "2", "--format", "json", "--no-exhaustive")
    [result] = json.loads(out)["results"]
    assert code == 1 and result["first_only"] is True


@pytest.mark.parametrize("line, message", [
    ('exhaustive = "yes"', "exhaustive = 'yes': expected true or false"),
    ('devices = [0]', "devices = [0]: expected positive device counts"),
    ('engine = "fast"', "engine = 'fast': expected one of"),
    ('timeout = -1', "timeout = -1: expected a positive number of seconds"),
    ('paths = 3', "paths = 3: expected a path or a list of paths"),
])
def test_bad_pyproject_values_are_errors(capsys, repo, line, message):
    (repo / "pyproject.toml").write_text(f"[tool.semcheck]\n{line}\n")
    code, _, err = run(capsys, "kernels/twins.py")
    assert code == 2 and message in err


def test_no_path_and_no_configured_paths_is_a_usage_error(capsys, repo):
    code, _, err = run(capsys)
    assert code == 2 and "no PATH given" in err


def test_with_expectations_a_baseline_lets_known_unexpected_findings_pass(capsys, repo):
    baseline = repo / "baseline.json"
    run(capsys, "kernels/twins.py", "--devices", "2", "--format", "json", "-o", str(baseline))
    code, _, _ = run(capsys, "kernels/twins.py", "--devices", "2", "--expectations")
    assert code == 1  # twins declares nothing, so it is expected safe
    code, out, _ = run(capsys, "kernels/twins.py", "--devices", "2", "--expectations", "--baseline",
                       str(baseline), "--format", "json")
    assert code == 0
    [result] = json.loads(out)["results"]
    assert result["violations"] == [] and result["expectation"]["matched"] is False  # judged on all findings


def test_a_ray_address_without_the_ray_executor_is_a_usage_error(capsys):
    code, _, err = run(capsys, os.path.join(MODELS, "circular_wait.py"), "--ray-address", "auto")
    assert code == 2 and "--ray-address needs --executor ray" in err
