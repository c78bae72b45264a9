"""The capture cache's rules: what is kept, whom it serves, what its key sees, and that an
entry is checked against what it was made from before anything in it is unpickled."""

from __future__ import annotations

import glob
import os
import pickle
import re

import pytest

from semcheck.frontends import capture as capturing
from semcheck.frontends import capture_cache
from semcheck.frontends.capture import CaptureOutcome
from semcheck.frontends.sources import file_digest


@pytest.fixture
def captures(tmp_path, monkeypatch):
    """A cache folder, and a fake capture that records each run, takes 3 s (or times out
    when given less than that) and read the script and a helper module beside it."""
    runs: list[float | None] = []
    helper = tmp_path / "helper.py"
    helper.write_text("X = 1\n")

    def fake(path, devices, *, timeout=None, assumed=()):
        runs.append(timeout)
        read = {os.path.abspath(p): file_digest(p) for p in (path, str(helper))}
        return CaptureOutcome(captured=1, devices=devices, seconds={"jax import": 1.0, "script": 2.0},
                              timed_out=timeout is not None and timeout < 3.0, sources=read)

    monkeypatch.setattr(capturing, "capture_script", fake)
    monkeypatch.setenv(capture_cache.ENVIRONMENT, str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    script = tmp_path / "kernel.py"
    script.write_text("print('a kernel script')\n")
    return str(script), runs


def _entries(tmp_path) -> list[str]:
    return sorted(glob.glob(str(tmp_path / "cache" / "*.capture")))


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
                        ("SEMCHECK_SARIF_SCHEMA", "/elsewhere.json"), ("SEMCHECK_JAX_CACHE", "off"),
                        ("SEMCHECK_CAPTURE_SERVER", "off"), ("SEMCHECK_CAPTURE_TIMEOUT", "900"),
                        # a test session's own variables (tests/conftest.py): the tiers and the
                        # gate after them must share captures
                        ("SEMCHECK_TEST_RUNS", "/tmp/runs-of-one-session"), ("SEMCHECK_HYPOTHESIS", "ci")]:
        monkeypatch.setenv(name, value)
        capture_cache.capture(script, 2)
    assert len(runs) == 1
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    capture_cache.capture(script, 2)
    capture_cache.capture(script, 4)
    assert len(runs) == 3
    monkeypatch.setenv("SEMCHECK_DEBUG", "1")  # a capture keeps the traceback's text
    capture_cache.capture(script, 4)
    assert len(runs) == 4


def test_every_variable_semcheck_reads_is_known_to_change_a_capture_or_not():
    """A new SEMCHECK_* variable must be placed on one side: in the key (it changes what the
    capture child records) or out of it (it bounds or reports the check)."""
    package = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "semcheck")
    read = set()
    for root, _, files in os.walk(package):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    read |= set(re.findall(r"[\"'](SEMCHECK_[A-Z_]+)[\"']", f.read()))
    assert {"SEMCHECK_DEBUG", "SEMCHECK_TIMEOUT", "SEMCHECK_CAPTURE_CACHE"} <= read
    assert read <= capture_cache.CAPTURE_VARIABLES | capture_cache.CHECK_VARIABLES, \
        read - capture_cache.CAPTURE_VARIABLES - capture_cache.CHECK_VARIABLES
    assert not capture_cache.CAPTURE_VARIABLES & capture_cache.CHECK_VARIABLES


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


def test_a_changed_script_or_imported_module_is_captured_again(captures, tmp_path):
    script, runs = captures
    capture_cache.capture(script, 2)
    (tmp_path / "helper.py").write_text("X = 2\n")  # a module the script imported
    capture_cache.capture(script, 2)
    capture_cache.capture(script, 2)
    assert len(runs) == 2
    with open(script, "a") as f:
        f.write("# edited\n")
    capture_cache.capture(script, 2)
    assert len(runs) == 3
    assert len(_entries(tmp_path)) == 1  # replaced, not piled up


@pytest.mark.parametrize("damage", ["garbage", "truncated", "pickle_only", "bit_flip", "empty"])
def test_a_damaged_entry_is_discarded_with_a_warning_and_captured_again(captures, tmp_path, capsys, damage):
    script, runs = captures
    capture_cache.capture(script, 2)
    [entry] = _entries(tmp_path)
    data = open(entry, "rb").read()
    damaged = {
        "garbage": b"\x80\x04 not a capture at all",
        "truncated": data[: len(data) - 7],
        "pickle_only": pickle.dumps(CaptureOutcome(captured=5)),  # an old-style entry: never unpickled
        "bit_flip": data[:-3] + bytes([data[-3] ^ 1]) + data[-2:],
        "empty": b"",
    }[damage]
    with open(entry, "wb") as f:
        f.write(damaged)
    outcome = capture_cache.capture(script, 2)
    assert outcome.captured == 1 and len(runs) == 2
    [warning] = capsys.readouterr().err.strip().splitlines()
    assert warning.startswith("semcheck: warning: discarded the kept capture") and warning.endswith("capturing again")
    capture_cache.capture(script, 2)  # the entry made again serves
    assert len(runs) == 2


def test_another_scripts_entry_copied_over_is_discarded(captures, tmp_path, capsys):
    """The issue's case: a hanging kernel's entry replaced by a safe kernel's capture."""
    script, runs = captures
    other = tmp_path / "other.py"
    other.write_text("print('another kernel script')\n")
    capture_cache.capture(script, 2)
    [mine] = _entries(tmp_path)
    capture_cache.capture(str(other), 2)
    [theirs] = [e for e in _entries(tmp_path) if e != mine]
    os.replace(theirs, mine)
    capture_cache.capture(script, 2)
    assert len(runs) == 3
    assert "made for another script" in capsys.readouterr().err


