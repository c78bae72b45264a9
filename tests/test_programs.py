"""Programs of several kernels (semcheck/passes/programs.py): kernels run one after another on every
device, checked as one protocol, with what one hands to the next carried across.

The protocols here are the IR of JAX's async remote copy (tests/pallas/tpu_pallas_async_test.py
in jax-ml/jax, `make_async_remote_copy`), written out by hand so the test needs no JAX: a start
kernel that copies its block to the right neighbour and returns both DMA semaphores, a kernel
that waits for the send and one that waits for the receive. The examples
(examples/tpu/async_remote_copy*.py, shared_collective_id_*.py) check the same through the
capture, in tests/test_tpu_examples.py and the gate.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume

from semcheck import ir
from semcheck.api import check_protocol
from semcheck.passes.programs import Handover, compose, handed_in_note, shared_barrier_name
from semcheck.engines.options import ExplicitOptions
from tests.strategies import protocols
from tests.tiers import example_counts, run_examples

L = ir.Loc("async.py", 1)
NBYTES = 4096


def _at(line: int) -> ir.Loc:
    return ir.Loc("async.py", line)


def _kernel(name: str, semaphores, buffers, body_of, devices: int, operands=(), results=(), notes=()) -> ir.Protocol:
    return ir.Protocol(
        name=name, backend=ir.Backend.TPU, devices=devices, cores=1,
        threads=tuple(ir.Thread(d, 0, tuple(body_of(d))) for d in range(devices)),
        semaphores=tuple(semaphores), buffers=tuple(buffers), loc=L, frontend="tpu",
        ports=ir.Ports(tuple(operands), tuple(results)), notes=tuple(notes),
    )


def _dma(name: str, origin=ir.SemOrigin.ARGUMENT) -> ir.SemDecl:
    return ir.SemDecl(name, ir.SemKind.DMA, 1, origin, ir.Scope.CORE, None, L)


def _buf(name: str) -> ir.BufferDecl:
    return ir.BufferDecl(name, (8, 128), 4, "any", ir.Scope.CORE, L)


def start_kernel(devices: int) -> ir.Protocol:
    barrier = ir.SemDecl("barrier_semaphore", ir.SemKind.BARRIER, 1, ir.SemOrigin.BARRIER, ir.Scope.CORE, 0, L)

    def body(d):
        left, right = (d - 1) % devices, (d + 1) % devices
        return [
            ir.Signal(_at(10), ir.SemRef("barrier_semaphore", 0, left)),
            ir.Wait(_at(11), ir.SemRef("barrier_semaphore"), 1),
            ir.DmaStart(_at(12), ir.Region("x_ref"), ir.Region("o_ref"), ir.SemRef("recv_sem"),
                        ir.SemRef("send_sem"), NBYTES, right),
        ]
    return _kernel("start", [barrier, _dma("send_sem"), _dma("recv_sem")], [_buf("x_ref"), _buf("o_ref")], body,
                   devices, operands=("x_ref",), results=("o_ref", "send_sem", "recv_sem"))


def wait_kernel(name: str, side: str, devices: int, line: int, waits: int = 1) -> ir.Protocol:
    def body(d):
        return [ir.DmaWait(_at(line), ir.SemRef("sem"), NBYTES, ir.DmaSide.named(side)) for _ in range(waits)]
    return _kernel(name, [_dma("sem")], [], body, devices, operands=("sem",),
                   notes=(handed_in_note(["sem"]),))


def program(devices: int, *, recv_waits: int | None = 1) -> ir.Protocol:
    kernels = [start_kernel(devices), wait_kernel("send_done", "send", devices, 20)]
    handovers = [Handover(0, "send_sem", 1, "sem")]
    if recv_waits is not None:
        kernels.append(wait_kernel("recv_done", "recv", devices, 30, recv_waits))
        handovers.append(Handover(0, "recv_sem", 2, "sem"))
    return compose(kernels, handovers)


@pytest.mark.parametrize("engine", ["explicit", "z3"])
@pytest.mark.parametrize("devices", [2, 3])
def test_start_and_done_kernels_are_safe_as_one_program(engine, devices):
    r = check_protocol(program(devices), engine=engine)
    assert r.verdict.value == "safe", [v.message for v in r.violations]




@pytest.mark.parametrize("devices, states, with_symmetry", [(2, 79, 61), (3, 186, 88)])
def test_program_state_count(devices, states, with_symmetry):
    # The reduced search of the composed program; a changed count is a changed semantics.
    # The program is a ring, so the symmetry reduction applies too (one state per orbit).
    r = check_protocol(program(devices), engine="explicit", symmetry=False)
    assert r.verdict.value == "safe" and r.stats.states == states
    r = check_protocol(program(devices), engine="explicit")
    assert r.verdict.value == "safe" and r.stats.states == with_symmetry


@pytest.mark.parametrize("engine", ["explicit", "z3"])
def test_waiting_for_the_send_only_leaves_the_receive_semaphore_at_the_end_of_the_program(engine):
    r = check_protocol(program(2, recv_waits=None), engine=engine)
    assert {v.kind for v in r.errors} == {"semaphore_leftover"}
    assert all("start.recv_sem" in v.message and "program ends" in v.message for v in r.errors)


@pytest.mark.parametrize("engine", ["explicit", "z3"])
def test_waiting_twice_for_one_copy_is_an_unsatisfied_wait(engine):
    r = check_protocol(program(2, recv_waits=2), engine=engine)
    assert {v.kind for v in r.errors} == {"unsatisfied_wait"}


@pytest.mark.parametrize("devices, states, unreduced", [(2, 106, 1043), (3, 181, 24968)])
def test_a_program_run_twice_repeats_the_whole_sequence_of_kernels(devices, states, unreduced):
    """--invocations 2 on a program: start, send_done, recv_done, then all three again; the
    start kernel's barrier semaphore persists across the two runs (it is the collective_id's),
    its DMA semaphores are handed on afresh in each."""
    from semcheck.passes.invocations import repeat

    twice = repeat(program(devices), 2)
    entries = [i.kernel for i in twice.threads[0].body if isinstance(i, ir.KernelEntry)]
    assert entries == ["start", "send_done", "recv_done"] * 2
    for engine in ("explicit", "z3"):
        assert check_protocol(twice, engine=engine).verdict.value == "safe", engine
    assert check_protocol(twice, engine="explicit").stats.states == states
    full = check_protocol(twice, engine="explicit", reduce=False, symmetry=False)
    assert (full.verdict.value, full.stats.states) == ("safe", unreduced)


@pytest.mark.parametrize("engine", ["explicit", "z3"])
def test_waiting_twice_for_one_copy_in_a_program_run_twice_hangs_every_device(engine):
    """The device stuck in the first run's second wait never signals the second run's
    barrier, which its peers wait on: a deadlock across the two runs."""
    from semcheck.passes.invocations import repeat

    r = check_protocol(repeat(program(2, recv_waits=2), 2), engine=engine)
    assert {v.kind for v in r.errors} == {"deadlock"}


def test_trace_steps_name_the_kernel_they_belong_to():
    r = check_protocol(program(2, recv_waits=2), engine="explicit")
    [violation] = r.errors
    kernels = {s.kernel for s in violation.trace}
    assert "recv_done" in kernels and None not in kernels
    stuck = [s for s in violation.trace if s.event == "dma_wait"]
    assert stuck and all(s.kernel in ("send_done", "recv_done") for s in stuck)


def test_composition_renames_per_kernel_and_shares_what_is_handed_on():
    p = program(2)
    names = {d.name: d for d in p.semaphores}
    assert set(names) == {shared_barrier_name(0), "start.send_sem", "start.recv_sem"}
    assert names["start.recv_sem"].origin is ir.SemOrigin.HANDED_ON
    # each declaration knows its kernel, one handed on its producer's; all kernels share the barrier
    assert {n: d.kernel for n, d in names.items()} == {
        shared_barrier_name(0): None, "start.send_sem": "start", "start.recv_sem": "start"}
    assert {b.name: b.handed_on for b in p.buffers} == {"start.x_ref": False, "start.o_ref": True}
    assert p.kernels == ("start", "send_done", "recv_done")
    body = p.threads[0].body
    entries = [i.kernel for i in body if isinstance(i, ir.KernelEntry)]
    assert entries == ["start", "send_done", "recv_done"]
    # The kernels' "starts at 0" notes are gone: the program counts what earlier kernels did.
    assert not any(handed_in_note(["sem"]) in n for n in p.notes)
    assert p.notes[0].startswith("checked as one program of 3 kernels")


def test_kernels_sharing_a_collective_id_share_its_barrier_semaphore():
    a, b = start_kernel(2), dataclasses_replace_name(start_kernel(2), "start_again")
    p = compose([a, b], [])
    barriers = [d for d in p.semaphores if d.origin is ir.SemOrigin.BARRIER]
    assert [d.name for d in barriers] == [shared_barrier_name(0)]
    assert p.kernels == ("start", "start_again")
    # Two starts, nobody waits: both receive semaphores are left at the end.
    r = check_protocol(p, engine="explicit")
    assert {v.kind for v in r.errors} == {"semaphore_leftover"}


def test_a_program_runs_on_one_mesh():
    with pytest.raises(ValueError, match="different meshes"):
        compose([start_kernel(2), wait_kernel("send_done", "send", 3, 20)], [])


def test_a_handover_goes_forward_and_matches():
    with pytest.raises(ValueError, match="later kernel"):
        compose([start_kernel(2), wait_kernel("send_done", "send", 2, 20)], [Handover(1, "sem", 0, "send_sem")])
    with pytest.raises(ValueError, match="takes"):
        barrier_taker = _kernel("t", [ir.SemDecl("sem", ir.SemKind.REGULAR, 1, ir.SemOrigin.ARGUMENT)], [],
                                lambda d: [], 2)
        compose([start_kernel(2), barrier_taker], [Handover(0, "send_sem", 1, "sem")])


def dataclasses_replace_name(p: ir.Protocol, name: str) -> ir.Protocol:
    import dataclasses

    return dataclasses.replace(p, name=name)


# --- soundness: the reduction and the engines on programs -----------------------------------


PROGRAMS = {
    "start_done": lambda n: program(n),
    "send_only": lambda n: program(n, recv_waits=None),
    "waits_twice": lambda n: program(n, recv_waits=2),
}


@pytest.mark.parametrize("devices", [2, 3])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_reduction_and_engines_agree_on_programs(name, devices):
    from semcheck.engines.explicit import search as explicit
    from semcheck.semantics import System

    p = PROGRAMS[name](devices)
    reduced = explicit.explore(System(p), ExplicitOptions(reduce=True, silence_reported_races=False))
    full = explicit.explore(System(p), ExplicitOptions(reduce=False, silence_reported_races=False))
    assert set(reduced.findings) == set(full.findings)
    z3 = check_protocol(p, engine="z3")
    assert {v.kind for v in z3.errors} == {v.kind for v in check_protocol(p, engine="explicit").errors}


# TPU only: programs are TPU kernels (GPU programs are refused); drawing them here, rather
# than filtering half the draws away, keeps hypothesis's filter health check quiet.
@pytest.mark.parametrize("examples", example_counts(fast=5, slow=25))
def test_reduction_preserves_every_finding_on_a_random_protocol_run_as_two_kernels(examples):
    run_examples(reduction_preserves_every_finding_run_as_two_kernels, protocols(backends=(ir.Backend.TPU,)),
                 examples=examples, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def reduction_preserves_every_finding_run_as_two_kernels(protocol):
    import dataclasses

    from semcheck.engines.explicit import search as explicit
    from semcheck.engines.budget import Budget
    from semcheck.semantics import System

    assume(protocol.backend is ir.Backend.TPU and not ir.cuts(protocol))
    twice = compose([protocol, dataclasses.replace(protocol, name=protocol.name + "_again")], [])
    full = explicit.explore(System(twice),
                            ExplicitOptions(reduce=False, silence_reported_races=False), budget=Budget(max_states=20_000))
    assume(full.exhausted is None)
    reduced = explicit.explore(System(twice), ExplicitOptions(reduce=True, silence_reported_races=False))
    assert set(reduced.findings) == set(full.findings), twice


def test_a_kernel_waiting_on_a_semaphore_from_outside_the_capture_is_inconclusive():
    alone = wait_kernel("recv_done", "recv", 2, 30)
    r = check_protocol(alone, engine="explicit")
    assert r.verdict.value == "inconclusive" and not r.errors
    assert "handed to the kernel from outside everything captured" in r.unjustified
    # A kernel that hangs on its own semaphores is still a violation.
    own = dataclasses_replace_ports(alone, ir.Ports())
    assert check_protocol(own, engine="explicit").verdict.value == "violation"


def dataclasses_replace_ports(p: ir.Protocol, ports: ir.Ports) -> ir.Protocol:
    import dataclasses

    return dataclasses.replace(p, ports=ports)


def test_a_semaphore_carried_into_the_next_kernel_is_named_there_as_that_kernel_calls_it():
    """The first kernel runs with disable_semaphore_checks=True, so its scratch semaphore's
    count carries into the scratch semaphore at the same place of the next kernel: one
    semaphore on the chip (one in the program), called `flag` by the first kernel and `ready`
    by the second. The second kernel's steps say `ready`, as its source does."""
    def scratch(name: str, checked: bool) -> ir.SemDecl:
        return ir.SemDecl(name, ir.SemKind.REGULAR, 1, ir.SemOrigin.SCRATCH, ir.Scope.CORE, None, L,
                          checked_at_exit=checked)

    first = _kernel("first", [scratch("flag", False)], [], lambda d: [ir.Signal(_at(20), ir.SemRef("flag"), 1)], 1)
    second = _kernel("second", [scratch("ready", True)], [],
                     lambda d: [ir.Wait(_at(30), ir.SemRef("ready"), 1), ir.Signal(_at(31), ir.SemRef("ready", 0, 1), 1)], 1)
    program = compose([first, second], [])
    assert [d.name for d in program.semaphores] == ["first.flag"]  # one physical semaphore
    result = check_protocol(program, engine="explicit", exhaustive=True)
    [bad_id] = [v for v in result.errors if v.kind == "invalid_device_id"]  # device 1 of 1
    texts = {(s.kernel, s.location.line): s.text for s in bad_id.trace if s.location.line in (20, 30) and s.semaphore}
    assert texts == {("first", 20): "signal first.flag@d0 += 1 (0 -> 1)",
                     ("second", 30): "wait second.ready@d0 >= 1 (1 -> 0)"}
    assert {s.semaphore for s in bad_id.trace if s.semaphore} == {"first.flag@d0"}  # the one semaphore, as data


