"""With `--exhaustive`, every engine that claims to have covered every schedule reports the
findings of the unreduced explicit search, findings that come after a fault included, and
those of threads the reduced search could leave standing while another spins for ever.

A fault stops its thread for good, and a peer may run on into the kernel's next
invocation and signal the faulted core, or land a copy on it, before that core could
have entered it (`remote_before_entry`). The reduced search must keep such a finding in
every order of the two: a fault is an action of its own thread, and the early arrival's
check reads where the faulted core is (docs/search.md, "Faults, and what comes after
them")."""

from __future__ import annotations

import collections

import pytest
from hypothesis import HealthCheck

from semcheck import ir
from semcheck.engines import simulate
from semcheck.engines.explicit import search as explicit
from semcheck.engines.options import ExplicitOptions, SimulateOptions
from semcheck.engines.z3 import engine as smt
from semcheck.ir import Backend, SemOrigin
from semcheck.kinds import FAULT_KINDS, Kind
from semcheck.semantics import System
from tests.reference import reference_findings
from tests.strategies import control_flow_protocols, invocation_protocols
from tests.tiers import example_counts, run_examples


def _loc(line: int) -> ir.Loc:
    return ir.Loc("fault_then_early.py", line)


def fault_then_early_arrival() -> ir.Protocol:
    """Device 0 faults on a load in invocation 1; device 1, released by an argument
    semaphore (which outlives the kernel, so no entry checks it), runs on into invocation 2
    and signals device 0's scratch semaphore, which device 0 has not entered: in every
    schedule where the signal comes before the fault, that is `remote_before_entry`."""
    mem = ir.Region("mem", (5,), (1,))  # row 5 of 2: invalid_region
    faulting = ir.Thread(0, 0, (
        ir.KernelEntry(_loc(1)),
        ir.Signal(_loc(2), ir.SemRef("go", 0, 1)),
        ir.Load(_loc(3), mem, checked=True),
        ir.KernelExit(_loc(4)),
        ir.KernelEntry(_loc(5)),
        ir.Wait(_loc(6), ir.SemRef("s")),
        ir.KernelExit(_loc(7)),
    ))
    running_on = ir.Thread(1, 0, (
        ir.KernelEntry(_loc(11)),
        ir.Wait(_loc(12), ir.SemRef("go")),
        ir.KernelExit(_loc(13)),
        ir.KernelEntry(_loc(14)),
        ir.Signal(_loc(15), ir.SemRef("s", 0, 0)),
        ir.KernelExit(_loc(16)),
    ))
    return ir.Protocol(
        name="fault_then_early", backend=Backend.TPU, devices=2, cores=1, threads=(faulting, running_on),
        semaphores=(ir.SemDecl("s"), ir.SemDecl("go", origin=SemOrigin.ARGUMENT)),
        buffers=(ir.BufferDecl("mem", (2, 4)),),
    )


def _explore(protocol: ir.Protocol, *, reduce: bool, silence: bool = False):
    found = explicit.explore(System(protocol), ExplicitOptions(reduce=reduce, silence_reported_races=silence))
    assert found.exhausted is None
    return found


def test_an_early_arrival_at_a_core_that_faults_is_kept_by_the_reduced_search():
    """The faulting load touches no cell anyone else does, so it is a stubborn set of its own
    once device 0 has released device 1. Before the fault's core was taken to stay in the
    invocation it faulted in, the arrival check skipped a faulted core: the load changed
    what device 1's signal saw without saying so in its footprint, and the reduced search,
    taking the load first, lost the early arrival (10 states, only invalid_region)."""
    protocol = fault_then_early_arrival()
    expected = {("invalid_region", 0, 2), (Kind.REMOTE_BEFORE_ENTRY, _loc(15))}
    for silence in (False, True):
        full = _explore(protocol, reduce=False, silence=silence)
        reduced = _explore(protocol, reduce=True, silence=silence)
        assert set(full.findings) == expected
        assert set(reduced.findings) == expected
        assert (full.states, reduced.states) == (18, 10)
    # and the solver, which covers every schedule too
    assert set(smt.explore(System(protocol)).findings) == expected


def _kinds(findings) -> set[str]:
    return {str(getattr(key[0], "value", key[0])) for key in findings}


