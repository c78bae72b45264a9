"""Expected verdicts: declarations in comments and pyproject.toml, how a check is judged,
and the exit codes of `semcheck verify --expectations`."""

import json
import os
import re
import textwrap

import pytest

from semcheck import cli
from semcheck.run import expectations
from semcheck.run.expectations import Expectation, ExpectationError, judge, parse_spec
from semcheck.result import Result, Stats, Verdict, Violation
from semcheck.ir import display_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")

BUGGY_MODEL = '''
"""A token nobody passes. The docstring mentions # semcheck: expect safe, which is no comment."""
{comment}
from semcheck.model import ProtocolBuilder

def model(devices):
    p = ProtocolBuilder("lonely_wait", devices=devices)
    token = p.semaphore("token")
    p.thread(0).wait(token, 1)
    return p.build()
'''


def write(tmp_path, name, comment=""):
    path = tmp_path / name
    path.write_text(BUGGY_MODEL.format(comment=comment))
    return str(path)


def result(kinds=(), warnings=(), verdict=None, kernel="k", devices=4):
    violations = [Violation(k, "error", "", 0, 0, None) for k in kinds]
    violations += [Violation(k, "warning", "", 0, 0, None) for k in warnings]
    if verdict is None:
        verdict = Verdict.VIOLATION if kinds else Verdict.SAFE
    return Result(kernel, "k.py", 1, "model", "tpu", devices, 1, "explicit", verdict, violations, Stats())


def run(capsys, *argv):
    code = cli.main(["verify", *argv, "-q"])
    out, err = capsys.readouterr()
    return code, out, err


# --- declarations --------------------------------------------------------------------------------


def test_parse_kinds_and_qualifiers():
    e = parse_spec(" deadlock, not_lowerable kernel=ring devices=4,8", "f.py:3")
    assert e.outcomes == {"deadlock", "not_lowerable"}
    assert (e.kernel, e.devices, e.where) == ("ring", frozenset({4, 8}), "f.py:3")
    assert parse_spec("safe", "f.py:1").outcomes == frozenset()


@pytest.mark.parametrize("spec,complaint", [
    ("deadlok", "unknown outcome 'deadlok' in an expectation; did you mean deadlock? Use `safe` or one of: "),
    ("", "names no outcome"),
    ("safe, deadlock", "cannot be combined"),
    ("deadlock devices=four", "devices= takes counts"),
])
def test_malformed_declarations_say_what_is_wrong(spec, complaint):
    with pytest.raises(ExpectationError, match=re.escape(complaint)) as exc:
        parse_spec(spec, "f.py:9")
    assert str(exc.value).startswith("f.py:9: ")


def test_only_real_comments_declare(tmp_path):
    path = write(tmp_path, "m.py", "x = 1  # semcheck: expect unsatisfied_wait")
    [declared] = expectations.declared_in_file(path)
    assert declared.outcomes == {"unsatisfied_wait"} and declared.where.endswith("m.py:3")
    assert expectations.declared_in_file(write(tmp_path, "none.py")) == []  # the docstring does not count


def test_every_buggy_model_declares_its_verdict():
    declared = {
        name[:-3]: {k for d in expectations.declared_in_file(os.path.join(MODELS, name)) for k in d.outcomes}
        for name in os.listdir(MODELS) if name.endswith(".py")
    }
    assert declared == {
        "circular_wait": {"deadlock"},
        "ring_recv_before_send": {"deadlock"},
        "dma_wait_mismatch": {"unsatisfied_wait"},
        "ring_allgather_missing_signal": {"unsatisfied_wait"},
        "moe_dispatch_capacity": {"unsatisfied_wait"},
        "nondec_poll_leak": {"semaphore_leftover"},
        "remote_out_of_range": {"invalid_device_id"},
        "double_buffer": set(),
        "nondec_poll": set(),
        "poll_flag": set(),
        "poll_flag_never_set": {"unsatisfied_wait"},
        "ring_allgather": set(),
        "ring_allgather_shared_recv": {"data_race"},  # and safe at 2 devices
    }


def test_pyproject_declarations_match_paths_and_globs(tmp_path):
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent('''
        [tool.semcheck.expect]
        "kernels/ring.py" = "unsatisfied_wait"
        "kernels/vendored_*.py" = ["safe", "deadlock kernel=bad devices=8"]
    '''))
    (tmp_path / "kernels").mkdir()
    ring = write(tmp_path / "kernels", "ring.py")
    vendored = write(tmp_path / "kernels", "vendored_a.py")
    other = write(tmp_path / "kernels", "other.py")
    [d] = expectations.declared_in_pyproject(ring)
    assert (d.outcomes, d.source) == ({"unsatisfied_wait"}, "pyproject")
    assert [sorted(d.outcomes) for d in expectations.declared_in_pyproject(vendored)] == [[], ["deadlock"]]
    assert expectations.declared_in_pyproject(other) == []


