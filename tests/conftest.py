import os
import sys

import pytest
from hypothesis import settings

# CI draws the same random examples every run (`SEMCHECK_HYPOTHESIS=ci`, set by .ci/run): the
# random tests' cost is then the same each run (draws whose reference search runs out of its
# budget cost up to 200,000 states each and are thrown away; one unlucky run of four such tests
# took 950 s against 175 s the run before), and a red CI reproduces. Runs on a developer's
# machine keep drawing new examples.
settings.register_profile("ci", derandomize=True)
settings.load_profile(os.environ.get("SEMCHECK_HYPOTHESIS", "default"))

# Tests import the project from this checkout, even when an installed copy exists.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# In-process TPU-frontend tests (semcheck.verify) build meshes of up to 8 fake CPU devices;
# the count must be set before anything imports jax.
if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# No verdict in a test may depend on the machine's speed: checks are bounded by their state
# budgets, and the wall-clock budget is set out of reach (a loaded CI machine must give the
# same results as an idle one). Tests of the time budget itself pass their own.
os.environ.setdefault("SEMCHECK_TIMEOUT", "86400")

# Each (script, device count) is captured once per test session and shared by every module,
# every xdist worker and every `-j N` sweep worker (semcheck/frontends/capture_cache.py): the
# controller makes the folder before the workers start, and they inherit it from the
# environment. And every capture of the session, in this process, a worker or a `semcheck`
# subprocess a test starts, is a child forked by one capture server that imported JAX once
# (semcheck/frontends/capture_server.py), which the controller starts and ends.
_CAPTURES = "SEMCHECK_CAPTURE_CACHE"
_SERVER = "SEMCHECK_CAPTURE_SERVER"
# And what else a session's modules share across workers (tests/tpu_support.py, RUNS_FOLDER:
# the interpreter runs of the TPU differential), in a folder of the session's own, even
# where CI shares its capture folder between sessions.
_RUNS = "SEMCHECK_TEST_RUNS"


def pytest_configure(config):
    import tempfile

    if hasattr(config, "workerinput"):
        return
    if _SERVER not in os.environ:
        from semcheck.frontends.capture_process import capture_server_address

        address = capture_server_address()
        if address:
            os.environ[_SERVER] = address
            config._semcheck_server = address
    if _RUNS not in os.environ:
        os.environ[_RUNS] = tempfile.mkdtemp(prefix="semcheck-test-runs-")
        config._semcheck_runs = os.environ[_RUNS]
    if _CAPTURES in os.environ:
        return
    try:
        parent = str(config.cache.mkdir("semcheck-captures"))
    except AttributeError:  # the cache plugin is off (-p no:cacheprovider)
        parent = None
    os.environ[_CAPTURES] = tempfile.mkdtemp(prefix="session-", dir=parent)
    config._semcheck_captures = os.environ[_CAPTURES]


def pytest_unconfigure(config):
    import shutil

    for attribute, variable in (("_semcheck_captures", _CAPTURES), ("_semcheck_runs", _RUNS)):
        folder = getattr(config, attribute, None)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
            os.environ.pop(variable, None)
    if getattr(config, "_semcheck_server", None):
        from semcheck.frontends import capture_server

        capture_server.close_own()
        os.environ.pop(_SERVER, None)


