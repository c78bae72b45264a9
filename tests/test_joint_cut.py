"""The counting cut of threads outside a stubborn set, found together (`Independence.cut`):
a barrier in which every device signals every device stops all of them while one device,
in the set, stands still, though each of them alone could still be fed by the others'
later barriers. The shape is the prologue of tpu-inference's fused MoE with the
reduce-scatter in the kernel: a zero fill of the whole output, waited before the barrier,
then rows written into other devices' outputs."""

from __future__ import annotations

from semcheck import ir
from semcheck.engines.explicit import search as explicit
from semcheck.engines.explicit.independence import Independence
from semcheck.engines.options import ExplicitOptions
from semcheck.ir import Backend, Scope, SemKind, SemOrigin
from semcheck.semantics import EventFires, System, ThreadStep


def _barrier_scatter(devices: int, zero_wait_first: bool = True) -> ir.Protocol:
    """Per device: zero-fill all of `out` (a local copy), wait for it (first, or only at
    the end: the race of the original kernel), two all-to-all barrier rounds, and between
    them one row written into the right neighbour's `out`."""
    lines = iter(range(1, 10_000))

    def loc() -> ir.Loc:
        return ir.Loc("barrier_scatter.py", next(lines))

    def program(d: int) -> tuple[ir.Instr, ...]:
        zero_done = [ir.DmaWait(loc(), ir.SemRef("zero"), 4, ir.DmaSide.RECV)]
        body: list[ir.Instr] = [ir.DmaStart(loc(), ir.Region("zeros", (0,), (devices,)),
                                            ir.Region("out", (0,), (devices,)), ir.SemRef("zero"), None, 4)]
        if zero_wait_first:
            body += zero_done
        for k in range(2):
            body += [ir.Signal(loc(), ir.SemRef("barrier", 0, p)) for p in range(devices)]
            body.append(ir.Wait(loc(), ir.SemRef("barrier"), devices, True))
            if k == 0:
                body += [ir.DmaStart(loc(), ir.Region("stage", (0,), (1,)), ir.Region("out", (d,), (1,)),
                                     ir.SemRef("recv"), ir.SemRef("send"), 4, (d + 1) % devices),
                         ir.DmaWait(loc(), ir.SemRef("send"), 4, ir.DmaSide.SEND),
                         ir.DmaWait(loc(), ir.SemRef("recv"), 4, ir.DmaSide.RECV)]
        if not zero_wait_first:
            body += zero_done
        return tuple(body)

    return ir.Protocol(
        name="barrier_scatter", backend=Backend.TPU, devices=devices, cores=1,
        semaphores=(ir.SemDecl("barrier", SemKind.REGULAR, 1, SemOrigin.BARRIER, Scope.CORE),
                    ir.SemDecl("zero", SemKind.DMA, 1, SemOrigin.SCRATCH, Scope.CORE),
                    ir.SemDecl("send", SemKind.DMA, 1, SemOrigin.SCRATCH, Scope.CORE),
                    ir.SemDecl("recv", SemKind.DMA, 1, SemOrigin.SCRATCH, Scope.CORE)),
        buffers=(ir.BufferDecl("zeros", (devices,)), ir.BufferDecl("stage", (1,)), ir.BufferDecl("out", (devices,))),
        threads=tuple(ir.Thread(d, 0, program(d)) for d in range(devices)),
    )


def _explore(protocol: ir.Protocol, reduce: bool = True):
    found = explicit.explore(System(protocol), ExplicitOptions(reduce=reduce, symmetry=False))
    assert found.exhausted is None
    return found


def test_a_peer_stops_at_its_first_barrier_while_the_zero_fill_stands_still():
    """Device 0 has started its zero fill; the set holds its landing, which writes all of
    device 0's `out`. Device 2 writes its row there at pc 6, after its first barrier wait
    (pc 5), which it cannot pass while the landing stands still: device 0 adds nothing to
    device 2's barrier before its own zero-fill wait (a guard stop: only the landing adds
    to `zero` on device 0), and devices 1 and 2 add one each before their own first
    barrier waits, which they cannot pass either. Counted alone, device 2 could still be
    fed by everyone's second-round signals, so its plain cut is its second barrier wait
    (pc 12), after the row; before this rule the cut found nothing with the landing alone
    standing still, and pc 12 with device 0 too."""
    system = System(_barrier_scatter(3))
    ind = Independence(system)
    state = system.step(system.initial_states()[0], ThreadStep(0))
    (landing,) = {EventFires(e) for e in state.events}
    for still in (set(), {0}):  # device 0 itself may stand still too: it waits for the landing
        assert ind.plain_cut(state, still, {landing}, 2) == 12
        assert ind.cut(state, still, {landing}, 2) == 5
    # device 1's own receive wait (pc 8) is fed only by device 0, stopped before its copy
    assert ind.plain_cut(state, set(), {landing}, 1) == 8
    assert ind.cut(state, set(), {landing}, 1) == 5


def test_the_joint_cut_makes_the_barrier_scatter_small():
    """Safe, as the unreduced search says (155 states at 2 devices, 1,951 at 3); the reduced
    search stored 42, 98 and 351 states at 2, 3 and 4 devices before the joint cut and the
    guard-stopped adders, 29, 49 and 73 now."""
    for devices, reduced, full in ((2, 29, 155), (3, 49, 1951), (4, 73, None)):
        found = _explore(_barrier_scatter(devices))
        assert found.states == reduced and not found.findings
        if full is not None:
            unreduced = _explore(_barrier_scatter(devices), reduce=False)
            assert unreduced.states == full and not unreduced.findings


def test_the_zero_fill_waited_last_still_races():
    """The original kernel's order: the zero fill is waited only at the end, so the row a
    neighbour writes may land before the zero fill and be overwritten. Both searches find
    the race (unreduced: 536 and 13,708 states; reduced 34 and 64 before, 31 and 52 now)."""
    for devices, reduced, full in ((2, 31, 536), (3, 52, 13708)):
        found = _explore(_barrier_scatter(devices, zero_wait_first=False))
        unreduced = _explore(_barrier_scatter(devices, zero_wait_first=False), reduce=False)
        assert {k[0].value for k in found.findings} == {"data_race"}
        assert {k[0] for k in found.findings} == {k[0] for k in unreduced.findings}
        assert (found.states, unreduced.states) == (reduced, full)
