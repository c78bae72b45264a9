"""The CLI contract: exit codes, the JSON document, budgets, errors, progress."""

import io
import json
import os
import subprocess
import sys

import pytest

from semcheck import cli
from semcheck.cli import command
from semcheck.api import verify_path
from semcheck.kinds import DESCRIPTIONS
from semcheck.engines import budget as budget_module
from tests.test_models import SHIPPED
from tests.tpu_support import expectation

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def model(name):
    return os.path.join(ROOT, "models", name + ".py")


@pytest.mark.parametrize("name", SHIPPED)
def test_json_verdicts_and_exit_codes(capsys, name):
    code, out, _ = run(capsys, "verify", model(name), "--devices", "2,4,8", "--format", "json", "-q")
    doc = json.loads(out)
    declared = expectation(model(name))
    assert code == (1 if any(declared.kinds_at(n)[0] for n in (2, 4, 8)) else 0)
    assert [r["devices"] for r in doc["results"]] == [2, 4, 8]
    for r in doc["results"]:
        errors, warnings = declared.kinds_at(r["devices"])
        assert r["verdict"] == ("violation" if errors else "safe")
        assert {v["kind"] for v in r["violations"] if v["severity"] == "error"} == errors
        assert {v["kind"] for v in r["violations"] if v["severity"] == "warning"} == warnings


def test_json_document_has_the_contract_fields(capsys):
    code, out, _ = run(capsys, "verify", model("ring_allgather_missing_signal"), "--devices", "4", "--format", "json")
    doc = json.loads(out)
    assert set(doc) == {"semcheck", "results", "groups"}  # groups: the problems across checks
    [r] = doc["results"]
    assert {"kernel", "file", "line", "backend", "devices", "cores", "engine", "verdict", "violations", "stats",
            "notes", "data_uses"} <= set(r)
    assert r["data_uses"] == []  # a model takes no value from data
    assert r["inconclusive_reason"] is None  # a verdict: nothing to explain
    assert (r["kernel"], r["backend"], r["devices"], r["cores"], r["engine"]) == (
        "ring_allgather_missing_signal", "model", 4, 1, "explicit")
    # the explicit search says what it stored: nothing, on the path to the ring's deadlock
    assert set(r["stats"]) == {"states", "transitions", "seconds", "stored_states", "store_bytes", "store_fixed_bytes"}
    assert (r["stats"]["stored_states"], r["stats"]["store_bytes"], r["stats"]["store_fixed_bytes"]) == (0, 0, 0)
    [v] = r["violations"]
    assert {"kind", "severity", "message", "device", "core", "location", "trace"} <= set(v)
    assert v["location"]["file"].endswith("ring_allgather_missing_signal.py") and v["location"]["line"] > 0
    step = v["trace"][0]
    assert step["step"] == 1 and step["location"]["line"] > 0 and step["text"]


def test_text_report_shows_the_line_and_the_trace(capsys):
    code, out, _ = run(capsys, "verify", model("ring_allgather_missing_signal"), "--devices", "4")
    assert code == 1
    assert out.startswith("VIOLATION: ring_allgather_missing_signal [4 devices, tpu rules]")
    assert "unsatisfied_wait (device 3) at " in out
    assert "|         t.wait(barrier, 2)" in out  # the source line itself
    # The trace is the stuck wait's happens-before past, no longer the whole (not shortest) path.
    assert "trace to the stuck state (37 steps: 4 shown, 0 folded, 33 not involved; -v shows every step):" in out
    # the stuck thread's own history is in it (step numbers follow the reduced search's path)
    assert any(line.lstrip()[:1].isdigit() and ". device 3  signal" in line for line in out.splitlines())


def test_safe_run_exits_zero_with_one_line_per_kernel(capsys):
    code, out, _ = run(capsys, "verify", model("ring_allgather"), "--devices", "2,4")
    assert code == 0
    [line] = [line for line in out.splitlines() if line.startswith(("SAFE", "VIOLATION"))]
    assert line.startswith("SAFE: ring_allgather [2, 4 devices, ")


def test_checks_share_a_line_only_where_they_say_the_same(capsys):
    # safe at 2 devices (one neighbour sends), a race at 3 and 4: two lines, not three
    code, out, _ = run(capsys, "verify", model("ring_allgather_shared_recv"), "--devices", "2,3,4")
    assert code == 1
    lines = [line for line in out.splitlines() if line.startswith(("SAFE", "VIOLATION"))]
    assert [line.split(" rules]")[0] for line in lines] == [
        "SAFE: ring_allgather_shared_recv [2 devices, tpu", "VIOLATION: ring_allgather_shared_recv [3, 4 devices, tpu"]


