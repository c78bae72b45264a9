"""What a run says while it works: a capture line per kernel script and device count with
its phase times, progress in a CI log at most every 15 s, verdict lines wrapped to the
terminal."""

import io
import os
import sys

from semcheck.cli import command
from semcheck.api import LoadReport, verify_path
from semcheck.engines.budget import Budget, ProgressInfo
from semcheck.report import feedback, text
from semcheck.report.feedback import Position, progress_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def model(name):
    return os.path.join(ROOT, "models", name + ".py")


def test_capture_line_names_the_file_the_devices_and_each_phase():
    report = LoadReport("examples/tpu/ring_permute.py", 4, 3.14, 2,
                        {"jax import": 1.0, "script": 1.9, "lowering": 0.24})
    assert feedback.capture_line(report) == (
        "semcheck: captured examples/tpu/ring_permute.py at 4 devices: 2 kernels in 3.1 s "
        "(jax import 1.0 s, script 1.9 s, lowering 0.2 s)")
    assert feedback.capture_line(LoadReport("models/ring.py", 4, 0.01, 1)) is None  # nothing captured


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_a_capture_line_is_progress_cleared_before_the_report(monkeypatch):
    report = LoadReport("examples/tpu/ring_permute.py", 4, 3.14, 2, {"script": 1.9})
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    command._capture_printer(verbose=False)(report)
    assert terminal.getvalue().startswith("\rsemcheck: captured examples/tpu/ring_permute.py at 4 devices")
    assert "\n" not in terminal.getvalue()
    command._clear_progress()
    assert terminal.getvalue().endswith(" \r")  # wiped before the report is written
    kept = _Terminal()
    monkeypatch.setattr(sys, "stderr", kept)
    command._capture_printer(verbose=True)(report)  # -v keeps every line
    assert kept.getvalue() == feedback.capture_line(report) + "\n"
    log = io.StringIO()  # off a terminal: a line for good
    monkeypatch.setattr(sys, "stderr", log)
    command._capture_printer(verbose=False)(report)
    assert log.getvalue() == feedback.capture_line(report) + "\n"


def test_a_capture_from_the_cache_says_so_and_when_its_times_were_measured():
    report = LoadReport("examples/tpu/ring_permute.py", 4, 0.02, 2, {"script": 0.7, "lowering": 0.3}, kept=True)
    assert feedback.capture_line(report) == (
        "semcheck: examples/tpu/ring_permute.py at 4 devices: 2 kernels from the capture cache in 0.0 s "
        "(captured earlier in 1.0 s: script 0.7 s, lowering 0.3 s)")


def test_verify_path_reports_every_load():
    heard = []
    verify_path([model("ring_allgather"), model("circular_wait")], [2, 4], on_load=heard.append)
    assert [(os.path.basename(r.path), r.devices, r.kernels, r.failed) for r in heard] == [
        ("ring_allgather.py", 2, 1, False), ("ring_allgather.py", 4, 1, False),
        ("circular_wait.py", 2, 1, False), ("circular_wait.py", 4, 1, False)]


def test_off_a_terminal_progress_is_logged_at_most_every_15_seconds(monkeypatch, capsys):
    clock = [1000.0]
    monkeypatch.setattr(command.time, "monotonic", lambda: clock[0])
    show = command._progress_printer(Position(total=1), Budget(timeout=600))("ring", 4)
    for second in range(40):  # a progress report every second for 40 s
        clock[0] = 1000.0 + second
        show(ProgressInfo(states=second * 100, transitions=0, seconds=second, frontier=1, depth=1))
    lines = capsys.readouterr().err.splitlines()
    assert [line.rsplit(", ", 1)[1] for line in lines] == ["0 s of 600 s", "15 s of 600 s", "30 s of 600 s"]


def test_progress_shows_the_runs_totals_and_the_budget():
    """`[36/114]`: which (file, device count) of the run; `12 s of 600 s`, `of 2,000,000`
    states: how much of the check's budget is spent."""
    position = Position(total=114, finished=35)
    info = ProgressInfo(states=12_345, transitions=0, seconds=12.2, frontier=310, depth=40)
    line = progress_line("ring", 8, info, position, Budget(max_states=2_000_000, timeout=600))
    assert line == ("semcheck: [36/114] ring [8 devices]: 12,345 states (of 2,000,000), 1,012 states/s, "
                    "frontier 310, depth 40, 12 s of 600 s")
    position.done()
    assert str(position) == "[37/114]"
    z3 = ProgressInfo(states=0, transitions=0, seconds=3, frontier=0, depth=0, what="solving 4 queries")
    assert progress_line("ring", 8, z3, Position(total=1), Budget(timeout=25)) == (
        "semcheck: ring [8 devices]: solving 4 queries, 3 s of 25 s")


def test_verdict_lines_wrap_to_the_width_asked_for():
    results = verify_path(model("ring_allgather"), [2])
    wide = text.render(results)
    narrow = text.render(results, width=60)
    assert len(wide.splitlines()[0]) > 60
    assert all(len(line) <= 60 for line in narrow.splitlines())
    assert narrow.splitlines()[1].startswith("    ")  # the continuation is indented
    assert " ".join(narrow.split()) == " ".join(wide.split())  # nothing lost
