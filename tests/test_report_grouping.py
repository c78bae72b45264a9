"""One problem, one report: a bug found at several device counts is shown once, by its
smallest counterexample, in the text report, the summary and the JSON `groups` view."""

import json
import os

from semcheck import cli
from semcheck.api import verify_path
from semcheck.report import groups, text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")


def model(name):
    return os.path.join(MODELS, name + ".py")


def test_one_missing_signal_at_three_device_counts_is_one_group():
    results = verify_path(model("ring_allgather_missing_signal"), [8, 2, 4])
    [group] = groups.group(results)
    assert group.key.kind == "unsatisfied_wait" and group.key.semaphore == "barrier"
    assert results[group.shown.result].devices == 2  # the smallest counterexample
    assert [results[ref.result].devices for ref in group.also] == [4, 8]


def test_text_shows_the_smallest_trace_once_and_names_the_other_counts():
    results = verify_path(model("ring_allgather_missing_signal"), [2, 4, 8])
    report = text.render(results)
    assert report.count("error: unsatisfied_wait") == 1
    assert "error: unsatisfied_wait (device 1) at " in report  # device N-1 of the 2-device check
    assert "[at 2 devices; also at 4, 8 devices]" in report
    # the three checks say the same but for their size: one verdict line, and no summary
    # table repeating it for one kernel
    [verdict] = [line for line in report.splitlines() if line.startswith("VIOLATION: ")]
    assert "[2, 4, 8 devices, " in verdict and " states, " in verdict
    assert [f"{r.stats.states:,}" for r in results] == verdict.rsplit("  (", 1)[1].split(" states")[0].split(" / ")
    assert "summary:" not in report
    both = text.render(results + verify_path(model("ring_allgather"), [2]))
    assert "1 distinct problem:" in both and "at 2, 4, 8 devices" in both
    every = text.render(results, all_traces=True)
    assert every.count("error: unsatisfied_wait") == 3 and "also at" not in every


def test_different_problems_stay_apart():
    results = verify_path(model("ring_allgather_missing_signal"), [2]) + verify_path(model("circular_wait"), [2])
    assert len(groups.group(results)) == 2


def test_the_readmes_first_command_fits_a_screen(capsys):
    code = cli.main(["verify", model("ring_allgather"), model("ring_allgather_missing_signal"),
                     "--devices", "2,4,8", "-q"])
    out = capsys.readouterr().out
    assert code == 1
    assert len(out.splitlines()) <= 60


def test_json_groups_point_at_every_check_and_keep_results(capsys):
    cli.main(["verify", model("ring_allgather_missing_signal"), "--devices", "2,4", "--format", "json", "-q"])
    doc = json.loads(capsys.readouterr().out)
    assert [r["devices"] for r in doc["results"]] == [2, 4]
    assert all(len(r["violations"]) == 1 for r in doc["results"])  # results unchanged: one per check
    [group] = doc["groups"]
    assert group["kind"] == "unsatisfied_wait" and group["location"]["line"] == 30
    assert group["shown"] == group["checks"][0] and group["shown"]["devices"] == 2
    assert [(c["result"], c["violation"], c["devices"]) for c in group["checks"]] == [(0, 0, 2), (1, 0, 4)]


def _pairs_deadlocking(devices: int):
    """Devices 2k and 2k+1 each wait for the other's token before giving their own: one
    deadlock per pair, each on its own semaphores, all at one line."""
    from semcheck.model import ProtocolBuilder

    p = ProtocolBuilder("pairs", devices=devices)
    token = p.semaphore("token")
    for d in range(devices):
        t = p.thread(d)
        t.wait(token)
        t.signal(token, device=d ^ 1)
    return p.build()


def test_a_problem_found_twice_in_one_check_is_not_said_to_be_found_at_it_again():
    from semcheck.api import check_protocol

    four, eight = (check_protocol(_pairs_deadlocking(n)) for n in (4, 8))
    assert [v.kind for v in four.errors] == ["deadlock", "deadlock"]  # one per pair
    [group] = groups.group([four])
    assert len(group.also) == 1  # the other pair: the same problem, in the same check
    report = text.render([four])
    assert report.count("error: deadlock") == 1 and "also at" not in report and "[at 4 devices" not in report
    both = text.render([four, eight])
    assert "[at 4 devices; also at 8 devices]" in both


def _stuck_on_every_core(devices: int):
    """Each core of each device waits for a signal nobody sends: an unsatisfied wait."""
    from semcheck.model import ProtocolBuilder

    p = ProtocolBuilder("stuck_cores", devices=devices, cores=2)
    never = p.semaphore("never")
    for d in range(devices):
        for c in range(2):
            p.thread(d, c).wait(never, 1)
    return p.build()


def test_a_multi_core_check_is_named_devices_then_cores():
    # the summary said "at 2, 4 x 2 cores devices": the device unit belongs after the devices
    from semcheck.api import verify_model

    results = [verify_model(_stuck_on_every_core, devices=n) for n in (2, 4)]
    both = text.render(results + verify_path(model("ring_allgather"), [2]))
    [problem] = [line for line in both.splitlines() if line.strip().startswith("unsatisfied_wait ")]
    assert problem.endswith("at 2, 4 devices x 2 cores"), problem
    assert "[at 2 devices x 2 cores; also at 4 devices x 2 cores]" in both
    assert groups.sizes_text([results[0], verify_path(model("ring_allgather"), [4])[0]]) == \
        "2 devices x 2 cores, 4 devices"