# The slow tier: what captures every example at several device counts, runs JAX's own
# interpreter, sweeps whole folders, or runs hundreds of random protocols. The README's test
# command, `python -m pytest -m "not slow"`, is the fast tier; .ci/run runs it and then
# `python -m pytest -m slow`, so every test runs in CI. A key is a module or one test of it (by name,
# all its parameters) or one parametrization; `@pytest.mark.slow` in a module works too, as do
# the many-examples twins of random tests (tests/tiers.py: `test_...[N-examples]`, the larger N).
SLOW = {
    "tests/test_tpu_examples.py": "every TPU example at 2, 4 and 8 devices, and called twice",
    "tests/test_broken_rings.py::test_one_dropped_line_is_one_problem_with_its_fix_at_8_devices":
        "the guide's ring kernels broken one line at a time, each checked at 8 devices (20-100 CPU s each)",
    "tests/test_gpu_examples.py": "every GPU example at 2, 4 and 8 devices",
    "tests/test_gpu_reduction.py": "the reduction against the full search on every GPU example",
    "tests/test_tpu_differential.py": "JAX's TPU interpreter on every example",
    "tests/test_tpu_differential_races.py": "JAX's TPU interpreter's race detection on every example, 12 runs each",
    "tests/test_moe_differential.py": "JAX's TPU interpreter on the MoE kernels",
    "tests/test_sweep.py": "models/ and examples/ swept serially, with -j 2 and on Ray",
    "tests/test_tpu_wheel_all_gather.py": "the JAX wheel's all-gather kernel at several device counts",
    "tests/test_gpu_wheel_collectives.py": "the JAX wheel's GPU collectives at several device counts",
    "tests/test_tpu_wheel_paged_attention.py": "the JAX wheel's paged-attention kernels captured as a user runs them",
    "tests/test_engines_agree.py": "explicit and z3 on every model and on thousands of random protocols",
    "tests/test_reduction.py": "the reduction against the full search on hundreds of random protocols",
    "tests/test_components.py": "split against whole searches on hundreds of random protocols",
    "tests/test_program_linking.py::test_reduction_keeps_every_finding_on_nested_programs[async_remote_copy_nested_jit.py-4]":
        "the unreduced search of a nested-jit program at 4 devices (180,600 states; the fast tier compares at 2 and 3)",
    "tests/test_program_linking.py::test_reduction_keeps_every_finding_on_nested_programs[async_remote_copy_nested_jit_waits_twice.py-4]":
        "the unreduced search of a nested-jit program at 4 devices (179,877 states; the fast tier compares at 2 and 3)",
    "tests/test_graph.py::test_cli_renders_svg_for_every_declared_bug": "the CLI's SVG of every declared bug",
    "tests/test_data_path.py": "the data-path kernels captured and checked at several device counts",
    "tests/test_moe_examples.py": "the MoE examples captured at 8 devices",
    "tests/test_expectations.py::test_models_exit_1_raw_and_0_with_expectations": "models/ at 2, 4 and 8 devices, twice",
}


def _slow_reason(nodeid: str) -> str | None:
    for key, reason in SLOW.items():
        if nodeid == key or nodeid.startswith((key + "::", key + "[")):
            return reason
    return None


# How xdist spreads the tests over its workers (`--dist loadgroup`, pyproject.toml): one test
# at a time, to whichever worker is free, so that no big module sets the wall time alone; a
# module whose tests share a fixture of module or session scope (a capture, a sweep, a set of
# SARIF documents) runs whole on one worker, so that fixture is built once. Captures are shared
# across workers anyway (the capture cache above), so a test that captures needs no group.
_TESTS = os.path.dirname(os.path.abspath(__file__))


def _shares_a_fixture(item) -> bool:
    """Whether `item` uses a fixture of module or session scope defined in tests/ (pytest's own,
    such as tmp_path_factory, are cheap and do not count)."""
    import inspect

    return any(
        fixture.scope != "function" and inspect.getfile(fixture.func).startswith(_TESTS + os.sep)
        for fixtures in item._fixtureinfo.name2fixturedefs.values() for fixture in fixtures
    )


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if _slow_reason(item.nodeid):
            item.add_marker(pytest.mark.slow)
    shared = {item.module.__name__ for item in items if isinstance(item, pytest.Function) and _shares_a_fixture(item)}
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and module.__name__ in shared:
            item.add_marker(pytest.mark.xdist_group(module.__name__))


@pytest.fixture
def every_engine_joins(monkeypatch):
    """`--engine auto` finds every search wide at its first look, one path included (which
    it never finds wide: engines/auto.py, `Width`), so simulate and z3 join at once."""
    from semcheck.engines import auto

    class JoinAtOnce(auto.Width):
        def __call__(self, states: int, frontier: int, depth: int) -> None:
            if not self.wide:
                self.wide = True
                self.on_wide(states, states)

    monkeypatch.setattr(auto, "Width", JoinAtOnce)
