"""Start-up: what `semcheck verify` imports before it needs it. Checking a model needs
neither JAX nor z3 nor networkx; the capture subprocess needs JAX and the lowering, not the
engines or the reports. Asserted on `sys.modules` of a fresh interpreter, never on time."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.test_cli import ROOT, model

HEAVY = ("jax", "jaxlib", "z3", "networkx", "numpy", "scipy", "graphviz")


def _modules_after(code: str) -> set[str]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def _top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_checking_a_safe_model_imports_no_heavy_dependency():
    modules = _modules_after(
        "import json, sys, contextlib, io\n"
        "from semcheck import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = cli.main(['verify', {model('ring_allgather')!r}, '--devices', '2,4', '-q'])\n"
        "assert code == 0, code\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    assert not _top_level(modules) & set(HEAVY), sorted(_top_level(modules) & set(HEAVY))
    assert "semcheck.engines.z3.engine" not in modules and "semcheck.frontends.capture" not in modules
    # A check in this process needs no worker pool and no --baseline reader.
    # Nor the JAX version notice (a model ran no JAX), nor difflib (no comment looks like a
    # misspelt directive).
    lazy = {"multiprocessing", "concurrent.futures.process", "semcheck.report.baseline", "semcheck.report.sarif",
            "semcheck.run.sweep_ray", "semcheck.jax_compat", "difflib"}
    assert not lazy & modules, sorted(lazy & modules)
    # Nor what only a violation needs: its trace, root cause and diagnosis.
    assert not VIOLATION_PATH & modules, sorted(VIOLATION_PATH & modules)


# What makes a finding a Violation (engines/violations.py), imported only when a check found one.
VIOLATION_PATH = {"semcheck.engines.violations", "semcheck.engines.causes", "semcheck.engines.causal",
                  "semcheck.engines.diagnosis", "semcheck.engines.missing", "semcheck.semantics.trace"}


def test_a_violation_imports_its_path_and_is_reported():
    """The converse of the test above, so that it cannot pass by never importing them."""
    modules = _modules_after(
        "import json, sys, contextlib, io\n"
        "from semcheck import cli\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    code = cli.main(['verify', {model('circular_wait')!r}, '--devices', '2', '-q'])\n"
        "assert code == 1 and 'deadlock' in out.getvalue(), (code, out.getvalue())\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    assert VIOLATION_PATH <= modules, sorted(VIOLATION_PATH - modules)


def test_the_command_freezes_what_its_imports_made():
    """`semcheck.cli.main` imports the command's modules with the garbage collector paused
    and freezes what they made out of later collections (cli/__init__.py), leaving the
    collector running as it found it; a later call imports nothing and freezes nothing."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    code = (
        "import contextlib, gc, io, json, sys\n"
        "from semcheck import cli\n"
        "counts = [gc.get_freeze_count()]\n"
        "for _ in range(2):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        f"        assert cli.main(['verify', {model('ring_allgather')!r}, '--devices', '2', '-q']) == 0\n"
        "    counts.append(gc.get_freeze_count())\n"
        "print(json.dumps([counts, gc.isenabled()]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (before, first, second), enabled = json.loads(proc.stdout.strip().splitlines()[-1])
    assert before == 0 and first > 10_000 and second == first and enabled


def test_z3_is_imported_when_z3_is_asked_for():
    """The converse, so the test above cannot pass by never checking anything."""
    modules = _modules_after(
        "import json, sys, contextlib, io\n"
        "from semcheck import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    code = cli.main(['verify', {model('ring_allgather')!r}, '--devices', '2', '-q', '--engine', 'z3'])\n"
        "assert code == 0, code\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    assert "z3" in modules and "jax" not in modules


def test_the_capture_side_imports_no_engine_and_no_report():
    """What the capture subprocess loads besides JAX: the capture hooks and the lowering."""
    modules = _modules_after(
        "import json, sys\n"
        "import semcheck.frontends.capture\n"
        "from semcheck.lower import lower_kernel\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    assert not {m for m in modules if m.startswith(("semcheck.engines", "semcheck.report", "semcheck.api"))}
    assert not _top_level(modules) & {"z3", "networkx", "graphviz"}


def test_a_baseline_that_cannot_be_read_is_still_a_usage_error(tmp_path):
    """The baseline reader is imported when --baseline is given; its error stays exit 2."""
    from semcheck import cli

    bad = tmp_path / "baseline.json"
    bad.write_text("not json")
    assert cli.main(["verify", model("ring_allgather"), "--devices", "2", "-q", "--baseline", str(bad)]) == 2


def test_the_capture_child_keeps_jax_compiles_where_semcheck_jax_cache_says(tmp_path, monkeypatch):
    from semcheck.frontends import capture

    class Config:
        jax_compilation_cache_dir = None

        def __init__(self):
            self.updates = {}

        def update(self, name, value):
            self.updates[name] = value

    class FakeJax:
        config = Config()

    monkeypatch.setenv("SEMCHECK_JAX_CACHE", str(tmp_path / "jax"))
    capture.use_compilation_cache(FakeJax)
    assert FakeJax.config.updates["jax_compilation_cache_dir"] == str(tmp_path / "jax")
    assert FakeJax.config.updates["jax_persistent_cache_min_compile_time_secs"] == 0.0
    assert (tmp_path / "jax").is_dir()

    FakeJax.config = Config()
    monkeypatch.setenv("SEMCHECK_JAX_CACHE", "off")
    capture.use_compilation_cache(FakeJax)
    assert FakeJax.config.updates == {}

    FakeJax.config = Config()
    FakeJax.config.jax_compilation_cache_dir = "/the/scripts/own"  # the script's choice stands
    monkeypatch.delenv("SEMCHECK_JAX_CACHE")
    capture.use_compilation_cache(FakeJax)
    assert FakeJax.config.updates == {}


def test_ray_missing_is_still_a_usage_error(monkeypatch, capsys):
    """The Ray executor is imported when --executor ray is given; its error stays exit 2."""
    from semcheck import cli
    from semcheck.run import sweep_ray

    def no_ray(*args, **kwargs):
        raise sweep_ray.RayUnavailable("--executor ray needs Ray: pip install 'semcheck[ray]'")

    monkeypatch.setattr(sweep_ray, "run", no_ray)
    assert cli.main(["verify", model("ring_allgather"), "--devices", "2,4", "-q", "--executor", "ray"]) == 2
    assert "needs Ray" in capsys.readouterr().err


def test_a_pyproject_is_parsed_once_while_it_stays_the_same(tmp_path, monkeypatch):
    """A run reads [tool.semcheck] when it starts and again for each file it judges: one
    parse while the bytes stay the same, a new one when they change."""
    import importlib

    from semcheck.run import expectations

    tomllib = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")

    parses = []
    real_loads = tomllib.loads
    monkeypatch.setattr(tomllib, "loads", lambda text: parses.append(text) or real_loads(text))
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.semcheck]\ndevices = [2]\n")
    first = expectations.semcheck_table(str(pyproject))
    assert first == {"devices": [2]} and expectations.semcheck_table(str(pyproject)) == first
    assert len(parses) == 1
    pyproject.write_text("[tool.semcheck]\ndevices = [4]\n")
    assert expectations.semcheck_table(str(pyproject)) == {"devices": [4]} and len(parses) == 2
    pyproject.write_text("[tool.other]\nx = 1\n")  # no table of ours: no parse at all
    assert expectations.semcheck_table(str(pyproject)) is None and len(parses) == 2
