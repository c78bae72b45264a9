"""The text report's additions: what fed each wait, every line threads are stuck at, and the
summary table a folder run ends with."""

import os

from semcheck.api import verify_path
from semcheck.report import summary, text
from semcheck.result import Verdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")


def results(name, devices=(4,)):
    return verify_path(os.path.join(MODELS, name + ".py"), list(devices))


def test_trace_steps_name_the_steps_that_fed_a_wait():
    [r] = results("ring_recv_before_send")
    report = text.render([r], verbose=True)  # every step (the default folds some)
    [violation] = r.errors
    for step in violation.trace:
        line = next(line for line in report.splitlines() if line.lstrip().startswith(f"{step.index}. "))
        if step.fed_by:
            assert f"<- step{'s' if len(step.fed_by) > 1 else ''} {', '.join(map(str, step.fed_by))}" in line
        else:
            assert "<- step" not in line
    assert any(step.fed_by for step in violation.trace)


def test_every_stuck_line_is_quoted():
    report = text.render(results("ring_allgather_missing_signal"))
    assert "|         t.wait(barrier, 2)" in report  # the root
    assert "also stuck at:" in report and "|             copy.wait_recv()" in report  # behind it


def test_summary_table_has_a_row_per_check_and_totals():
    warned = verify_path(os.path.join(ROOT, "examples", "tpu", "nondecrementing_poll_leftover.py"), [2])
    rs = (results("ring_allgather", (2, 4)) + results("nondec_poll_leak", (2,)) + warned
          + verify_path("no/such.py", [2]))
    table = summary.summary_table(rs)
    lines = table.splitlines()
    assert lines[1].split() == ["kernel", "devices", "verdict", "states", "time", "file"]
    rows = [line.split() for line in lines[3:-1]]
    assert rows[0][:3] == ["ring_allgather", "2", "safe"]
    assert rows[1][:2] == ["4", "safe"]  # the kernel's name is not repeated
    assert rows[2][:3] == ["nondec_poll_leak", "2", "semaphore_leftover"]
    assert rows[3][:3] == ["check_in_kernel", "2", "safe"] and "(+lowered_as_decrementing)" in lines[6]
    assert rows[4][:3] == ["such", "2", "error"]
    assert lines[-1].strip().startswith("5 checks of 4 kernels: 3 safe, 1 violation, 1 error;")


def test_totals_count_each_verdict_in_plain_words():
    # the totals line said "2 violation" and "2 error": a count before the verdict's name
    rs = results("ring_allgather", (2,)) + results("nondec_poll_leak", (2, 4)) + verify_path("no/such.py", [2]) + verify_path("no/other.py", [2])
    assert summary.totals_line(rs).startswith("5 checks of 4 kernels: 1 safe, 2 violations, 2 errors;")
    assert summary.verdict_counts({Verdict.SAFE: 2, Verdict.INCONCLUSIVE: 2}) == "2 safe, 2 inconclusive"


def test_a_folder_run_ends_with_the_table():
    report = text.render(verify_path(MODELS, [2]))
    models = len([n for n in os.listdir(MODELS) if n.endswith(".py")])
    assert report.rstrip().splitlines()[-1].startswith(f"  {models} checks of {models} kernels")


def test_a_gpu_thread_is_named_by_its_block():
    """Under GPU rules the second index of a thread counts blocks of the launch, not cores."""
    from semcheck.api import check_protocol
    from semcheck.model import ProtocolBuilder
    from semcheck.report import graph, sarif

    p = ProtocolBuilder("blocks", devices=1, cores=2, backend="gpu")
    arrived = p.global_semaphore("arrived")
    for block in range(2):
        p.thread(0, block).signal(arrived)
        p.thread(0, block).wait(arrived, 2)  # decrementing: the first through strands the other
    r = check_protocol(p.build(), engine="explicit")
    report = text.render([r])
    assert "device 0 block" in report and "core" not in report
    [violation] = r.errors
    assert all("block" in label for _, label in graph.counterexample_graph(r, violation).graph["lanes"])
    assert "device 0 block" in sarif.render([r]) and "device 0 core" not in sarif.render([r])