def test_most_specific_declaration_wins_and_comments_beat_pyproject():
    general = Expectation(frozenset({"deadlock"}), where="a")
    for_eight = Expectation(frozenset({"unsatisfied_wait"}), devices=frozenset({8}), where="b")
    external = Expectation(frozenset(), source="pyproject", where="c")
    assert expectations.expectation_for(result(devices=4), [general, for_eight]) is general
    assert expectations.expectation_for(result(devices=8), [general, for_eight]) is for_eight
    assert expectations.expectation_for(result(), [external, general]) is general
    assert expectations.expectation_for(result(), [external]) is external
    assert expectations.expectation_for(result(), []) is None


def test_an_invocations_declaration_applies_only_under_that_many_invocations():
    once = parse_spec("safe", "x")
    twice = parse_spec("remote_before_entry invocations=2 devices=4,8", "x")
    assert twice.invocations == frozenset({2}) and twice.devices == frozenset({4, 8})
    repeated = result(devices=4)
    assert expectations.expectation_for(repeated, [once, twice]) is once
    repeated.invocations = 2
    assert expectations.expectation_for(repeated, [once, twice]) is twice
    repeated.devices = 2
    assert expectations.expectation_for(repeated, [once, twice]) is once


def test_the_declaration_for_a_check_is_known_before_it_runs():
    """`declaration_for` answers for a check described by its kernel, device count, cores and
    invocations (benchmarks/mutants.py picks its safe examples so), as for a Result."""
    general = parse_spec("remote_before_entry", "f.py:1")
    two = parse_spec("safe devices=2", "f.py:2")
    racy_on_two_cores = parse_spec("data_race cores=2", "f.py:3")
    warned = parse_spec("lowered_as_decrementing", "f.py:4")
    declared = [general, two, racy_on_two_cores]
    assert expectations.declaration_for(declared, None, 2) is two
    assert expectations.declaration_for(declared, None, 4) is general
    assert expectations.declaration_for(declared, "k", 4, cores=2) is racy_on_two_cores
    assert expectations.declaration_for(declared, None, 2, invocations=2) is two
    assert expectations.declared_errors(two) == frozenset()
    assert expectations.declared_errors(general) == {"remote_before_entry"}
    assert expectations.declared_errors(warned) == frozenset()  # a warning is no error
    assert expectations.declared_errors(None) == frozenset()  # nothing declared: safe expected


def test_equally_specific_disagreeing_declarations_are_an_error():
    a = Expectation(frozenset({"deadlock"}), where="f.py:1")
    b = Expectation(frozenset({"unsatisfied_wait"}), where="f.py:2")
    with pytest.raises(ExpectationError, match="conflicting expectations"):
        expectations.expectation_for(result(), [a, b])


# --- judging -------------------------------------------------------------------------------------


def test_judging_compares_error_kinds_exactly_and_declared_warnings_as_required():
    deadlock = Expectation(frozenset({"deadlock"}))
    with_warning = Expectation(frozenset({"semaphore_leftover", "lowered_as_decrementing"}))
    assert judge(result(["deadlock"]), deadlock).matched
    assert not judge(result(["deadlock", "semaphore_leftover"]), deadlock).matched
    assert not judge(result(["unsatisfied_wait"]), deadlock).matched
    assert judge(result(), None).matched  # no declaration: safe expected
    assert judge(result(warnings=["lowered_as_decrementing"]), None).matched  # undeclared warnings never fail
    assert not judge(result(["deadlock"]), None).matched
    assert judge(result(["semaphore_leftover"], ["lowered_as_decrementing"]), with_warning).matched
    assert not judge(result(["semaphore_leftover"]), with_warning).matched
    fixed = judge(result(), deadlock)
    assert not fixed.matched and "expected deadlock, found safe" in fixed.reason and "update" in fixed.reason


def test_a_first_counterexample_matches_when_its_kinds_are_some_of_the_declared():
    both = Expectation(frozenset({"data_race", "barrier_phase_overrun"}))
    first = result(["barrier_phase_overrun"])
    assert not judge(first, both).matched  # an exhaustive check must have found both
    first.first_only = True
    j = judge(first, both)
    assert j.matched and "first counterexample" in j.reason
    first_wrong = result(["deadlock"])
    first_wrong.first_only = True
    assert not judge(first_wrong, both).matched


def test_the_gate_runs_every_check_exhaustively(tmp_path, capsys):
    """--expectations judges every declared kind, so it implies --exhaustive: the GPU
    pipeline declares a race and a phase overrun, which a first counterexample never has
    both of."""
    example = os.path.join(ROOT, "examples", "gpu", "warp_producer_consumer_no_release.py")
    code, out, _ = run(capsys, example, "--devices", "2", "--expectations", "--format", "json")
    [r] = json.loads(out)["results"]
    assert code == 0 and r["first_only"] is False
    assert {v["kind"] for v in r["violations"]} == {"data_race", "barrier_phase_overrun"}
    code, out, _ = run(capsys, example, "--devices", "2", "--format", "json")
    [r] = json.loads(out)["results"]
    assert code == 1 and r["first_only"] is True and len({v["kind"] for v in r["violations"]}) == 1


