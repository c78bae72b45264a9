"""Threads that share no semaphore, buffer or input are checked one independent part at a
time (`engines/components.py`): the same findings as one search of the whole protocol, for
the sum of the parts' states instead of their product."""

from __future__ import annotations

import functools
import glob
import os

import pytest
from hypothesis import HealthCheck, assume, given, settings

from semcheck import api
from semcheck.engines import components
from semcheck.engines.budget import Budget
from semcheck.frontends import model_file
from semcheck.model import ProtocolBuilder
from semcheck.semantics import System
from tests.strategies import control_flow_protocols, protocols

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every test here holds the split check to the whole one: both report every finding.
check_protocol = functools.partial(api.check_protocol, exhaustive=True)


def competing_waits(devices: int, blocks: int = 4):
    """Per device, every block adds 1 to the device's own semaphore and then takes all of
    it: the first through strands the others (examples/gpu/grid_barrier_competing_waits.py)."""
    p = ProtocolBuilder("competing_waits", devices=devices, cores=blocks, backend="gpu")
    arrived = p.global_semaphore("arrived")
    for d in range(devices):
        for b in range(blocks):
            t = p.thread(d, b)
            t.signal(arrived)
            t.wait(arrived, blocks)
    return p.build()


def identities(result, at_end=None):
    return {v.identity for v in result.violations if at_end is None or v.at_end == at_end}


def test_devices_that_share_nothing_are_parts_of_their_own():
    assert components.parts(System(competing_waits(3, blocks=2))) == [(0, 1), (2, 3), (4, 5)]


@pytest.mark.parametrize("name", ["ring_allgather", "circular_wait", "ring_allgather_missing_signal"])
def test_a_ring_is_one_part(name):
    protocol = model_file.load(os.path.join(ROOT, "models", name + ".py"), 4)
    assert components.parts(System(protocol)) == [tuple(range(4))]


def test_one_input_read_by_two_threads_joins_them():
    p = ProtocolBuilder("shared_input", devices=2)
    s = p.semaphore("s")
    n = p.input("n", 1, 2)
    for d in range(2):
        p.thread(d).signal(s, n)
        p.thread(d).wait(s, n)
    assert components.parts(System(p.build())) == [(0, 1)]


def test_parts_cost_the_sum_of_their_states_and_find_what_the_whole_finds():
    # the whole without symmetry: the product of its parts (symmetry merges its 4 identical
    # devices to 171 states)
    whole = check_protocol(competing_waits(4), engine="explicit", split=False, symmetry=False)
    split = check_protocol(competing_waits(4), engine="explicit")
    part = check_protocol(competing_waits(1), engine="explicit")
    assert (whole.verdict.value, split.verdict.value) == ("violation", "violation")
    assert [v.kind for v in split.violations] == ["unsatisfied_wait"]  # one line: one violation
    assert identities(split) == identities(whole)
    assert split.stats.states == 4 * part.stats.states == 4 * 9
    assert whole.stats.states == 357  # the mixes of four parts' schedules
    assert any("4 independent parts" in note for note in split.notes)


def test_blocked_waits_name_the_whole_protocols_threads():
    protocol = competing_waits(3, blocks=2)
    [v] = check_protocol(protocol, engine="explicit").violations
    for b in v.blocked:
        thread = protocol.threads[b.thread]
        assert (thread.device, thread.core) == (b.device, b.core)


def test_one_budget_is_shared_by_the_parts():
    """Parts of 9 states each, 50 states in all: the parts after the budget ran out are not
    checked, and a stuck wait is only the whole's if every other part can end, which is not
    known of those: inconclusive, not a violation."""
    result = check_protocol(competing_waits(8), engine="explicit", budget=Budget(max_states=50))
    assert result.verdict.value == "inconclusive" and result.violations == []
    assert 50 <= result.stats.states <= 50 + 9
    assert any("state budget of 50 states ran out after" in note for note in result.notes)


def test_a_fault_found_before_the_budget_ran_out_still_counts():
    p = ProtocolBuilder("fault_then_parts", devices=8)
    s = p.semaphore("s")
    p.thread(0).signal(s, device=8)
    for d in range(1, 8):
        p.thread(d).signal(s)
        p.thread(d).wait(s)
    result = check_protocol(p.build(), engine="explicit", budget=Budget(max_states=3))
    assert result.verdict.value == "violation"
    assert [v.kind for v in result.violations] == ["invalid_device_id"]
    assert any("ran out after" in note for note in result.notes)


