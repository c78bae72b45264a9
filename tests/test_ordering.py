"""Racing pairs an order excludes (`semcheck.semantics.ordering`): leaving them out must never lose a
finding. The search comparing every overlapping pair is the reference: unreduced on small
random protocols; on rings, whose unreduced searches run to hundreds of thousands of states,
the reduced search on both sides (tests/test_reduction.py holds the reduction to the
unreduced search on the same strategies)."""

import pytest
from hypothesis import HealthCheck

from semcheck.engines.explicit.search import explore
from semcheck.model import DMA, ProtocolBuilder
from semcheck.semantics import System
from semcheck.engines.options import ExplicitOptions
from tests.reference import reference_findings
from tests.strategies import capacity_ring_protocols, control_flow_protocols, protocols, ring_protocols
from tests.tiers import example_counts, run_examples

STRATEGIES = {  # name -> (strategy, whether the reference search is unreduced, examples per tier)
    "straight-line": (protocols(), True, (20, 150)),
    "control flow": (control_flow_protocols(), True, (8, 60)),
    "rings": (ring_protocols(), False, (20, 200)),
    "capacity rings": (capacity_ring_protocols(), False, (8, 60)),
}


def _findings(protocol, exclude: bool, unreduced: bool) -> frozenset:
    return reference_findings(protocol, reduce=not unreduced, exclude_ordered_pairs=exclude).findings


@pytest.mark.parametrize("kind, examples", [
    pytest.param(kind, count.values[0], id=f"{kind}-{count.id}", marks=count.marks)
    for kind, (_, _, (fast, slow)) in STRATEGIES.items() for count in example_counts(fast=fast, slow=slow)
])
def test_excluding_ordered_pairs_keeps_every_finding(kind, examples):
    strategy, unreduced, _slow = STRATEGIES[kind]

    def keeps_every_finding(protocol):
        assert _findings(protocol, True, unreduced) == _findings(protocol, False, unreduced), protocol

    run_examples(keeps_every_finding, strategy, examples=examples,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# --- the orders on small kernels ---------------------------------------------------------------

BLOCK = (8, 128)  # 4096 bytes


def _exchange(extra_copy: bool):
    """Each device sends its slot to its right neighbour on one shared receive semaphore,
    waits for its own send and for the bytes it receives, then reads its whole output (the
    copy-out at exit). With `extra_copy` the left neighbour sends a second copy on the same
    semaphore that nobody waits for: it may still be landing at the read."""
    p = ProtocolBuilder("exchange", devices=2, backend="tpu")
    barrier = p.barrier_semaphore()
    send_sem, recv_sem = p.semaphore("send_sem", DMA), p.semaphore("recv_sem", DMA)
    out = p.buffer("out", (2, *BLOCK))
    for d in range(2):
        t = p.thread(d)
        right = (d + 1) % 2
        t.signal(barrier, device=right)
        t.wait(barrier, 1)
        copy = t.dma_start(out.region(d), out.region(d), recv_sem=recv_sem, send_sem=send_sem, device=right)
        if extra_copy:
            t.dma_start(out.region(d), out.region(d), recv_sem=recv_sem, send_sem=send_sem, device=right)
        copy.wait_send()
        copy.wait_recv()
        t.load(out.whole)
    return p.build()


def _reference(protocol) -> set:
    """Every finding of the unreduced search comparing every overlapping pair."""
    return set(explore(System(protocol, exclude_ordered_pairs=False),
                       ExplicitOptions(reduce=False, silence_reported_races=False)).findings)


def _load_pairs(system: System) -> list:
    return [(t, pc) for t, pc, _ct, _cpc in system.racing_pairs()
            if type(system.bodies[t][pc]).__name__ == "Load"]


def test_a_read_after_waiting_for_every_byte_sent_to_it_races_with_no_copy():
    protocol = _exchange(extra_copy=False)
    assert _load_pairs(System(protocol, exclude_ordered_pairs=False))  # the cells overlap ...
    assert _load_pairs(System(protocol)) == []  # ... but counting orders every copy first
    assert not explore(System(protocol)).findings
    assert not _reference(protocol)


def test_a_copy_nobody_waits_for_keeps_its_pair_and_its_race():
    protocol = _exchange(extra_copy=True)
    assert _load_pairs(System(protocol))  # one more copy on the semaphore than is waited for
    kinds = {key[0].value for key in explore(System(protocol)).findings}
    assert "data_race" in kinds


def _first_copy_then_barrier(barrier_first: bool):
    """The wheel all-gather's start: each device copies its input into its own output slot
    on a receive semaphore its left neighbour's sends also count on, waits for it, and
    (with `barrier_first`) does an entry barrier before sending that slot to its right."""
    p = ProtocolBuilder("first_copy", devices=2, backend="tpu")
    barrier = p.barrier_semaphore()
    send_sem, recv_sem = p.semaphore("send_sem", DMA), p.semaphore("recv_sem", DMA)
    x, out = p.buffer("x", BLOCK), p.buffer("out", (2, *BLOCK))
    for d in range(2):
        t = p.thread(d)
        right = (d + 1) % 2
        t.dma_start(x.whole, out.region(d), recv_sem=recv_sem).wait()
        if barrier_first:
            t.signal(barrier, device=right)
            t.wait(barrier, 1)
        copy = t.dma_start(out.region(d), out.region(d), recv_sem=recv_sem, send_sem=send_sem, device=right)
        copy.wait_send()
        copy.wait_recv()
    return p.build()


def _local_copy_pairs(system: System) -> list:
    return [(t, pc, ct, cpc) for t, pc, ct, cpc in system.racing_pairs()
            if system.bodies[ct][cpc].device is None and (t, pc) != (ct, cpc)]


def test_a_barrier_after_the_first_copy_orders_it_before_every_send():
    protocol = _first_copy_then_barrier(barrier_first=True)
    assert _local_copy_pairs(System(protocol, exclude_ordered_pairs=False))
    # The neighbour's copy cannot satisfy the wait: it starts only after the barrier, which
    # this device signals once its own copy has landed.
    assert _local_copy_pairs(System(protocol)) == []
    assert not explore(System(protocol)).findings
    assert not _reference(protocol)


def test_without_the_barrier_the_neighbours_copy_can_satisfy_the_wait_and_the_race_stays():
    protocol = _first_copy_then_barrier(barrier_first=False)
    assert _local_copy_pairs(System(protocol))
    found = explore(System(protocol))
    assert "data_race" in {key[0].value for key in found.findings}
    assert set(found.findings) == _reference(protocol)
