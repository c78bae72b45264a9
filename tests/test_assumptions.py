"""Bounding inputs: `semcheck.assume` in a file, `--assume` on the command line, and
`--engine auto` choosing and reporting an engine."""

from __future__ import annotations

import json
import os
import re
import textwrap

import pytest

import semcheck
from semcheck import cli, ir
from semcheck.passes import assumptions
from semcheck.passes.assumptions import Assumption, AssumptionError
from semcheck.engines import auto
from semcheck.frontends import LoadError, load
from semcheck.api import check_protocol

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MOE = os.path.join(ROOT, "models", "moe_dispatch_capacity.py")
RING = os.path.join(ROOT, "models", "ring_allgather.py")


# --- parsing and applying -------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, expected",
    [("tokens=0..64", ("tokens", 0, 64)), ("n=5", ("n", 5, 5)), ("off=-3..-1", ("off", -3, -1)),
     ("sp[0]=1..2", ("sp[0]", 1, 2)), ("c[0]@d1 block (1,)=3..4", ("c[0]@d1 block (1,)", 3, 4))],
)
def test_parse(spec, expected):
    a = assumptions.parse(spec)
    assert (a.name, a.lo, a.hi) == expected


@pytest.mark.parametrize("spec", ["tokens", "tokens=", "tokens=a..b", "=1..2", "n=1..", "n=3..1"])
def test_parse_rejects(spec):
    with pytest.raises(AssumptionError):
        assumptions.parse(spec)


def _protocol(*inputs: ir.Input) -> ir.Protocol:
    return ir.Protocol("p", ir.Backend.TPU, 1, 1, (ir.Thread(0, 0, ()),), inputs=inputs)


def test_apply_replaces_ranges_by_name_last_wins():
    p = _protocol(ir.Input("a", 0, 2**31 - 1), ir.Input("b", 0, 3))
    q = assumptions.apply(p, [Assumption("a", 0, 10), Assumption("a", 2, 4)])
    assert [(i.name, i.lo, i.hi) for i in q.inputs] == [("a", 2, 4), ("b", 0, 3)]
    assert assumptions.apply(p, [Assumption("c", 0, 1)]) is p


@pytest.mark.parametrize(
    "assumed, covered",
    [("c[0]", True), ("c", True), ("c[0]@d1", True), ("c[0]@d1 block (1,)", True),
     ("c[0]@d1 block (0,)", False), ("c[0]@d", False), ("c[0]@d10", False), ("c[1]", False)],
)
def test_a_name_covers_the_per_block_inputs_of_a_blocked_operands_element(assumed, covered):
    """The element of a blocked operand is one input per device and block."""
    assert assumptions.covers(assumed, "c[0]@d1 block (1,)") is covered
    assert not assumptions.covers("c[0]@d1", "c[0]@d10 block (1,)")


def test_unknown_name_is_an_error():
    with pytest.raises(AssumptionError, match="no input named 'c'.*inputs: a"):
        assumptions.apply_all([_protocol(ir.Input("a", 0, 1))], [Assumption("c", 0, 1)], source="f.py")


# --- semcheck.assume in a file --------------------------------------------------------------

MODEL_WITH_ASSUME = """
import semcheck
from semcheck.ir import BinOp
from semcheck.model import ProtocolBuilder

semcheck.assume("k", 0, {hi})  # what the router guarantees


def model(devices):
    p = ProtocolBuilder("assumed", devices=devices)
    k = p.input("k", -2**31, 2**31 - 1)  # all a frontend knows: an int32
    sem = p.semaphore("sem")
    for d in range(devices):
        t = p.thread(d)
        t.signal(sem, k, device=(d + 1) % devices)
        t.wait(sem, BinOp("min", k, 8))  # wrong once k > 8
    return p.build()
"""