def test_a_fault_in_one_part_hides_what_is_stuck_at_the_end_of_another():
    """As in one search: the thread whose signal went nowhere shares nothing with the one
    that waits for it, and only the fault is reported."""
    protocol = _misdirected()
    assert len(components.parts(System(protocol))) == 2
    split = check_protocol(protocol, engine="explicit")
    whole = check_protocol(protocol, engine="explicit", split=False)
    assert [v.kind for v in split.violations] == [v.kind for v in whole.violations] == ["invalid_device_id"]


def test_faults_of_different_parts_stay_apart():
    p = ProtocolBuilder("two_faults", devices=2)
    s = p.semaphore("s")
    for d in range(2):
        p.thread(d).signal(s, device=5)
    split = check_protocol(p.build(), engine="explicit")
    assert sorted(v.device for v in split.violations) == [0, 1]
    first = api.check_protocol(p.build(), engine="explicit")  # the default: the first part's fault ends it
    assert [v.device for v in first.violations] == [0] and first.first_only
    assert any("stopped at the first violation, after 1 of 2 independent parts" in n for n in first.notes)


def _agree(protocol):
    budget = Budget(max_states=100_000)
    options = dict(engine="explicit", budget=budget, silence_reported_races=False)
    whole = check_protocol(protocol, split=False, **options)
    assume(whole.verdict.value != "inconclusive")
    split = check_protocol(protocol, **options)
    assert split.verdict == whole.verdict, protocol
    assert identities(split) == identities(whole), protocol
    assert split.stats.states <= whole.stats.states + len(components.parts(System(protocol)))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(protocols())
def test_split_and_whole_find_the_same(protocol):
    _agree(protocol)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(control_flow_protocols(max_devices=3, max_blocks=3))
def test_split_and_whole_find_the_same_with_control_flow_and_inputs(protocol):
    _agree(protocol)


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "models", "*.py"))), ids=os.path.basename)
def test_every_model_gets_the_same_verdict_split_or_whole(path):
    protocol = model_file.load(path, 4)
    split = check_protocol(protocol, engine="explicit")
    whole = check_protocol(protocol, engine="explicit", split=False)
    assert split.verdict == whole.verdict
    assert {v.kind for v in split.violations} == {v.kind for v in whole.violations}


@pytest.mark.parametrize("engine", ["z3", "auto"])
def test_every_engine_merges_parts_alike(engine):
    """The z3 engine says how its end states ended too: a stuck wait needs every other part
    to end without a fault, a leftover every other part to end with nothing blocked."""
    for protocol in (competing_waits(3), _leftover_beside_a_stuck_part(), _leftover_beside_a_clean_part(),
                     _misdirected()):
        whole = check_protocol(protocol, engine="explicit", split=False)
        split = check_protocol(protocol, engine=engine)
        assert (split.verdict, identities(split)) == (whole.verdict, identities(whole)), protocol.name


def _leftover_beside_a_stuck_part():
    """Device 0 leaves its semaphore at 1; device 1 always hangs, so the kernel never exits
    and the leftover is never seen."""
    p = ProtocolBuilder("leftover_beside_stuck", devices=2)
    s = p.semaphore("s")
    p.thread(0).signal(s)
    p.thread(1).wait(s)
    return p.build()


def _leftover_beside_a_clean_part():
    """Device 0 leaves its semaphore at 1; device 1 always finishes cleanly, which z3 is
    asked about only because the merge needs it: the leftover is the kernel's."""
    p = ProtocolBuilder("leftover_beside_clean", devices=2)
    s = p.semaphore("s")
    p.thread(0).signal(s)
    p.thread(1).signal(s)
    p.thread(1).wait(s)
    return p.build()


def _misdirected():
    p = ProtocolBuilder("misdirected", devices=2)
    s = p.semaphore("s")
    p.thread(0).signal(s, device=2)
    p.thread(1).wait(s)
    return p.build()


def test_progress_counts_the_whole_check_and_names_the_part():
    from semcheck.engines.budget import ProgressInfo

    seen = []
    report = components._labelled(seen.append, 3, 8, states_before=1_000, seconds_before=4.0)
    report(ProgressInfo(states=500, transitions=600, seconds=1.0, frontier=10, depth=5))
    [info] = seen
    assert (info.states, info.seconds, info.part) == (1_500, 5.0, "part 3 of 8")
    assert info.rate == 300  # states per second of the whole check, not of this part alone


def test_the_cli_progress_line_names_the_part(capsys):
    from semcheck import cli
    from semcheck.engines.budget import ProgressInfo

    show = cli._progress_printer("barrier_kernel", 8)
    show(ProgressInfo(states=1_500, transitions=0, seconds=5.0, frontier=1, depth=2, part="part 3 of 8"))
    assert "barrier_kernel [8 devices, part 3 of 8]: 1,500 states" in capsys.readouterr().err