def test_budget_exhaustion_is_inconclusive_exit_3(capsys):
    code, out, _ = run(capsys, "verify", model("ring_allgather"), "--devices", "4", "--no-reduction",
                       "--max-states", "1000", "--format", "json", "-q")
    assert code == 3
    [r] = json.loads(out)["results"]
    assert r["verdict"] == "inconclusive"
    assert "state budget of 1,000 states ran out" in r["notes"][0]
    # why, as a field of its own beside the notes
    assert r["inconclusive_reason"] == {"kind": "search_stopped", "stopped_by": "states",
                                        "message": "the search stopped early: state budget of 1,000 states ran out"}


SHALLOW_FAULT = """
from semcheck.model import ProtocolBuilder

def model(devices):
    p = ProtocolBuilder("shallow_fault", devices=devices)
    s = p.semaphore("s")
    p.thread(0).signal(s, device=devices)  # out of range, found after one step
    for d in range(1, devices):  # and a large space of interleaved work
        for _ in range(6):
            p.thread(d).signal(s, device=1)
    p.thread(1).wait(s, 6 * (devices - 1))
    return p.build()
"""


def test_a_violation_found_before_the_budget_ran_out_still_counts(tmp_path, capsys):
    path = tmp_path / "shallow_fault.py"
    path.write_text(SHALLOW_FAULT)
    code, out, _ = run(capsys, "verify", str(path), "--devices", "6", "--no-reduction",
                       "--max-states", "2000", "--format", "json", "-q", "--exhaustive")
    [r] = json.loads(out)["results"]
    assert (code, r["verdict"]) == (1, "violation")
    assert [v["kind"] for v in r["violations"]] == ["invalid_device_id"]
    assert "state budget" in r["notes"][0]  # and it says the search was cut short
    # by default the check ends at that first counterexample, long before the budget
    code, out, _ = run(capsys, "verify", str(path), "--devices", "6", "--no-reduction",
                       "--max-states", "2000", "--format", "json", "-q")
    [r] = json.loads(out)["results"]
    assert (code, r["verdict"], r["first_only"]) == (1, "violation", True)
    assert [v["kind"] for v in r["violations"]] == ["invalid_device_id"]
    assert not any("state budget" in note for note in r["notes"])


def test_missing_file_is_one_usage_error_exit_2(capsys):
    # One usage error before any work, not an ERROR result per device count (issue 13).
    code, out, err = run(capsys, "verify", "no/such/kernel.py", model("ring_allgather"), "--devices", "2,4")
    assert code == 2 and out == ""
    assert err.count("no such file or folder: no/such/kernel.py") == 1


def test_a_model_that_raises_is_an_error_pointing_at_its_line(tmp_path, capsys):
    bad = tmp_path / "bad_model.py"
    bad.write_text("def model(devices):\n    x = 1\n    raise ValueError('needs an even count')\n")
    code, out, _ = run(capsys, "verify", str(bad), "--devices", "3", "--format", "json")
    [r] = json.loads(out)["results"]
    assert code == 2 and r["verdict"] == "error"
    assert r["file"].endswith("bad_model.py") and r["line"] == 3
    assert "ValueError: needs an even count" in r["error"]


def test_bad_usage_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["verify", model("ring_allgather"), "--devices", "two"])
    assert exc.value.code == 2


def test_worst_verdict_decides_the_exit_code(capsys):
    code, _, _ = run(capsys, "verify", model("ring_allgather"), "no/such.py", model("circular_wait"), "--devices", "2")
    assert code == 2


def test_progress_line_on_stderr_for_long_runs(capsys, monkeypatch):
    monkeypatch.setattr(budget_module.Monitor, "FIRST_PROGRESS", 0.0)
    code, _, err = run(capsys, "verify", model("ring_allgather"), "--devices", "3", "--no-reduction")
    assert code == 0
    assert "semcheck: ring_allgather [3 devices]:" in err and "states/s" in err


def test_output_file_and_console_script(tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "semcheck", "verify", model("circular_wait"), "--devices", "2",
         "--format", "json", "-o", str(out)],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode == 1
    assert json.loads(out.read_text())["results"][0]["violations"][0]["kind"] == "deadlock"
    assert proc.stdout.startswith("VIOLATION: circular_wait")  # the text report still on stdout


