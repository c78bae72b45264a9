"""The z3 engine's counted precedences (semcheck/engines/z3/precedence.py): what they prove,
what they must not claim, and that the hazards they leave out are the ones no execution has
(the explicit engine, which knows nothing of them, decides the same)."""

from __future__ import annotations

import pytest

from semcheck.api import check_protocol
from semcheck.engines.z3 import unroll as unrolling
from semcheck.engines.z3.encoding import Encoding
from semcheck.model import DMA, ProtocolBuilder
from semcheck.semantics import System
from tests.agreement import assert_engines_agree

ROWS = 4


def metadata_then_scatter(devices: int, zero_late: bool = False):
    """The fused MoE kernel's skeleton: zero the mailbox, a barrier, send my metadata row to
    every peer and wait for theirs (one aggregate byte-count wait), a second barrier on the
    same semaphore, then push a row into every peer's mailbox on the metadata's receive
    semaphore. With `zero_late` the mailbox is zeroed after the second barrier instead, while
    a peer may already have pushed into it: a data race."""
    b = ProtocolBuilder("metadata_then_scatter", devices=devices)
    barrier = b.barrier_semaphore()
    recv = b.semaphore("recv", DMA)
    send = b.semaphore("send", DMA)
    meta = b.buffer("meta", (devices, 8), space="vmem")
    mailbox = b.buffer("mailbox", (devices, 8), space="vmem")
    row = b.nbytes(meta.region(0, size=(1, 8)))
    for d in range(devices):
        t = b.thread(d)
        t.entry()
        if not zero_late:
            t.store(mailbox.whole)
        for round_ in range(2):
            for peer in range(devices):
                t.signal(barrier, device=peer)
            t.wait(barrier, devices)
            if round_ == 0:
                for peer in range(devices):
                    if peer != d:
                        t.dma_start(meta.region(d, size=(1, 8)), meta.region(d, size=(1, 8)),
                                    recv_sem=recv, send_sem=send, device=peer)
                t.dma_wait(recv, (devices - 1) * row)
                t.dma_wait(send, (devices - 1) * row, side="send")
                t.load(meta.whole)
        if zero_late:
            t.store(mailbox.whole)
        for peer in range(devices):
            if peer != d:
                t.dma_start(mailbox.region(d, size=(1, 8)), mailbox.region(d, size=(1, 8)),
                            recv_sem=recv, send_sem=send, device=peer)
        t.dma_wait(recv, (devices - 1) * row)
        t.dma_wait(send, (devices - 1) * row, side="send")
        t.load(mailbox.whole)
        t.exit()
    return b.build()


def _waits(encoding: Encoding, thread: int):
    """The thread's barrier waits and its DMA waits, in program order."""
    row = [nv for nv in encoding.nodes[thread] if nv.node.kind == unrolling.INSTR]
    return [nv for nv in row if nv.need is not None]


def _signals(encoding: Encoding, thread: int):
    row = [nv for nv in encoding.nodes[thread] if nv.node.kind == unrolling.INSTR]
    return [nv for nv in row if type(nv.node.instr).__name__ == "Signal"]


def test_second_barrier_needs_every_signal_of_both_rounds():
    encoding = Encoding(System(metadata_then_scatter(3)), 8)
    order = encoding.precedence()
    first_wait, _meta_recv, _meta_send, second_wait, *_ = _waits(encoding, 0)
    for peer in range(3):
        signals = [s for s in _signals(encoding, peer) if s.target.candidates[0][0] == _waits(encoding, 0)[0].target.candidates[0][0]]
        assert len(signals) == 2  # one per round to device 0
        for signal in signals:
            assert order.precedes(signal, second_wait)
    # The first round's wait: a peer's second-round signal comes after that peer's metadata
    # wait, which needs device 0's metadata, sent after device 0's first wait.
    for peer in (1, 2):
        first_round, second_round = [
            s for s in _signals(encoding, peer) if s.target.candidates[0][0] == first_wait.target.candidates[0][0]
        ]
        assert order.precedes(first_round, first_wait)
        assert order.precedes(first_wait, second_round)
    assert not order.precedes(second_wait, first_wait)


def test_a_wait_either_of_two_signals_can_satisfy_names_neither():
    b = ProtocolBuilder("either", devices=3)
    sem = b.semaphore("s")
    b.thread(1).signal(sem, device=0)
    b.thread(2).signal(sem, device=0)
    b.thread(0).wait(sem, 1)
    encoding = Encoding(System(b.build()), 8)
    order = encoding.precedence()
    [wait] = _waits(encoding, 0)
    [one], [other] = _signals(encoding, 1), _signals(encoding, 2)
    assert not order.precedes(one, wait) and not order.precedes(other, wait)
    assert list(order.counted()) == []


def test_needing_both_signals_names_both():
    b = ProtocolBuilder("both", devices=3)
    sem = b.semaphore("s")
    b.thread(1).signal(sem, device=0)
    b.thread(2).signal(sem, device=0)
    b.thread(0).wait(sem, 2)
    encoding = Encoding(System(b.build()), 8)
    order = encoding.precedence()
    [wait] = _waits(encoding, 0)
    assert order.precedes(_signals(encoding, 1)[0], wait) and order.precedes(_signals(encoding, 2)[0], wait)


def test_a_count_that_can_go_negative_proves_nothing():
    """A negative increment breaks the reasoning (a reset could add): no precedence at all."""
    b = ProtocolBuilder("negative", devices=3)
    sem = b.semaphore("s")
    b.thread(1).signal(sem, device=0)
    b.thread(2).signal(sem, -1, device=0)
    b.thread(0).wait(sem, 1)
    encoding = Encoding(System(b.build()), 8)
    assert list(encoding.precedence().counted()) == []


@pytest.mark.parametrize("devices", [2, 3])
def test_the_safe_skeleton_leaves_no_hazard_to_ask_and_is_safe(devices):
    protocol = metadata_then_scatter(devices)
    assert Encoding(System(protocol), 8).hazards == {}
    assert check_protocol(protocol, engine="z3").verdict.value == "safe"
    assert_engines_agree(protocol)


@pytest.mark.parametrize("devices", [2, 3])
def test_the_late_zeroing_race_stays_found(devices):
    protocol = metadata_then_scatter(devices, zero_late=True)
    result = check_protocol(protocol, engine="z3")
    assert result.verdict.value == "violation"
    assert {v.kind for v in result.errors} == {"data_race"}
    assert_engines_agree(protocol)
