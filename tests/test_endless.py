"""The non-progress check: a loop that polls for ever is a hang even though no wait is
blocked (`engines/explicit/endless.py`)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck
from hypothesis import strategies as st

from semcheck import ir
from semcheck.semantics import trace as tracing
from semcheck.api import check_protocol
from semcheck.engines.explicit import search as explicit
from semcheck.engines.explicit.proviso import PROVISO_FLOOR
from semcheck.frontends import model_file
from semcheck.ir import Backend, BinOp
from semcheck.kinds import Kind
from semcheck.model import ProtocolBuilder
from semcheck.semantics import System
from semcheck.engines.options import ExplicitOptions
from tests.tiers import example_counts, run_examples
from tests.tpu_kernels import line_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEVER_SET = os.path.join(ROOT, "models", "poll_flag_never_set.py")


def load(name, devices):
    return model_file.load(os.path.join(ROOT, "models", name + ".py"), devices)


@pytest.mark.parametrize("devices", [2, 4, 8])
def test_a_poll_that_can_always_leave_is_safe(devices):
    exploration = explicit.explore(System(load("poll_flag", devices)))
    assert exploration.findings == {} and exploration.exhausted is None


@pytest.mark.parametrize("devices", [2, 4, 8])
def test_a_poll_for_a_value_that_never_comes_spins_for_ever(devices):
    protocol = load("poll_flag_never_set", devices)
    system = System(protocol)
    exploration = explicit.explore(system)
    [(finding, initial, actions)] = exploration.findings.values()
    assert finding.kind.value == "unsatisfied_wait"
    assert finding.loc.line == line_of(NEVER_SET, "seen = t.read(flag)")
    assert "loops for ever" in finding.message and "flag on device" in finding.message
    # The trace is a lasso: replayed, its last steps come back to a state seen before.
    states = [*tracing.replay(system, initial, actions), None]
    final = initial
    for action in actions:
        final = system.step(final, action)
    assert final in states[:-1]
    assert system.enabled(final)  # nothing is stuck: the thread keeps moving


def test_the_unreduced_search_finds_the_same_hang_in_more_states():
    """Once every flag has landed, each device's read is a stubborn set of its own, so the
    reduced search went round device 0's loop alone and never moved the others (16
    states): right here, where their loops are the same line, but a thread it never moved
    could have had a fault or an early arrival still to come. The proviso against
    ignoring (docs/search.md, "Runs that never end") now gives each device it left
    standing a turn with a stubborn set seeded by it: 30 states (expanding a state of each
    cycle whole, tried before, took 46)."""
    protocol = load("poll_flag_never_set", 3)
    reduced = explicit.explore(System(protocol))
    full = explicit.explore(System(protocol), ExplicitOptions(reduce=False))
    assert set(reduced.findings) == set(full.findings)
    assert (reduced.states, full.states) == (30, 94)


def test_the_report_reads_as_a_loop():
    from semcheck.report import text

    result = check_protocol(load("poll_flag_never_set", 2), engine="explicit")
    report = text.render([result])
    assert "trace into the loop it never leaves, then one turn of it" in report
    assert "shortest trace to the stuck state" not in report


def test_z3_says_it_cannot_bound_the_poll():
    result = check_protocol(load("poll_flag", 2), engine="z3")
    assert result.verdict.value == "inconclusive"
    assert any("unrolling bound" in note for note in result.notes)


def test_auto_finds_the_spin():
    result = check_protocol(load("poll_flag_never_set", 4))
    assert result.verdict.value == "violation" and result.engine == "explicit"


@st.composite
def polling_protocols(draw):
    """Each device signals some devices, then polls its own flag until the read reaches a
    threshold, then takes that much with a wait: a hang exactly when fewer signals arrive."""
    devices = draw(st.integers(2, 3))
    p = ProtocolBuilder("polling", devices=devices)
    flag = p.semaphore("flag")
    for d in range(devices):
        t = p.thread(d)
        for target in draw(st.lists(st.integers(0, devices - 1), max_size=3)):
            t.signal(flag, device=target)
        need = draw(st.integers(0, 2))
        if draw(st.booleans()):
            spin = t.label()
            seen = t.read(flag)
            t.branch(BinOp("lt", seen, need), spin)
        if need:
            t.wait(flag, need)
    return p.build()


@pytest.mark.parametrize("examples", example_counts(fast=100, slow=400))
def test_reduction_and_split_keep_every_hang(examples):
    """The stubborn sets keep an end reachable from every explored state that has one in the
    full graph, so the reduced search reports the same spins; so does the split search."""
    run_examples(reduction_and_split_keep_every_hang, polling_protocols(), examples=examples,
                 suppress_health_check=[HealthCheck.too_slow])


def reduction_and_split_keep_every_hang(protocol):
    full = explicit.explore(System(protocol), ExplicitOptions(reduce=False))
    reduced = explicit.explore(System(protocol))
    assert set(reduced.findings) == set(full.findings), protocol
    whole = check_protocol(protocol, engine="explicit", split=False)
    split = check_protocol(protocol, engine="explicit")
    assert {v.identity for v in split.violations} == {v.identity for v in whole.violations}
    assert split.verdict == whole.verdict


def _two_spins() -> ir.Protocol:
    """Two devices, each polling the same flag nobody sets, for ever."""
    def spin(device: int, line: int) -> ir.Thread:
        loc = ir.Loc("two_spins.py", line)
        return ir.Thread(device, 0, (ir.Read(loc, ir.SemRef("s"), "seen"),
                                     ir.Branch(ir.Loc("two_spins.py", line + 1), ir.BinOp("lt", ir.Reg("seen"), 1), 0)))
    return ir.Protocol(name="two_spins", backend=Backend.TPU, devices=2, cores=1, threads=(spin(0, 1), spin(1, 11)),
                       semaphores=(ir.SemDecl("s"),))


def test_a_thread_that_can_only_spin_beside_a_spin_is_left_standing():
    """Device 1's whole future is reading a flag and jumping, and nothing anyone does
    conflicts with it: the proviso against ignoring does not seed it (every run of the
    others is a run with it standing, and its own steps see nothing), so the reduced
    search keeps its 2 states (4 if it were seeded, as unreduced)."""
    reduced = explicit.explore(System(_two_spins()))
    full = explicit.explore(System(_two_spins()), ExplicitOptions(reduce=False))
    assert set(reduced.findings) == set(full.findings) == {(Kind.UNSATISFIED_WAIT, ir.Loc("two_spins.py", 1))}
    assert (reduced.states, full.states) == (2, 4)


def test_stopping_at_the_first_finding_needs_no_proviso():
    """Without --exhaustive a bottom component with a cycle is itself the hang reported:
    the search keeps its count from before the proviso (16 at 3 devices)."""
    found = explicit.explore(System(load("poll_flag_never_set", 3)), ExplicitOptions(stop_at_first=True))
    assert found.states == 16 and found.has_errors and not found.notes


def test_the_proviso_stops_where_the_threads_beside_a_spin_multiply_and_says_so():
    """At 8 devices each device's signal races its neighbour's read of the polled flag, and
    each order leaves the spinning devices elsewhere: the proviso may add as many states as
    the search had found (41), at least 1,000, then stops; the hang stands as found before
    it, and a note says what may be missing (docs/search.md, "Runs that never end")."""
    found = explicit.explore(System(load("poll_flag_never_set", 8)))
    assert found.exhausted is None
    assert {key[0] for key in found.findings} == {Kind.UNSATISFIED_WAIT}
    assert found.states == 41 + PROVISO_FLOOR + 4  # (the last state expanded adds a few)
    assert any("followed for 1,000 more states only" in note for note in found.notes)
