"""Budgets cover every phase of a check: loading (a model file's code, a kernel script in
its capture subprocess), building the transition system, the z3 encoding and solving, the
explicit search. Each ends with verdict inconclusive and a note naming the phase, never a
traceback. Budgets here are tiny (0 s, 1 MB) so each must be honoured at its first check;
no test measures elapsed time."""

from __future__ import annotations

import json
import textwrap

import pytest

from semcheck import cli
from semcheck.api import check_protocol, verify_path
from semcheck.engines.explicit import search as explicit
from semcheck.engines.z3 import engine as smt
from semcheck.engines.budget import Budget, BudgetExceeded, Monitor, bounded_phase
from semcheck.frontends import load
from semcheck.semantics import System
from tests.test_cli import model


def _ring(devices: int = 4):
    (protocol,) = load(model("ring_allgather"), devices)
    return protocol


@pytest.mark.parametrize("engine", ["explicit", "z3", "auto", "simulate"])
def test_a_timeout_of_zero_is_inconclusive_in_every_engine(engine):
    result = check_protocol(_ring(), engine=engine, budget=Budget(timeout=0))
    assert result.verdict.value == "inconclusive"
    assert result.notes[-1] == "no verdict: time budget of 0 s ran out before building the transition system"


def test_the_explicit_search_honours_a_timeout_at_its_first_check():
    found = explicit.explore(System(_ring()), budget=Budget(timeout=0))
    assert found.exhausted == "time budget of 0 s ran out" and found.states == 0


def test_the_z3_encoding_honours_a_timeout_at_its_first_check():
    found = smt.explore(System(_ring()), budget=Budget(timeout=0))
    assert found.exhausted == "time budget of 0 s ran out while encoding for z3"
    assert found.solver_queries == 0


def test_memory_budget_in_the_search_and_the_encoding():
    found = explicit.explore(System(_ring()), budget=Budget(max_memory_mb=1))
    assert found.exhausted == "memory budget of 1 MB ran out"
    found = smt.explore(System(_ring()), budget=Budget(max_memory_mb=1))
    assert found.exhausted == "memory budget of 1 MB ran out while encoding for z3"


def test_a_phase_without_checks_of_its_own_is_stopped_from_outside():
    spins = 0
    with pytest.raises(BudgetExceeded) as stopped:
        with bounded_phase("spinning", Budget(timeout=0.2)):
            while spins < 10**10:  # pure Python that never looks at the clock
                spins += 1
    assert stopped.value.reason == "time budget of 0.2 s ran out while spinning"
    with pytest.raises(BudgetExceeded) as stopped:
        with bounded_phase("allocating", Budget(max_memory_mb=1)):
            while spins:
                spins += 1
    assert stopped.value.reason == "memory budget of 1 MB ran out while allocating"


def test_a_memory_error_while_building_is_a_budget_that_ran_out():
    with pytest.raises(BudgetExceeded) as stopped:
        with bounded_phase("building the transition system", Budget()):
            raise MemoryError
    assert stopped.value.reason == "memory ran out while building the transition system"


def test_a_model_file_that_never_returns_is_inconclusive(tmp_path):
    path = tmp_path / "endless_model.py"
    path.write_text(textwrap.dedent("""
        def model(devices):
            while True:
                pass
    """))
    (result,) = verify_path(str(path), [2], budget=Budget(timeout=0.3))
    assert result.verdict.value == "inconclusive"
    assert result.notes == [f"no verdict: time budget of 0.3 s ran out while loading {path} with 2 devices"]


def test_loading_counts_against_the_check(monkeypatch):
    """The check's clock starts when its file starts loading: a load that took the whole
    budget leaves the engine none."""
    import semcheck.checks as checks

    real = checks.load

    def slow_load(path, devices, **options):
        import time

        time.sleep(0.3)
        return real(path, devices, **options)

    monkeypatch.setattr(checks, "load", slow_load)
    (result,) = verify_path(model("ring_allgather"), [4], engine="explicit", budget=Budget(timeout=0.25))
    assert result.verdict.value == "inconclusive"
    assert "ran out before building the transition system" in result.notes[-1]


def test_cli_tiny_timeout_exits_3_with_the_phase_named(capsys):
    """(--timeout 0 is a usage error: a budget must be a positive number.)"""
    code = cli.main(["verify", model("ring_allgather"), "--devices", "4", "--timeout", "1e-9", "--format", "json"])
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert code == 3 and result["verdict"] == "inconclusive"
    assert "ran out while loading" in result["notes"][-1]  # the phase it ran out in


def test_monitor_reads_the_clock_on_every_tick():
    """No batching of checks: the first tick past the deadline raises."""
    monitor = Monitor(Budget(timeout=0))
    with pytest.raises(BudgetExceeded):
        monitor.tick(1, 0)


def test_a_kernel_script_that_outlasts_the_budget_is_inconclusive(tmp_path):
    """The capture subprocess is given the time left and stopped when it is gone."""
    path = tmp_path / "sleepy_kernel.py"
    path.write_text("import time\n\nimport jax\n\nwhile True:\n    time.sleep(0.1)\n")
    (result,) = verify_path(str(path), [2], budget=Budget(timeout=2))
    assert result.verdict.value == "inconclusive"
    assert "ran out while" in result.notes[-1] and str(path) in result.notes[-1]


def test_a_long_phase_says_what_it_is_doing(monkeypatch):
    monkeypatch.setattr(Monitor, "FIRST_PROGRESS", 0.0)
    said = []
    with bounded_phase("building the transition system", Budget(timeout=60), progress=said.append):
        while not said:  # until the timer has spoken (the budget ends the loop otherwise)
            pass
    assert said[0].what == "building the transition system" and said[0].states == 0