def test_no_symmetry_flag_turns_the_symmetry_reduction_off(capsys):
    def results(*flags):
        code, out, _ = run(capsys, "verify", model("ring_allgather_shared_recv"), "--devices", "4",
                           "--engine", "explicit", "--format", "json", "-q", "--exhaustive", *flags)
        [r] = json.loads(out)["results"]
        return code, r

    code, on = results()
    assert code == 1 and any(n.startswith("symmetry reduction: every rotation of the device axis") for n in on["notes"])
    code, off = results("--no-symmetry")
    assert code == 1 and not any("symmetry" in n for n in off["notes"])
    assert (on["stats"]["states"], off["stats"]["states"]) == (93, 138)
    assert [v["kind"] for v in on["violations"]] == [v["kind"] for v in off["violations"]] == ["data_race"]


# --- what users of ruff, mypy and pytest expect ------------------------------------------------


def test_a_misspelt_option_is_one_line_that_names_the_option_meant(capsys):
    code, out, err = run(capsys, "verify", "--devcies", "2", model("ring_allgather"))
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "semcheck: error: unknown option: --devcies; did you mean --devices? (semcheck verify --help lists the options)"]


def test_the_value_after_a_misspelt_option_is_shown_with_it_and_each_option_gets_its_hint(capsys):
    code, out, err = run(capsys, "verify", model("ring_allgather"), "--devcies", "2", "--egnine=z3")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        "semcheck: error: unknown options: --devcies 2 (did you mean --devices?), --egnine=z3 (did you mean "
        "--engine?) (semcheck verify --help lists the options)"]
    code, out, err = run(capsys, "verify", model("ring_allgather"), "--devcies", "2")
    assert err.splitlines() == [
        "semcheck: error: unknown option: --devcies 2; did you mean --devices? (semcheck verify --help lists the options)"]


def usage_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exited:  # argparse's own errors end the process
        cli.main(list(argv))
    assert exited.value.code == 2
    return capsys.readouterr().err


def test_a_misspelt_choice_and_a_bad_value_are_one_line_each(capsys):
    err = usage_error(capsys, "verify", "--format", "txt", model("ring_allgather"))
    assert len(err.splitlines()) == 1
    assert "invalid choice: 'txt'" in err and "did you mean text?" in err
    err = usage_error(capsys, "verify", "--devices", "x", model("ring_allgather"))
    assert len(err.splitlines()) == 1 and "expected comma-separated device counts" in err


def test_help_columns_do_not_collide_and_defaults_are_shown():
    import argparse

    parser = command.build_parser()
    epilog = parser.epilog.split("violation kinds:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    heads = [line for line in epilog if not line.startswith("   ")]  # a description goes on indented
    assert len(heads) == len(DESCRIPTIONS)
    for line, (kind, _) in zip(heads, DESCRIPTIONS.items()):
        assert line.startswith(f"  {kind.value}  ")  # at least two spaces before the description
    assert max(len(line) for line in parser.epilog.splitlines()) <= 100  # wrapped, as the options' help
    verify = command._verify_parser(parser)
    for action in verify._actions:
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS, []):
            assert "default" in action.help, action.option_strings
    [output] = [a for a in verify._actions if "-o" in a.option_strings]
    assert "instead of stdout" in output.help


