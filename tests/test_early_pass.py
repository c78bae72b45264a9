"""A barrier wait that passes on a signal from a later kernel invocation
(`semantics.rules._early_pass`, reported as remote_before_entry at the wait).

A TPU barrier semaphore outlives the kernel: every invocation with its collective_id (the
kernel called again, `--invocations`, or another kernel of a program) counts on it. A device
that has moved on signals it for its next invocation, and a device still in the current one
can pass its wait on that signal. The models here are the two ways it happens: the
neighbour barrier of JAX's distributed tutorial with one round, run twice; and two kernels
sharing a collective_id as in JAX's test_auto_assigned_barrier_semaphores_no_data_corruption
(tests/pallas/tpu_pallas_distributed_test.py in jax-ml/jax), where every count balances and
only the early pass is wrong. The examples (examples/tpu/handoff_*.py, shift_*_barrier.py,
shared_collective_id_*.py) check the same through the capture.
"""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest
from hypothesis import strategies as st

from semcheck import ir
from semcheck.api import check_protocol
from semcheck.engines.explicit import search as explicit
from semcheck.engines.options import ExplicitOptions
from semcheck.model import REGULAR, ProtocolBuilder
from semcheck.passes.invocations import repeat
from semcheck.report import causes
from semcheck.result import CauseKind
from semcheck.semantics import System
from semcheck.semantics.state import NO_LEDGER
from tests.tiers import example_counts, run_examples


def line_of(fn, marker: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if marker in line)


def neighbour_barrier(devices: int, double: bool = False) -> ir.Protocol:
    """Every device signals both ring neighbours' barrier semaphores and waits for two
    signals (with `double`, then the same on a REGULAR semaphore of the kernel's own)."""
    p = ProtocolBuilder("neighbours", devices=devices, backend="tpu")
    barrier = p.barrier_semaphore()
    second = p.semaphore("second", REGULAR)
    for d in range(devices):
        t = p.thread(d)
        t.signal(barrier, device=(d - 1) % devices)
        t.signal(barrier, device=(d + 1) % devices)
        t.wait(barrier, 2)  # the barrier wait
        if double:
            t.signal(second, device=(d - 1) % devices)
            t.signal(second, device=(d + 1) % devices)
            t.wait(second, 2)
    return p.build()


def handoff(devices: int, *, shared: bool = True) -> ir.Protocol:
    """JAX's two kernels: `give` hands a count of 5 from device 0 to device 1 behind a
    ready/done handshake on the barrier semaphore, and device 1 reads it; `relay` is a
    ready/done handshake between devices 1 and 2. With `shared`, one collective_id."""
    p = ProtocolBuilder("handoff", devices=devices, backend="tpu")
    give_barrier = p.barrier_semaphore("give_barrier", 0)
    relay_barrier = give_barrier if shared else p.barrier_semaphore("relay_barrier", 1)
    count = p.semaphore("count", REGULAR)
    for d in range(devices):
        t = p.thread(d)
        t.entry("give")
        if d == 0:
            t.wait(give_barrier, 1)
            t.signal(count, 5, device=1)
            t.signal(give_barrier, device=1)  # done
        if d == 1:
            t.signal(give_barrier, device=0)  # ready
            t.wait(give_barrier, 1)  # the wait for done
            t.read(count)
            t.wait(count, 5)
        t.exit("give")
        t.entry("relay")
        if d == 1:
            t.wait(relay_barrier, 1)  # the relay's wait
            t.signal(relay_barrier, device=2)
        if d == 2:
            t.signal(relay_barrier, device=1)  # the relay's ready
            t.wait(relay_barrier, 1)
        t.exit("relay")
    return replace(p.build(), kernels=("give", "relay"))


WAIT = line_of(neighbour_barrier, "# the barrier wait")
DONE_WAIT = line_of(handoff, "# the wait for done")
RELAY_READY = line_of(handoff, "# the relay's ready")


def findings(protocol: ir.Protocol, engine: str, **options) -> set[tuple[str, int]]:
    r = check_protocol(protocol, engine=engine, exhaustive=True, **options)
    return {(v.kind, v.location.line) for v in r.errors}


@pytest.mark.parametrize("engine", ["explicit", "z3"])
def test_a_single_barrier_run_twice_passes_early_from_three_devices(engine):
    # Device 1 signals device 0 but not yet device 2; devices 2 and 0 signal both their
    # neighbours. Device 0 has both its signals, finishes the first call and signals device
    # 2 again for the second: device 2 passes on device 0's two signals before device 1's
    # arrived. With 2 devices the two neighbours are one device, which signals both units
    # of a call before it can finish it.
    assert findings(repeat(neighbour_barrier(2), 2), engine) == set()
    for devices in (3, 4):
        assert findings(repeat(neighbour_barrier(devices), 2), engine) == {("remote_before_entry", WAIT)}
        assert findings(repeat(neighbour_barrier(devices, double=True), 2), engine) == set()


