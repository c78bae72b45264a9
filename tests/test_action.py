"""The GitHub Action (action.yml): its steps are plain scripts, run here as GitHub would run
them, with a fake GITHUB_WORKSPACE, GITHUB_STEP_SUMMARY and GITHUB_OUTPUT."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from tests import sarif_schema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, ".github", "actions", "semcheck")


def action():
    with open(os.path.join(ROOT, "action.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def test_the_action_is_composite_with_the_inputs_a_gate_needs():
    spec = action()
    assert {"paths", "devices", "engine", "fail-on", "category", "sarif", "upload"} <= set(spec["inputs"])
    assert spec["runs"]["using"] == "composite"
    steps = spec["runs"]["steps"]
    scripts = [s["run"] for s in steps if "run" in s and "GITHUB_ACTION_PATH" in s["run"]]
    assert scripts == ['bash "$GITHUB_ACTION_PATH/.github/actions/semcheck/install.sh"',
                       'python "$GITHUB_ACTION_PATH/.github/actions/semcheck/run.py"']
    assert all(os.path.exists(os.path.join(SCRIPTS, name)) for name in ("install.sh", "run.py"))
    [upload] = [s for s in steps if s.get("uses", "").startswith("github/codeql-action/upload-sarif@")]
    assert "always()" in upload["if"] and "inputs.upload == 'yes'" in upload["if"]
    assert upload["with"]["category"] == "${{ inputs.category }}"
    check = next(s for s in steps if s.get("id") == "check")
    assert {f"INPUT_{name.upper().replace('-', '_')}" for name in ("paths", "devices", "engine", "fail-on",
                                                                      "category", "sarif")} <= set(check["env"])


@pytest.fixture
def workspace(tmp_path):
    """A repository with one buggy (declared) and one safe kernel model, and the files
    GitHub hands a step."""
    repo = tmp_path / "repo"
    (repo / "kernels").mkdir(parents=True)
    for name in ("circular_wait.py", "ring_allgather.py"):
        shutil.copy(os.path.join(ROOT, "models", name), repo / "kernels" / name)
    summary = tmp_path / "step_summary.md"
    summary.write_text("")
    outputs = tmp_path / "github_output"
    outputs.write_text("")
    return repo, summary, outputs


def run_step(workspace, **inputs):
    repo, summary, outputs = workspace
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INPUT_", "GITHUB_"))}
    env.update({
        "GITHUB_WORKSPACE": str(repo), "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(outputs),
        "GITHUB_ACTION_PATH": ROOT, "PYTHONPATH": ROOT,
        **{f"INPUT_{k.upper()}": v for k, v in inputs.items()},
    })
    proc = subprocess.run([sys.executable, os.path.join(SCRIPTS, "run.py")], cwd=str(repo), env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr  # the step never fails: the gate step does
    values = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    outputs.write_text("")
    return proc.stdout, values


def test_the_check_step_annotates_summarises_writes_sarif_and_fails_the_gate(workspace):
    repo, summary, _ = workspace
    out, values = run_step(workspace, paths="kernels/", devices="2,4", expectations="no",
                           category="semcheck-small", sarif="out/semcheck.sarif", fail_on="violation")
    assert values["exit-code"] == "1" and values["fail"] == "true"
    assert values["reason"] == "semcheck verify exited 1 (violation; fail-on: violation)"
    assert values["sarif"] == "out/semcheck.sarif"
    assert "::error file=kernels/circular_wait.py,line=20,title=semcheck%3A deadlock::" in out
    text = summary.read_text()
    assert text.startswith("## semcheck (semcheck-small): ❌ violation\n")
    assert "| circular_wait | `kernels/circular_wait.py:16` | ❌ deadlock | ❌ deadlock |" in text
    doc = json.loads((repo / "out" / "semcheck.sarif").read_text())
    run_ = doc["runs"][0]
    assert run_["automationDetails"] == {"id": "semcheck-small/"}
    assert run_["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "kernels/circular_wait.py"
    for schema in sarif_schema.sources().values():
        assert sarif_schema.errors(doc, sarif_schema.load(schema)) == []


def test_the_jobs_input_defaults_to_the_runners_cores(monkeypatch):
    """action.yml documents `jobs` as "default: the runner's cores": an empty input must not
    leave semcheck at its own default of one job."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("action_run", os.path.join(SCRIPTS, "run.py"))
    step = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(step)
    assert "runner's cores" in action()["inputs"]["jobs"]["description"]
    monkeypatch.setenv("INPUT_JOBS", "")
    argv = step.command()
    assert argv[argv.index("--jobs") + 1] == str(os.cpu_count())
    monkeypatch.setenv("INPUT_JOBS", "3")
    argv = step.command()
    assert argv[argv.index("--jobs") + 1] == "3"


def test_declared_bugs_pass_and_fail_on_decides(workspace):
    _, values = run_step(workspace, paths="kernels/", devices="2", sarif="semcheck.sarif")  # expectations on
    assert (values["exit-code"], values["fail"]) == ("0", "false")
    _, values = run_step(workspace, paths="kernels/", devices="2", expectations="no", fail_on="never")
    assert (values["exit-code"], values["fail"]) == ("1", "false")
    _, values = run_step(workspace, paths="kernels/", devices="2", expectations="no", fail_on="error")
    assert (values["exit-code"], values["fail"]) == ("1", "false")
    _, values = run_step(workspace, paths="kernels/nothing_here.py", devices="2", fail_on="error")
    assert (values["exit-code"], values["fail"]) == ("2", "true")
    out, values = run_step(workspace, paths="kernels/", fail_on="sometimes")
    assert values["fail"] == "true" and "fail-on must be one of" in out


def test_the_install_step_installs_semcheck_from_the_action_checkout(tmp_path):
    # A stand-in `python` on PATH records what the script asks pip to do.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    (bin_dir / "python").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "python").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GITHUB_ACTION_PATH": "/actions/semcheck"}
    subprocess.run(["bash", os.path.join(SCRIPTS, "install.sh")], env=env, check=True, timeout=60)
    assert log.read_text().splitlines() == [
        "-m pip install --disable-pip-version-check -q /actions/semcheck[jax]", "-m semcheck --version"]
    log.write_text("")
    subprocess.run(["bash", os.path.join(SCRIPTS, "install.sh")], env={**env, "INPUT_INSTALL": "semcheck==0.1.0"},
                   check=True, timeout=60)
    assert log.read_text().splitlines()[0] == "-m pip install --disable-pip-version-check -q semcheck==0.1.0"