def test_a_carried_semaphore_left_over_is_named_as_the_kernel_holding_it_calls_it():
    """`flag` (first kernel, unchecked at exit) carries into the second kernel as `ready`:
    the check at the second kernel's entry (two units carried in) and the leftover at the
    end (one unit the second kernel added) name the semaphore as the kernel holding it
    calls it, `second.ready`, not `first.flag`."""

    def scratch(name: str, checked: bool) -> ir.SemDecl:
        return ir.SemDecl(name, ir.SemKind.REGULAR, 1, ir.SemOrigin.SCRATCH, ir.Scope.CORE, None, L,
                          checked_at_exit=checked)

    first = _kernel("first", [scratch("flag", False)], [], lambda d: [ir.Signal(_at(20), ir.SemRef("flag"), 2)], 1)
    second = _kernel("second", [scratch("ready", True)], [], lambda d: [ir.Wait(_at(30), ir.SemRef("ready"), 1)], 1)
    program = compose([first, second], [])
    [entry] = check_protocol(program, engine="explicit", exhaustive=True).errors
    assert entry.kind == "semaphore_leftover"
    assert ("enters kernel `second` after `first` at async.py:30, second.ready on device 0 holds 2 (left by "
            "kernel `first`)") in entry.message
    # the first kernel leaves it at 0; the second signals it and never waits: left at the end
    balanced = _kernel("first", [scratch("flag", False)], [], lambda d: [
        ir.Signal(_at(20), ir.SemRef("flag"), 1), ir.Wait(_at(21), ir.SemRef("flag"), 1)], 1)
    signals = _kernel("second", [scratch("ready", True)], [], lambda d: [ir.Signal(_at(30), ir.SemRef("ready"), 1)], 1)
    [end] = check_protocol(compose([balanced, signals], []), engine="explicit", exhaustive=True).errors
    assert end.message.startswith("semaphore leftover: second.ready on device 0 holds 1 when"), end.message


