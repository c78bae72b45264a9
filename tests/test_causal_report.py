"""Causal traces and the missing action: a trace shows the happens-before past of the
violation (not every thread's chatter), `--max-trace-steps` keeps the closest steps, and a
stuck wait or a leftover names the sites that could change its semaphore."""

import os

from semcheck import cli
from semcheck.api import check_protocol, verify_path
from semcheck.model import ProtocolBuilder
from semcheck.report import text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def model(name):
    return os.path.join(ROOT, "models", name + ".py")


def only_error(name, devices):
    [r] = verify_path(model(name), [devices])
    [v] = r.errors
    return r, v


def shown(v):
    return [s.index for s in text.relevant_steps(v)]


def test_the_eight_device_missing_signal_trace_is_its_causal_past():
    r, v = only_error("ring_allgather_missing_signal", 8)
    assert len(v.trace) == 155  # the path the search found
    steps = [s for s in v.trace if s.relevance is not None]
    assert len(steps) <= 30
    # Device 7's own two signals, and the one signal that reached its barrier with the
    # step of that device before it; nothing of the copies that follow.
    assert [(s.actor, s.location.line) for s in steps] == [
        ("device 6", 28), ("device 6", 29), ("device 7", 28), ("device 7", 29)]
    assert all(s.event == "signal" for s in steps)
    report = text.render([r], verbose=True)
    assert "the 4 of its 155 steps that it depends on (151 elided)" in report
    assert "shortest" not in report


def test_every_wait_in_the_slice_keeps_what_fed_it():
    _, v = only_error("ring_recv_before_send", 4)
    kept = {s.index for s in v.trace if s.relevance is not None}
    for s in v.trace:
        if s.index in kept:
            assert set(s.fed_by) <= kept
            assert s.started_by is None or s.started_by in kept


def test_max_trace_steps_keeps_the_steps_closest_to_the_violation():
    r, v = only_error("ring_allgather_missing_signal", 8)
    closest = text.relevant_steps(v, limit=2)
    # Distance 1: device 7's last step and the signal that reached its barrier.
    assert [(s.actor, s.location.line) for s in closest] == [("device 6", 29), ("device 7", 29)]
    assert all(s.relevance == 1 for s in closest)


def test_a_fault_keeps_only_its_own_thread():
    p = ProtocolBuilder("noise", devices=3)
    sem = p.semaphore("sem")
    for d in (1, 2):
        t = p.thread(d)
        for _ in range(3):
            t.signal(sem, device=d)
            t.wait(sem)
    t0 = p.thread(0)
    t0.signal(sem, device=0)
    t0.signal(sem, device=5)
    [v] = check_protocol(p.build(), engine="explicit").errors
    assert v.kind == "invalid_device_id"
    kept = [s for s in v.trace if s.relevance is not None]
    assert [s.actor for s in kept] == ["device 0", "device 0"]
    assert kept[-1].relevance == 0 and kept[-1].index == len(v.trace)


def test_unsatisfied_wait_names_what_ran_and_the_missing_signal():
    r, v = only_error("ring_allgather_missing_signal", 8)
    [m] = v.missing
    assert (m.semaphore, m.needs, m.has) == ("barrier@d7", 2, 1)
    [site] = m.sites  # only device 6's right signal can ever add to device 7's barrier
    assert (site.thread, site.location.line, site.ran, site.not_run) == ("device 6", 29, 1, None)
    [absent] = m.absent
    assert absent.location.line == 28 and absent.missing_on == ("device 0",)
    assert len(absent.reaches) == 7 and "barrier@d7" not in absent.reaches
    report = text.render([r])
    assert "semaphore_signal at line 29 on device 6 ran and added to it" in report
    assert "but device 0 has no such semaphore_signal: none reaches barrier@d7" in report
    assert "    fix: " in report


def test_deadlock_names_the_signal_that_never_runs_and_why():
    _, v = only_error("circular_wait", 4)
    [m] = v.missing
    [site] = m.sites
    assert site.ran == 0 and site.not_run == "device 1 is stuck at line 20, before it"


def test_leftover_says_nothing_takes_from_it():
    [r] = verify_path(model("nondec_poll_leak"), [4])
    [v] = r.errors
    [m] = v.missing
    assert m.needs is None and m.has == 3
    assert not [s for s in m.sites if not s.adds]  # no site takes from it
    assert sorted(s.thread for s in m.sites) == ["device 1", "device 2", "device 3"]
    assert "nothing in the kernel can take from it" in text.render([r])


def test_every_kind_has_a_fix_hint():
    from semcheck.semantics.properties import FIX_HINTS, Kind

    assert set(FIX_HINTS) == set(Kind)
    for name in ("ring_allgather_missing_signal", "circular_wait", "remote_out_of_range", "dma_wait_mismatch"):
        [r] = verify_path(model(name), [2])
        assert all(v.hint for v in r.violations)


def test_cli_max_trace_steps(capsys):
    cli.main(["verify", model("ring_allgather_missing_signal"), "--devices", "8", "--max-trace-steps", "2", "-q"])
    out = capsys.readouterr().out
    assert "the 2 of its 155 steps that it depends on (153 elided)" in out


# --- notebooks --------------------------------------------------------------------------------


def test_result_repr_is_one_line():
    [r] = verify_path(model("ring_allgather_missing_signal"), [4])
    line = repr(r)
    assert "\n" not in line and len(line) < 200
    assert line == (f"<Result ring_allgather_missing_signal [4 devices, tpu]: VIOLATION: unsatisfied_wait at "
                    f"{os.path.relpath(model('ring_allgather_missing_signal'))}:30 (38 states, explicit)>")
    [v] = r.errors
    assert "\n" not in repr(v) and repr(v).startswith("<Violation unsatisfied_wait (device 3) at ")
    [safe] = verify_path(model("ring_allgather"), [2])
    assert repr(safe) == "<Result ring_allgather [2 devices, tpu]: SAFE (17 states, explicit)>"


def test_the_repr_of_a_proof_for_every_device_count_says_so():
    # it said "[0 devices, tpu]": devices is 0 in the Result of --devices all
    [proof] = verify_path(model("ring_allgather"), "all")
    assert repr(proof).startswith("<Result ring_allgather [every device count, tpu]: SAFE (")
    [one] = verify_path(model("ring_allgather"), [1])
    assert repr(one).startswith("<Result ring_allgather [1 device, tpu]: SAFE (")


def test_result_html_repr_has_the_report_and_the_picture():
    [r] = verify_path(model("ring_allgather_missing_signal"), [2])
    page = r._repr_html_()
    assert page.startswith('<div class="semcheck-result">')
    assert "<pre" in page and "unsatisfied_wait (device 1) at" in page
    assert "t.wait(barrier, 2)" in page  # the quoted source, escaped into the <pre>
    assert page.count("<svg") == 1 and "<?xml" not in page