def test_a_protocol_z3_declines_before_encoding_still_gets_its_verdict_line():
    """z3 leaves a jump over a kernel entry to the explicit engine: it answers without
    encoding, so the result has a query count but no event count (the report used to crash
    on it)."""
    from semcheck.api import check_protocol
    from semcheck.model import ProtocolBuilder

    p = ProtocolBuilder("skip", devices=1)
    k = p.input("k", 0, 1)
    t = p.thread(0)
    skip = t.new_label()
    t.branch(k, skip)
    t.entry()
    t.place(skip)
    t.exit()
    r = check_protocol(p.build(), engine="z3")
    assert r.stats.encoded_events is None and r.stats.solver_queries is not None
    [line] = [line for line in text.render([r]).splitlines() if line.startswith(r.verdict.value.upper())]
    assert "solver queries" in line and "events" not in line
    # ... and the line says why there is no verdict, not that a budget ran out
    assert "does not model a jump that skips or repeats a kernel entry" in line and "budget" not in line
    from semcheck.report import concise

    assert "does not model a jump that skips" in concise.check_problem(r)


def _moe_like_checks():
    """One kernel at 2 devices (safe) and 4 devices (an entry race), each with a data note of
    its own and one note they share, as `moe_entry_left_only.py` gives."""
    from semcheck.ir import Loc
    from semcheck.result import Result, Stats, Verdict, Violation

    shared = "collective_id=0 is set, so no default device barrier runs before the body"
    def check(devices, verdict, violations):
        own = f"the loaded ref at k.py:98 is taken from data on {devices} thread(s), values 0, 1"
        return Result("moe", "k.py", 1, "tpu", "tpu", devices, 1, "explicit", verdict, violations,
                      Stats(), notes=[shared, own])
    entry = Violation("remote_before_entry", "error", "a peer may not have entered", 1, 0, Loc("k.py", 79))
    return [check(2, Verdict.SAFE, []), check(4, Verdict.VIOLATION, [entry])], shared


def test_each_note_says_which_device_counts_it_belongs_to():
    """Notes of several checks were pooled without labels: the 2-device data notes read as
    the 4-device violation's, and with expectations the 4-device notes were dropped."""
    from semcheck.run.expectations import Expectation, judge

    checks, shared = _moe_like_checks()
    declared = [Expectation(frozenset(), where="k.py:15"), Expectation(frozenset({"remote_before_entry"}), where="k.py:15")]
    for judgements in (None, [judge(r, e) for r, e in zip(checks, declared)]):
        notes = [line for line in text.render(checks, judgements=judgements, verbose=True).splitlines()
                 if line.startswith("  note")]
        assert notes == [
            f"  note [at 2, 4 devices]: {shared}",
            "  note [at 2 devices]: the loaded ref at k.py:98 is taken from data on 2 thread(s), values 0, 1",
            "  note [at 4 devices]: the loaded ref at k.py:98 is taken from data on 4 thread(s), values 0, 1",
        ]
    every = text.render(checks, judgements=[judge(r, e) for r, e in zip(checks, declared)], all_traces=True,
                        verbose=True)
    assert "on 4 thread(s)" in every  # a check as declared keeps its notes there too


def test_a_kernel_checked_once_keeps_unlabelled_notes():
    checks, shared = _moe_like_checks()
    assert f"  note: {shared}" in text.render(checks[:1], verbose=True).splitlines()


def test_notes_are_counted_unless_verbose():
    """Modelling notes (most of a folder check's output) are behind -v: the report counts them."""
    checks, shared = _moe_like_checks()
    report = text.render(checks)
    assert "note" not in report.replace("3 modelling notes", "")
    assert "  3 modelling notes (what the verdicts rest on): shown with -v, and in --format json and sarif" in report


def test_counts_of_one_are_singular_in_the_verdict_line():
    # circular_wait is stuck in its initial state: it said "(1 states, 0 transitions, ...)"
    [verdict] = [line for line in text.render(results("circular_wait", (2,))).splitlines()
                 if line.startswith("VIOLATION: ")]
    assert "  (1 state, 0 transitions, " in verdict
    [by_z3] = [line for line in text.render(verify_path(os.path.join(MODELS, "circular_wait.py"), [2], engine="z3"))
               .splitlines() if line.startswith("VIOLATION: ")]
    assert "  (4 events, 1 solver query, " in by_z3, by_z3