def test_a_carried_semaphore_left_over_says_where_each_kernel_declares_it():
    """The leftover names where the kernel holding the semaphore declares it (line 3) and
    the declaration it carries over (line 2), not only the first kernel's, and what the chip
    does as the kernel that exits holding it is compiled."""
    from semcheck import tpu_facts

    def scratch(name: str, checked: bool, line: int) -> ir.SemDecl:
        return ir.SemDecl(name, ir.SemKind.REGULAR, 1, ir.SemOrigin.SCRATCH, ir.Scope.CORE, None, _at(line),
                          checked_at_exit=checked)

    balanced = _kernel("first", [scratch("flag", False, 2)], [], lambda d: [
        ir.Signal(_at(20), ir.SemRef("flag"), 1), ir.Wait(_at(21), ir.SemRef("flag"), 1)], 1)
    signals = _kernel("second", [scratch("ready", True, 3)], [], lambda d: [ir.Signal(_at(30), ir.SemRef("ready"), 1)], 1)
    [end] = check_protocol(compose([balanced, signals], []), engine="explicit", exhaustive=True).errors
    # left by the second kernel, which exits with checks on: the chip stops there
    assert "semaphore must be back to 0 at exit: " + tpu_facts.LEFTOVER_HALTS in end.message
    assert "It is declared at async.py:3 in kernel `second`, which carries it over from async.py:2." in end.message
    first = _kernel("first", [scratch("flag", False, 2)], [], lambda d: [ir.Signal(_at(20), ir.SemRef("flag"), 2)], 1)
    waits = _kernel("second", [scratch("ready", True, 3)], [], lambda d: [ir.Wait(_at(30), ir.SemRef("ready"), 1)], 1)
    [entry] = check_protocol(compose([first, waits], []), engine="explicit", exhaustive=True).errors
    # left by the first kernel, which exits without checks: its line and what its chip does
    assert ("the kernel is compiled with disable_semaphore_checks=True, so the chip does not "
                                  "stop: the value carries into the next kernel that runs on this core, whose scratch "
                                  "semaphore in the same place starts with it (scratch semaphores are not zeroed at "
                                  "entry; observed on TPU v5e, JAX 0.10.2). It is declared at async.py:2.") in entry.message