def test_a_check_of_invocations_sharing_a_barrier_semaphore_says_what_it_rests_on():
    [note] = repeat(neighbour_barrier(4), 2).notes
    assert note.startswith("the barrier semaphore of collective_id 0 is one semaphore for every invocation")
    assert "observed on TPU v5e" in note and "remote_before_entry at that wait" in note
    assert repeat(neighbour_barrier(4), 1).notes == ()


def test_a_single_barrier_run_once_is_safe_and_keeps_no_ledger():
    once = neighbour_barrier(4)
    assert findings(once, "explicit") == set()
    assert System(once).ledger_floor == {}  # one invocation: nothing to tell apart
    system = System(repeat(once, 2))
    assert set(system.ledger_floor.values()) == {1}  # additions from invocation 2 are kept apart


@pytest.mark.parametrize("devices, single, double", [(2, 36, 33), (3, 202, 66), (4, 695, 335)])
def test_state_counts_of_the_barrier_run_twice(devices, single, double):
    # The reduced search, every schedule; a changed count is a changed semantics. (3 and 4
    # devices were 211 / 118 and 703 / 385 before the joint counting cut, docs/search.md:
    # the unreduced search, 632 / 470 and 7,589 / 2,741 states, finds what the reduced one
    # finds, before and after.)
    for protocol, states in ((neighbour_barrier(devices), single), (neighbour_barrier(devices, double=True), double)):
        r = check_protocol(repeat(protocol, 2), engine="explicit", symmetry=False, exhaustive=True)
        assert r.stats.states == states


def test_the_early_pass_names_the_later_calls_signal_and_the_second_barrier_as_fix():
    r = check_protocol(repeat(neighbour_barrier(4), 2), engine="explicit")
    [early] = r.errors
    assert (early.kind, early.location.line) == ("remote_before_entry", WAIT)
    assert (f"passes in invocation 1 on barrier on device {early.device}: it needs 2 and the semaphore holds 2, "
            "but only 1 of that was signalled for this invocation or an earlier one; the rest came from "
            "invocation 2") in early.message
    c = early.cause
    signal, offset = (WAIT - 1, -1) if c.site.line == WAIT - 1 else (WAIT - 2, 1)  # from the left or the right
    assert (c.kind, c.site.line, c.wait.line, c.kernels, c.invocations, c.by_offset) == (
        CauseKind.OTHER_KERNELS_SIGNAL, signal, WAIT, (), (1, 2), offset)
    assert causes.statement(c) == (
        f"the wait at line {WAIT} in invocation 1 on device d passed on the signal at line {signal} that "
        f"device d{offset:+d} sent from a later call of the kernel (invocation 2) to the same `barrier`: the "
        "signals meant for this wait had not all arrived, so what follows it runs before its peers are ready "
        "for it")
    assert causes.fix(c).startswith(f"add a second barrier round after the wait at line {WAIT}")
    # the trace says which call each step belongs to
    from semcheck.report import text

    report = text.render([r])
    assert f"[call 1, line {WAIT}]" in report and f"[call 2, line {signal}]" in report


@pytest.mark.parametrize("engine", ["explicit", "z3"])
def test_kernels_sharing_a_collective_id_pass_a_barrier_wait_on_the_other_kernels_signal(engine):
    # Every count balances and nothing hangs: before the ledger this was safe.
    assert findings(handoff(3), engine) == {("remote_before_entry", DONE_WAIT)}
    assert findings(handoff(3, shared=False), engine) == set()


def test_the_handoff_names_both_kernels_and_their_invocations():
    r = check_protocol(handoff(3), engine="explicit")
    [early] = r.errors
    c = early.cause
    assert (c.kind, c.site.line, c.wait.line, c.kernels, c.invocations, c.by_offset) == (
        CauseKind.OTHER_KERNELS_SIGNAL, RELAY_READY, DONE_WAIT, ("give", "relay"), (1, 2), 1)
    assert causes.fix(c).startswith("give `give` and `relay` different collective_ids")
    assert "invocation 1 (kernel `give`)" in early.message and "invocation 2 (kernel `relay`)" in early.message
    assert ("it needs 1 and the semaphore holds 1, but none of that was signalled for this invocation or an "
            "earlier one; all of it came from invocation 2") in early.message


def test_an_early_pass_borrows_from_its_own_invocation_so_the_later_wait_is_not_reported_again():
    # Device 1's wait for done takes device 2's relay signal; device 0's done arrives later
    # and the relay's wait takes it: it counts as an earlier invocation's, so only the first
    # wait is reported (one bug, one report).
    r = check_protocol(handoff(3), engine="explicit", exhaustive=True)
    assert [(v.kind, v.location.line) for v in r.errors] == [("remote_before_entry", DONE_WAIT)]