def _write(tmp_path, text, name="assumed.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_file_assumption_bounds_the_input(tmp_path):
    path = _write(tmp_path, MODEL_WITH_ASSUME.format(hi=8))
    (protocol,) = load(path, 2)
    assert [(i.name, i.lo, i.hi) for i in protocol.inputs] == [("k", 0, 8)]
    assert check_protocol(protocol, engine="explicit").verdict.value == "safe"
    assert check_protocol(protocol, engine="z3").verdict.value == "safe"


def test_file_assumption_with_a_bug_inside_the_range(tmp_path):
    (protocol,) = load(_write(tmp_path, MODEL_WITH_ASSUME.format(hi=9)), 2)
    result = check_protocol(protocol, engine="z3")
    assert [v.kind for v in result.errors] == ["semaphore_leftover"]
    assert result.errors[0].inputs == {"k": 9}


def test_file_assumption_naming_no_input_is_a_load_error(tmp_path):
    path = _write(tmp_path, MODEL_WITH_ASSUME.format(hi=8).replace('assume("k"', 'assume("kk"'))
    with pytest.raises(LoadError, match="kk"):
        load(path, 2)


def test_assume_outside_a_load_changes_nothing():
    before = len(assumptions._scopes.stack)
    with assumptions.collecting() as inner:
        semcheck.assume("x", 0, 1)
    assert [str(a) for a in inner] == ["x=0..1"]
    assert len(assumptions._scopes.stack) == before
    (protocol,) = load(RING, 2)  # a later load sees none of it
    assert protocol.inputs == ()


# --- the command line -----------------------------------------------------------------------


def _run(capsys, *argv):
    code = cli.main(["verify", *argv, "-q"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_assume_narrows_to_the_safe_range(capsys):
    code, out, _ = _run(capsys, MOE, "--devices", "2", "--assume", "tokens=0..63")
    assert code == 0, out


def test_cli_assume_pins_the_bad_value_and_reports_it(capsys):
    code, out, _ = _run(capsys, MOE, "--devices", "2", "--assume", "tokens=64", "--format", "json")
    assert code == 1
    (result,) = json.loads(out)["results"]
    (violation,) = result["violations"]
    assert violation["kind"] == "unsatisfied_wait" and violation["inputs"] == {"tokens": 64}


def test_cli_text_report_shows_input_values(capsys):
    code, out, _ = _run(capsys, MOE, "--devices", "2", "--engine", "z3")
    assert code == 1
    assert "with inputs: tokens = 64" in out
    assert re.search(r"\d solver quer(y|ies), ", out) and "z3)" in out


def test_cli_unknown_assume_name_exits_2(capsys):
    code, _, err = _run(capsys, MOE, "--devices", "2", "--assume", "tokenz=0..3")
    assert code == 2
    assert "no input named 'tokenz'" in err and "tokens" in err


def test_cli_malformed_assume_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["verify", MOE, "--assume", "tokens:0-3"])
    assert exit_info.value.code == 2
    assert "NAME=LO..HI" in capsys.readouterr().err


# --- engine auto -------------------------------------------------------------------------------


def test_auto_is_the_default_and_picks_explicit_for_small_inputs(capsys):
    code, out, _ = _run(capsys, MOE, RING, "--devices", "2", "--format", "json")
    assert code == 1
    results = json.loads(out)["results"]
    assert [(r["kernel"], r["engine"]) for r in results] == [
        ("moe_dispatch_capacity", "explicit"), ("ring_allgather", "explicit"),
    ]
    assert all("solver_queries" not in r["stats"] for r in results)


def test_auto_picks_z3_for_wide_inputs_and_says_so(capsys):
    code, out, _ = _run(capsys, MOE, "--devices", "4", "--assume", "tokens=0..100000", "--format", "json")
    assert code == 1
    (result,) = json.loads(out)["results"]
    assert result["engine"] == "z3"
    assert result["stats"]["solver_queries"] >= 1
    assert any("engine auto chose z3" in note and "100,001" in note for note in result["notes"])
    assert result["violations"][0]["inputs"]["tokens"] >= 64


def test_auto_runs_z3_beside_a_search_that_looks_wide(every_engine_joins):
    """(Which engine answers first is a race: tests/test_auto.py plays it out with stand-ins.)"""
    (protocol,) = load(MOE, 4)  # 64 start states of a few dozen states each
    result = check_protocol(protocol, engine="auto", assume=[Assumption("tokens", 0, 63)])
    assert result.verdict.value == "safe"
    assert [run.engine for run in result.runs][0] == "explicit" and len(result.runs) >= 2
    assert [run.decided for run in result.runs].count(True) == 1
    assert result.engine == next(run.engine for run in result.runs if run.decided) in ("explicit", "z3")
    assert result.notes[0].startswith("engine auto: the explicit search looked wide")


def test_auto_keeps_the_users_own_state_budget(capsys):
    """--max-states below auto's share is the user's limit: inconclusive, exit 3, as with
    --engine explicit."""
    code, out, _ = _run(capsys, RING, "--devices", "4", "--no-reduction", "--max-states", "1000",
                        "--format", "json")
    assert code == 3
    (result,) = json.loads(out)["results"]
    assert (result["verdict"], result["engine"]) == ("inconclusive", "explicit")
    assert "state budget of 1,000 states ran out" in result["notes"][0]


def test_input_combinations():
    p = _protocol(ir.Input("a", 0, 9), ir.Input("b", -1, 1))
    assert auto.input_combinations(p) == 30
    assert auto.input_combinations(_protocol()) == 1


def test_files_loaded_from_two_threads_keep_their_own_assumptions(tmp_path):
    """A thread pool loading files at once (as a test suite's prefetch does): each load
    collects only the assume calls its own file made."""
    import threading

    started = threading.Barrier(2)
    seen = {}

    def collect(name):
        with assumptions.collecting() as mine:
            started.wait()  # both scopes are open before either thread assumes anything
            semcheck.assume(name, 0, 1)
            started.wait()
        seen[name] = [a.name for a in mine]

    threads = [threading.Thread(target=collect, args=(name,)) for name in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": ["a"], "b": ["b"]}


DATA_KERNEL = os.path.join(os.path.dirname(__file__), "data_kernels", "signal_count_from_data.py")


def test_cli_assume_reaches_a_buffer_element_the_data_would_decide(capsys):
    """Without --assume the script's 3 decides (safe); --assume count_ref[0]=0..8 makes the
    loaded element an input per device over 0..8, so counts below 3 leave the wait
    unsatisfied and counts above it leave the semaphore nonzero."""
    code, out, _ = _run(capsys, DATA_KERNEL, "--devices", "2", "--format", "json")
    assert code == 0, out
    (result,) = json.loads(out)["results"]
    line = _line_of(DATA_KERNEL, "pl.semaphore_signal(sem, count_ref[0])")
    assert result["data_uses"] == [
        {"what": "the signal increment", "location": {"file": ir.display_path(DATA_KERNEL), "line": line},
         "device": device, "core": 0, "value": 3, "script_inputs": ["count_ref"], "buffers": ["count_ref"]}
        for device in (0, 1)
    ]
    code, out, _ = _run(capsys, DATA_KERNEL, "--devices", "2", "--assume", "count_ref[0]=0..8", "--format", "json",
                        "--exhaustive")
    assert code == 1, out
    (result,) = json.loads(out)["results"]
    assert {v["kind"] for v in result["violations"]} == {"unsatisfied_wait", "semaphore_leftover"}
    assert not result["data_uses"]  # nothing was taken from the script's 3


def _line_of(path: str, text: str) -> int:
    with open(path) as f:
        return next(n for n, line in enumerate(f, 1) if text in line)