@pytest.mark.parametrize("verdict", [Verdict.ERROR, Verdict.INCONCLUSIVE])
def test_error_and_inconclusive_never_match(verdict):
    j = judge(result(verdict=verdict), None)
    assert not j.matched
    assert expectations.effective_verdict(result(verdict=verdict), j) is verdict


# --- the CLI -------------------------------------------------------------------------------------


def test_models_exit_1_raw_and_0_with_expectations(capsys):
    code, out, _ = run(capsys, MODELS)
    assert code == 1
    code, out, _ = run(capsys, MODELS, "--expectations")
    assert code == 0
    assert "every check as expected" in out
    table = out[out.index("summary:"):]
    header = table.splitlines()[1].split()
    assert header == ["kernel", "devices", "verdict", "states", "time", "expected", "status", "file"]
    lines = table.splitlines()
    # the table's rows end where the distinct problems (report/groups.py) are listed
    end = next(i for i, line in enumerate(lines) if re.match(r"  \d+ distinct problems?:", line))
    rows = lines[3:end]
    models = len([n for n in os.listdir(MODELS) if n.endswith(".py")])
    assert len(rows) == 3 * models and all(re.search(r"\bok\b", row) for row in rows) and "UNEXPECTED" not in table
    assert "expected: deadlock, as declared at " in out  # expected violations are one line each
    assert "shortest trace" not in out


def test_an_undeclared_bug_fails_the_gate_with_its_full_report(tmp_path, capsys):
    write(tmp_path, "declared.py", "# semcheck: expect unsatisfied_wait")
    write(tmp_path, "undeclared.py")
    code, out, err = run(capsys, str(tmp_path), "--devices", "2", "--expectations")
    assert code == 1
    assert "UNEXPECTED: expected safe, found unsatisfied_wait" in out
    assert "p.thread(0).wait(token, 1)" in out  # the full report, with the source line
    assert "1 as expected, 1 unexpected" in out
    # last on stderr, for a CI log that keeps only its tail
    assert err.splitlines()[-2:] == [
        "semcheck: 1 check(s) not as declared:",
        f"  {tmp_path / 'undeclared.py'} lonely_wait at 2 devices: expected safe, found unsatisfied_wait",
    ]


def test_the_gate_says_last_why_a_check_was_inconclusive(capsys):
    ring = os.path.join(MODELS, "ring_allgather.py")
    code, _, err = run(capsys, ring, "--devices", "8", "--expectations", "--max-states", "5")
    assert code == 3
    last = err.splitlines()[-1]
    assert last.startswith(f"  {display_path(ring)} ring_allgather at 8 devices: expected safe, but the check ended "
                           "inconclusive (") and "5" in last, last


def test_json_says_what_was_expected_only_when_judged(tmp_path, capsys):
    import json

    write(tmp_path, "undeclared.py")
    _, out, _ = run(capsys, str(tmp_path), "--devices", "2", "--format", "json", "--expectations")
    [r] = json.loads(out)["results"]
    assert r["expectation"] == {"expected": "safe", "matched": False, "declared_at": None,
                                "reason": "expected safe, found unsatisfied_wait"}
    _, out, _ = run(capsys, str(tmp_path), "--devices", "2", "--format", "json")
    assert "expectation" not in json.loads(out)["results"][0]


def test_a_stale_declaration_fails_too(tmp_path, capsys):
    path = tmp_path / "fixed.py"
    model = open(os.path.join(MODELS, "ring_allgather.py")).read().replace("# semcheck: expect safe\n", "")
    path.write_text("# semcheck: expect deadlock\n" + model)
    code, out, _ = run(capsys, str(path), "--devices", "2", "--expectations")
    assert code == 1 and "expected deadlock, found safe" in out


def test_a_malformed_declaration_is_an_error_exit_2(tmp_path, capsys):
    write(tmp_path, "typo.py", "# semcheck: expect deadlok")
    code, _, err = run(capsys, str(tmp_path), "--devices", "2", "--expectations")
    assert code == 2 and "unknown outcome 'deadlok'" in err and "typo.py:3" in err


def test_an_error_outranks_unexpected_results(tmp_path, capsys):
    write(tmp_path, "undeclared.py")
    code, _, _ = run(capsys, str(tmp_path), "no/such.py", "--devices", "2", "--expectations")
    assert code == 2


def test_an_empty_folder_is_tolerated_next_to_others_but_not_alone(tmp_path, capsys):
    empty = tmp_path / "examples"
    empty.mkdir()
    code, _, err = run(capsys, str(empty), os.path.join(MODELS, "circular_wait.py"), "--devices", "2", "--expectations")
    assert code == 0 and f"{empty}: no kernel scripts or models" in err
    code, _, err = run(capsys, str(empty), "--expectations")
    assert code == 2 and "nothing to check" in err