@pytest.mark.parametrize("examples", example_counts(fast=40, slow=400))
def test_every_exhaustive_engine_keeps_what_follows_a_fault_across_invocations(examples):
    """On kernels called up to three times, with faults of every kind and remote signals and
    copies that may arrive outside their invocation: the reduced explicit search (with and
    without symmetry, reporting every race or each racing pair once) finds exactly the
    unreduced search's findings, sites included; z3 the same; simulate nothing else."""
    drawn: collections.Counter = collections.Counter()

    def check(protocol):
        full = reference_findings(protocol)
        keys = set(full.findings)
        for symmetry in (None, False):
            reduced = explicit.explore(System(protocol), ExplicitOptions(
                reduce=True, symmetry=symmetry, silence_reported_races=False))
            assert reduced.exhausted is None
            assert set(reduced.findings) == keys, protocol
            assert reduced.states <= full.states
        # the default search: each racing pair of lines once, every other finding the same
        default = _explore(protocol, reduce=True, silence=True)
        assert set(default.findings) <= keys, protocol
        assert {k for k in keys if k[0] != "data_race"} <= set(default.findings), protocol
        assert _kinds(default.findings) == _kinds(keys), protocol
        solver = smt.explore(System(protocol))
        assert solver.exhausted is None, protocol
        assert set(solver.findings) == set(default.findings), protocol
        walked = simulate.explore(System(protocol), SimulateOptions(runs=20, seed=len(drawn)))
        assert set(walked.findings) <= keys, protocol
        kinds = _kinds(keys)
        faulted = bool(kinds & {k.value for k in FAULT_KINDS})
        drawn["fault"] += faulted
        drawn["fault and early arrival"] += faulted and "remote_before_entry" in kinds
        drawn["drawn"] += 1

    run_examples(check, invocation_protocols(), examples=examples, suppress_health_check=[HealthCheck.too_slow])
    # what the test is for is drawn often: a fault in a third of the draws or more, a fault beside an
    # early arrival in about one in ten. Asked only of the slow tier's draws: 40 random draws
    # (the README's fast tier draws anew each run) gave 3 of the second once, against 4 asked.
    if examples >= 400:
        assert drawn["fault"] * 3 >= drawn["drawn"], drawn
        assert drawn["fault and early arrival"] * 20 >= drawn["drawn"], drawn


def spin_beside_a_fault() -> ir.Protocol:
    """Device 0 polls a flag nobody sets, for ever; device 1 loads outside its buffer."""
    spinning = ir.Thread(0, 0, (
        ir.Read(_loc(1), ir.SemRef("s"), "seen"),
        ir.Branch(_loc(2), ir.BinOp("lt", ir.Reg("seen"), 1), 0),
    ))
    faulting = ir.Thread(1, 0, (ir.Load(_loc(11), ir.Region("mem", (5,), (1,)), checked=True),))
    return ir.Protocol(
        name="spin_beside_a_fault", backend=Backend.TPU, devices=2, cores=1, threads=(spinning, faulting),
        semaphores=(ir.SemDecl("s"),), buffers=(ir.BufferDecl("mem", (2, 4)),),
    )


def test_a_fault_beside_a_spin_that_never_ends_is_kept_by_the_reduced_search():
    """Device 0's read is a stubborn set of its own in every state (nothing else touches the
    flag), so the reduced search went round its loop and never moved device 1 (2 states,
    only the spin): the stubborn sets keep every end state, and no run of this protocol
    ends. The proviso against ignoring now expands a state of the spin's cycle again with
    a stubborn set seeded by device 1's load, which the cycle never took."""
    protocol = spin_beside_a_fault()
    expected = {("invalid_region", 1, 0), (Kind.UNSATISFIED_WAIT, _loc(1))}
    full = _explore(protocol, reduce=False)
    reduced = _explore(protocol, reduce=True)
    assert set(full.findings) == expected
    assert set(reduced.findings) == expected
    assert (full.states, reduced.states) == (4, 4)


def full_spins(protocol: ir.Protocol) -> set:
    """The hangs (loops that spin for ever) the unreduced search names."""
    found = explicit.explore(System(protocol), ExplicitOptions(reduce=False, silence_reported_races=False))
    return {key for key, (finding, _i, _a) in found.findings.items() if finding.loop_steps}


@pytest.mark.parametrize("examples", example_counts(fast=100, slow=1000))
def test_the_reduced_search_keeps_what_threads_beside_a_spin_do(examples):
    """On protocols with loops, where a thread may poll a semaphore with no bound and spin for
    ever beside threads with faults, races and early arrivals of their own still to come:
    the reduced search finds exactly the unreduced search's findings, sites included;
    simulate nothing else (z3 cannot bound such a loop and says so)."""
    drawn: collections.Counter = collections.Counter()

    def check(protocol):
        full = reference_findings(protocol)
        reduced = _explore(protocol, reduce=True)
        # Which spinning thread a hang names is the one that turns in the cycle the report
        # walks (`endless.findings`): the unreduced search too names one of two threads that
        # both spin for ever, so for spins only whether there is one is compared; every
        # other finding, site and all.
        spins = {key for key, (finding, _i, _a) in reduced.findings.items() if finding.loop_steps}
        assert set(reduced.findings) - spins == {k for k in full.findings if k not in full_spins(protocol)}, protocol
        assert bool(spins) == bool(full_spins(protocol)), protocol
        assert reduced.states <= full.states
        # a walk that spins runs to its step limit (most of this test's time): two walks in
        # every tenth draw are enough to ask for no more
        if drawn["drawn"] % 10 == 0:
            walked = simulate.explore(System(protocol), SimulateOptions(runs=2, seed=drawn["drawn"]))
            assert set(walked.findings) <= set(full.findings), protocol
        kinds = _kinds(full.findings)
        drawn["drawn"] += 1
        drawn["spin"] += "unsatisfied_wait" in kinds
        drawn["spin and more"] += "unsatisfied_wait" in kinds and len(kinds) > 1

    run_examples(check, control_flow_protocols(max_devices=2, max_blocks=3, spins=True), examples=examples,
                 suppress_health_check=[HealthCheck.too_slow])
    # about half the draws spin, and about one in eleven has another finding beside the spin
    # (the shape that went wrong: about one draw in 17 before the fix)
    if examples >= 1000:  # (a hundred draws are too few to ask for a share)
        assert drawn["spin"] * 4 >= drawn["drawn"], drawn
        assert drawn["spin and more"] * 25 >= drawn["drawn"], drawn