def test_a_cache_folder_named_for_the_first_time_is_made(captures, tmp_path, monkeypatch):
    script, runs = captures
    folder = tmp_path / "new" / "captures"
    monkeypatch.setenv(capture_cache.ENVIRONMENT, str(folder))
    capture_cache.capture(script, 2)
    capture_cache.capture(script, 2)
    assert folder.is_dir() and len(runs) == 1  # made, and the second capture came from it


def test_a_capture_served_from_the_cache_is_marked_kept(captures):
    script, runs = captures
    first = capture_cache.capture(script, 2)
    second = capture_cache.capture(script, 2)
    assert len(runs) == 1 and not first.kept and second.kept  # the capture line says which


def test_a_variable_the_script_read_binds_the_kept_capture(captures, monkeypatch):
    """A script that picks its kernel by an environment variable is another capture when the
    variable changes (or is unset); the entry holds digests of the values, not the values."""
    from semcheck.frontends.sources import value_digest

    script, runs = captures
    fake = capturing.capture_script

    def reading_mode(path, devices, **kwargs):
        outcome = fake(path, devices, **kwargs)
        outcome.environment = {"KERNEL_MODE": value_digest(os.environ.get("KERNEL_MODE"))}
        return outcome

    monkeypatch.setattr(capturing, "capture_script", reading_mode)
    monkeypatch.setenv("KERNEL_MODE", "ring-secret-value")
    capture_cache.capture(script, 2)
    capture_cache.capture(script, 2)
    assert len(runs) == 1
    monkeypatch.setenv("KERNEL_MODE", "tree")
    capture_cache.capture(script, 2)
    monkeypatch.delenv("KERNEL_MODE")
    capture_cache.capture(script, 2)
    assert len(runs) == 3
    [entry] = glob.glob(os.path.join(os.environ[capture_cache.ENVIRONMENT], "*.capture"))
    with open(entry, "rb") as f:
        assert b"ring-secret-value" not in f.read()


def test_the_capture_child_records_the_variables_the_script_reads():
    import os as os_module

    from semcheck.frontends.sources import environment_reads, value_digest

    os_module.environ["SEMCHECK_TEST_SET"] = "1"
    try:
        with environment_reads() as reads:
            os_module.environ.get("SEMCHECK_TEST_SET")
            os_module.getenv("SEMCHECK_TEST_UNSET")
            os_module.get_exec_path()  # reads PATH, and tries b"PATH" (what subprocess.Popen does)
            assert "SEMCHECK_TEST_IN" not in os_module.environ
        assert reads.digests() == {"PATH": value_digest(os_module.environ["PATH"]), "SEMCHECK_TEST_IN": None,
                                   "SEMCHECK_TEST_SET": value_digest("1"), "SEMCHECK_TEST_UNSET": None}
        with environment_reads() as reads:
            dict(os_module.environ)
        assert set(reads.digests()) == set(os_module.environ)  # went through all of it
        os_module.environ.get("SEMCHECK_TEST_AFTER")
        assert "SEMCHECK_TEST_AFTER" not in reads.names  # recording ends with the block
    finally:
        del os_module.environ["SEMCHECK_TEST_SET"]


def test_the_cache_folder_must_be_a_folder_semcheck_can_make(captures, tmp_path, monkeypatch):
    script, _ = captures
    monkeypatch.setenv(capture_cache.ENVIRONMENT, os.path.join(script, "below_a_file"))
    with pytest.raises(capture_cache.CacheFolderError, match="SEMCHECK_CAPTURE_CACHE: the folder .* cannot be made"):
        capture_cache.capture(script, 2)
    monkeypatch.setenv(capture_cache.ENVIRONMENT, script)
    with pytest.raises(capture_cache.CacheFolderError, match="is not a folder"):
        capture_cache.capture(script, 2)


def test_what_a_capture_read_is_the_script_and_the_users_own_modules(tmp_path, monkeypatch):
    """What the capture child records: the script, and the user's modules it imported; not
    the standard library, installed packages or semcheck."""
    import importlib
    import sys

    from semcheck.frontends.sources import user_sources

    helper = tmp_path / "kernel_helpers_for_sources.py"
    helper.write_text("VALUE = 3\n")
    script = tmp_path / "uses_helper.py"
    script.write_text("import kernel_helpers_for_sources\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("kernel_helpers_for_sources")
    try:
        read = user_sources(str(script))
    finally:
        sys.modules.pop("kernel_helpers_for_sources", None)
    assert read[str(script)] == file_digest(str(script))
    assert read[str(helper)] == file_digest(str(helper))
    assert "numpy" not in " ".join(read) and not any(name.startswith(os.path.dirname(capturing.__file__))
                                                      for name in read)


def test_a_real_capture_keeps_what_its_script_read_from_the_environment(tmp_path, monkeypatch):
    from semcheck.frontends.sources import value_digest

    script = tmp_path / "reads_a_variable.py"
    script.write_text("import os\nMODE = os.environ.get('SEMCHECK_TEST_KERNEL_MODE', 'ring')\n")
    monkeypatch.setenv("SEMCHECK_TEST_KERNEL_MODE", "tree")
    outcome = capturing.capture_script(str(script), 1)
    assert outcome.environment["SEMCHECK_TEST_KERNEL_MODE"] == value_digest("tree")