@pytest.mark.parametrize("devices, shared, own", [(3, 60, 24), (4, 65, 29)])
def test_state_counts_of_the_handoff(devices, shared, own):
    for protocol, states in ((handoff(devices), shared), (handoff(devices, shared=False), own)):
        assert check_protocol(protocol, engine="explicit", exhaustive=True).stats.states == states


def test_kernels_with_their_own_collective_ids_keep_no_ledger():
    # The barrier semaphores are each used in one invocation: states as without a ledger.
    system = System(handoff(3, shared=False))
    assert system.ledger_floor == {}
    assert all(s.ledger is NO_LEDGER for s in system.initial_states())


@pytest.mark.parametrize("protocol", [repeat(neighbour_barrier(4), 2), handoff(3), handoff(4)],
                         ids=["neighbours_x2", "handoff3", "handoff4"])
def test_the_reduction_preserves_the_early_pass(protocol):
    # A wait on a ledgered semaphore reads it in its footprint: an addition no longer
    # commutes with it, so the reduced search still meets the order that passes early.
    reduced = explicit.explore(System(protocol), ExplicitOptions(reduce=True))
    full = explicit.explore(System(protocol), ExplicitOptions(reduce=False))
    assert set(reduced.findings) == set(full.findings) != set()


def test_the_z3_encoding_states_the_early_pass_itself():
    # Not only found by replaying another hazard's witness: the encoding has its condition.
    from semcheck.engines.z3.encoding import Encoding
    from semcheck.kinds import Kind

    system = System(handoff(3))
    wait = next(i.loc for i in system.bodies[1] if isinstance(i, ir.Wait) and i.loc.line == DONE_WAIT)
    assert (Kind.REMOTE_BEFORE_ENTRY, wait) in Encoding(system, 4).hazards
    assert (Kind.REMOTE_BEFORE_ENTRY, wait) not in Encoding(System(handoff(3, shared=False)), 4).hazards


@st.composite
def barrier_programs(draw):
    """Two kernels of random barrier handshakes on one barrier semaphore (collective_id 0),
    run one after the other on every device: each thread signals peers' barrier
    semaphores, waits on its own for 1 or 2, and signals and waits on a REGULAR scratch
    semaphore too, in a random order."""
    devices = draw(st.integers(2, 3))
    p = ProtocolBuilder("random_handshakes", devices=devices, backend="tpu")
    barrier = p.barrier_semaphore()
    scratch = p.semaphore("flag", REGULAR)
    for d in range(devices):
        t = p.thread(d)
        for kernel in ("first", "second"):
            t.entry(kernel)
            for _ in range(draw(st.integers(1, 4))):
                op = draw(st.integers(0, 5))  # the barrier semaphore twice as often
                peer = draw(st.integers(0, devices - 1))
                if op < 2:
                    t.signal(barrier, device=peer)
                elif op < 4:
                    t.wait(barrier, draw(st.integers(1, 2)))
                elif op == 4:
                    t.signal(scratch, device=peer)
                else:
                    t.wait(scratch, 1)
            t.exit(kernel)
    return replace(p.build(), kernels=("first", "second"))


def engines_agree_on_a_shared_barrier(protocol):
    from tests.agreement import assert_engines_agree

    assert_engines_agree(protocol)


@pytest.mark.parametrize("examples", example_counts(fast=20, slow=300))
def test_engines_agree_on_random_handshakes_on_a_barrier_semaphore_two_kernels_share(examples):
    run_examples(engines_agree_on_a_shared_barrier, barrier_programs(), examples=examples)


@pytest.mark.parametrize("devices", [3, 4])
def test_a_rotation_commutes_with_every_step_of_a_ring_that_keeps_a_barrier_ledger(devices):
    # The ledger's slots name semaphore instances: the image of a state rotates them too.
    import random

    from semcheck.engines.explicit import symmetry

    protocol = repeat(neighbour_barrier(devices), 2)
    system = System(protocol)
    group = symmetry.rotations(system)
    assert group is not None and group.order == devices
    with_ledger = 0
    for seed in range(20):  # step(g s, g a) == g step(s, a) along random schedules
        rng, state = random.Random(seed), system.initial_states()[0]
        while (enabled := system.enabled(state)) and group.mappable(state):
            action = rng.choice(enabled)
            after = system.step(state, action)
            with_ledger += bool(after.ledger.items)
            for g in range(1, group.order):
                if group.mappable(after):
                    assert system.step(group.image(state, g), group.action(action, g)) == group.image(after, g)
            state = after
    assert with_ledger
    reduced = check_protocol(protocol, engine="explicit", exhaustive=True)
    plain = check_protocol(protocol, engine="explicit", exhaustive=True, symmetry=False)
    assert {(v.kind, v.location, v.device) for v in reduced.errors} == {(v.kind, v.location, v.device)
                                                                         for v in plain.errors}