def test_o_writes_the_report_to_the_file_instead_of_stdout(capsys, tmp_path):
    path = tmp_path / "report.txt"
    code, out, _ = run(capsys, "verify", model("circular_wait"), "--devices", "2", "-q", "-o", str(path))
    assert code == 1 and out == ""
    assert path.read_text().startswith("VIOLATION: circular_wait [2 devices")


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    from semcheck.report import colour

    class Terminal:
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert colour.wanted(Terminal()) and not colour.wanted(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colour.wanted(Terminal())
    painted = colour.paint_report("VIOLATION: k [2 devices]: x\n\n  error: deadlock\n    fix: do it\n")
    assert painted.startswith("\033[1;31mVIOLATION\033[0m: k") and "  \033[31merror\033[0m: deadlock" in painted
    assert "    \033[36mfix\033[0m: do it" in painted


def test_the_report_in_a_pipe_has_no_colour(capsys, monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    _, out, _ = run(capsys, "verify", model("circular_wait"), "--devices", "2", "-q")
    assert "\033[" not in out


def test_str_of_a_result_is_its_text_report():
    [r] = verify_path(model("circular_wait"), [2])
    assert str(r) == r.report().rstrip("\n")
    assert str(r).startswith("VIOLATION: circular_wait [2 devices") and "  error: deadlock" in str(r)
    assert "  note: " not in r.report() and "  note: " in r.report(verbose=True)
    assert repr(r).startswith("<Result circular_wait [2 devices, tpu]: VIOLATION")  # repr stays one line


def test_a_check_stopped_by_a_budget_says_so_in_its_verdict_line():
    from semcheck.report import text

    [r] = verify_path(model("circular_wait"), [2])
    r.exhausted = "time budget of 25 s ran out"
    line = text.verdict_line(r)
    assert line.startswith("VIOLATION: ") and "(the search stopped early: time budget of 25 s ran out; there may be more)" in line


def test_an_internal_error_says_where_to_report_it(capsys, monkeypatch):
    """A bug in semcheck asks to be reported, and names where: the project's issue tracker,
    which pyproject.toml lists (the Issues url pip and PyPI show)."""
    import importlib

    from semcheck.version import ISSUES_URL, REPOSITORY_URL

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.delenv("SEMCHECK_DEBUG", raising=False)
    monkeypatch.setattr(command, "check_paths", broken)
    code, out, err = run(capsys, "verify", model("ring_allgather"), "--devices", "2", "-q")
    assert code == 2 and "internal error: RuntimeError: a bug" in err
    assert f"please report it at {ISSUES_URL}" in err
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        urls = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli").load(f)["project"]["urls"]
    assert urls == {"Homepage": REPOSITORY_URL, "Issues": ISSUES_URL}


def test_json_says_why_a_check_is_inconclusive_in_a_field_of_its_own():
    """`inconclusive_reason`: a kind (result.NoVerdictKind) and the text report's words;
    null unless the verdict is inconclusive."""
    from semcheck.report.json import result_dict
    from semcheck.result import Result, StoppedBy, Verdict

    def check(verdict, **fields):
        return result_dict(Result("k", "k.py", 1, "model", "tpu", 2, 1, "explicit", verdict, **fields))

    assert check(Verdict.SAFE)["inconclusive_reason"] is None
    assert check(Verdict.VIOLATION, exhausted="time budget of 5 s ran out")["inconclusive_reason"] is None
    assert check(Verdict.INCONCLUSIVE, unjustified="a value read back from data decides it")[
        "inconclusive_reason"] == {"kind": "unjustified", "stopped_by": None,
                                   "message": "a value read back from data decides it"}
    assert check(Verdict.INCONCLUSIVE, exhausted="time budget of 5 s ran out", stopped_by=StoppedBy.TIME)[
        "inconclusive_reason"] == {"kind": "search_stopped", "stopped_by": "time",
                                   "message": "the search stopped early: time budget of 5 s ran out"}
    assert check(Verdict.INCONCLUSIVE)["inconclusive_reason"]["kind"] == "incomplete"


def test_the_text_report_and_json_give_one_reason_for_no_verdict():
    """`Result.no_verdict` decides the reason once; the text report's verdict line, the
    concise line and the JSON's `inconclusive_reason.message` all render that one reason."""
    from semcheck.report import concise
    from semcheck.report.json import result_dict
    from semcheck.report.text import verdict_line
    from semcheck.result import NO_PROTOCOL, NoVerdictKind, Result, StoppedBy, Verdict

    def result(frontend="model", **fields):
        return Result("k", "k.py", 1, frontend, "tpu", 2, 1, "explicit", Verdict.INCONCLUSIVE, **fields)

    cases = [
        (result(unjustified="a value read back from data decides it"), NoVerdictKind.UNJUSTIFIED,
         "a value read back from data decides it"),
        (result(NO_PROTOCOL, exhausted="time budget of 5 s ran out while loading", stopped_by=StoppedBy.TIME),
         NoVerdictKind.NOT_LOADED, "no verdict: time budget of 5 s ran out while loading"),
        (result(exhausted="state budget of 10 ran out", stopped_by=StoppedBy.STATES), NoVerdictKind.SEARCH_STOPPED,
         "the search stopped early: state budget of 10 ran out"),
        (result(), NoVerdictKind.INCOMPLETE, "a budget ran out before every schedule was explored"),
    ]
    for r, kind, words in cases:
        assert r.no_verdict is not None and r.no_verdict.kind is kind
        assert result_dict(r)["inconclusive_reason"]["message"] == words
        assert f": {words}" in verdict_line(r)
        assert concise.check_problem(r) == words