def test_a_carried_semaphore_is_named_by_the_kernel_that_declares_it_not_by_a_prefix_of_its_name():
    """`k.x` declares `flag` (the program's `k.x.flag`); `third` carries it over as `ready`
    and leaves 1 in it; kernel `k`, which does not use it, enters holding it. The name there
    is the last one a kernel before it gave it, `third.ready`: the walk back stops at the
    kernel that declares it (`SemDecl.kernel`), not at a kernel whose label is a prefix of
    the declaration's name (`k.` of `k.x.flag`, which named it `k.x.flag`)."""

    def scratch(name: str, line: int) -> ir.SemDecl:
        return ir.SemDecl(name, ir.SemKind.REGULAR, 1, ir.SemOrigin.SCRATCH, ir.Scope.CORE, None, _at(line),
                          checked_at_exit=False)

    declares = _kernel("k.x", [scratch("flag", 2)], [], lambda d: [
        ir.Signal(_at(20), ir.SemRef("flag"), 1), ir.Wait(_at(21), ir.SemRef("flag"), 1)], 1)
    carries = _kernel("third", [scratch("ready", 3)], [], lambda d: [ir.Signal(_at(30), ir.SemRef("ready"), 1)], 1)
    program = compose([declares, carries, _kernel("k", [], [], lambda d: [], 1)], [])
    assert [(d.name, d.kernel) for d in program.semaphores] == [("k.x.flag", "k.x")]
    [entry] = check_protocol(program, engine="explicit", exhaustive=True).errors
    assert "when device 0 enters kernel `k` after `third` at async.py:1, third.ready on device 0 holds 1" in entry.message
    assert "It is declared at async.py:3 in kernel `third`, which carries it over from async.py:2." in entry.message
