"""The capture cache's rules: what is kept, whom it serves, what its key sees."""

from __future__ import annotations

import pytest

from semcheck.frontends import capture as capturing
from semcheck.frontends import capture_cache
from semcheck.frontends.capture import CaptureOutcome


@pytest.fixture
def captures(tmp_path, monkeypatch):
    """A cache folder, and a fake capture that records each run and takes 3 s (or times out
    when given less than that)."""
    runs: list[float | None] = []

    def fake(path, devices, *, timeout=None, assumed=()):
        runs.append(timeout)
        return CaptureOutcome(captured=1, devices=devices, seconds={"jax import": 1.0, "script": 2.0},
                              timed_out=timeout is not None and timeout < 3.0)

    monkeypatch.setattr(capturing, "capture_script", fake)
    monkeypatch.setenv(capture_cache.ENVIRONMENT, str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    script = tmp_path / "kernel.py"
    script.write_text("print('a kernel script')\n")
    return str(script), runs


def test_a_finished_capture_serves_every_caller_with_at_least_its_time(captures):
    script, runs = captures
    capture_cache.capture(script, 2)
    assert capture_cache.capture(script, 2, timeout=600).captured == 1
    assert capture_cache.capture(script, 2, timeout=3.0).captured == 1
    assert runs == [None]
    capture_cache.capture(script, 2, timeout=2.5)  # too little time to be sure it would finish
    assert runs == [None, 2.5]


def test_a_capture_stopped_at_its_time_is_not_kept(captures):
    script, runs = captures
    assert capture_cache.capture(script, 2, timeout=1.0).timed_out
    assert not capture_cache.capture(script, 2).timed_out
    assert runs == [1.0, None]


def test_check_budgets_do_not_change_the_key_and_the_capture_environment_does(captures, monkeypatch):
    script, runs = captures
    capture_cache.capture(script, 2)
    for name, value in [("SEMCHECK_TIMEOUT", "86400"), ("SEMCHECK_MAX_STATES", "5"),
                        ("SEMCHECK_SARIF_SCHEMA", "/elsewhere.json"), ("SEMCHECK_JAX_CACHE", "off")]:
        monkeypatch.setenv(name, value)
        capture_cache.capture(script, 2)
    assert len(runs) == 1
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    capture_cache.capture(script, 2)
    capture_cache.capture(script, 4)
    assert len(runs) == 3


def test_the_key_sees_the_environment_as_the_capture_child_does(captures, monkeypatch):
    """A test session's parent has 8 fake devices and JAX_PLATFORMS=cpu; the child replaces
    the one and defaults to the other, so a gate run without them shares its captures."""
    script, runs = captures
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    capture_cache.capture(script, 2)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    capture_cache.capture(script, 2)
    assert len(runs) == 1
