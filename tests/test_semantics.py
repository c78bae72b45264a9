"""The semantics, one rule at a time, on protocols small enough to reason about by hand."""

import pytest

from semcheck import ir
from tests.engine_check import check
from semcheck.ir import SemOrigin
from semcheck.model import DMA, ProtocolBuilder, Sem
from semcheck.semantics import System
from semcheck.engines.options import ExplicitOptions


def kinds(protocol, **options):
    """Every finding's kind: the whole search, not only its first counterexample."""
    return sorted(v.kind for v in check(protocol, exhaustive=True, **options).violations)


def builder(devices=1, cores=1, backend="tpu"):
    return ProtocolBuilder("t", devices=devices, cores=cores, backend=backend)


def test_signal_then_wait_balances():
    p = builder(2)
    s = p.semaphore("s")
    p.thread(0).signal(s, 3, device=1)
    p.thread(1).wait(s, 3)
    assert kinds(p.build()) == []


def test_wait_passes_at_least_not_exactly():
    p = builder(1)
    s = p.semaphore("s")
    t = p.thread(0)
    t.signal(s, 5)
    t.wait(s, 2)  # 5 >= 2: passes, leaves 3
    t.wait(s, 3)
    assert kinds(p.build()) == []


def test_over_signal_leaves_a_tpu_leftover_but_not_on_gpu():
    for backend, expected in (("tpu", ["semaphore_leftover"]), ("gpu", [])):
        p = builder(1, backend=backend)
        s = p.semaphore("s")
        p.thread(0).signal(s, 2)
        p.thread(0).wait(s, 1)
        assert kinds(p.build()) == expected, backend


def test_argument_semaphores_may_stay_nonzero():
    p = builder(1)
    s = p.semaphore("handed_on", origin=SemOrigin.ARGUMENT)
    p.thread(0).signal(s)
    assert kinds(p.build()) == []


def test_barrier_semaphore_must_return_to_zero():
    p = builder(2)
    b = p.barrier_semaphore()
    p.thread(0).signal(b, device=1)
    assert kinds(p.build()) == ["semaphore_leftover"]


def test_non_decrementing_wait_keeps_the_count():
    p = builder(1, backend="gpu")
    s = p.semaphore("s")
    t = p.thread(0)
    t.signal(s)
    t.wait(s, 1, decrement=False)
    t.wait(s, 1, decrement=False)  # still 1: passes again
    t.wait(s, 1)
    assert kinds(p.build()) == []


def test_a_tpu_model_keeps_its_non_decrementing_wait_and_notes_what_a_kernel_would_do():
    """A model states its semantics: the non-decrementing wait keeps the count, so the
    drain after it passes; the note says a TPU kernel written so would decrement instead
    (a kernel script is checked that way: tests/test_tpu_hardware.py)."""
    from semcheck.model import MODEL_NONDECREMENTING_NOTE

    p = builder(1, backend="tpu")
    s = p.semaphore("s")
    t = p.thread(0)
    t.signal(s)
    t.wait(s, 1, decrement=False)
    t.wait(s, 1)
    result = check(p.build())
    assert result.verdict.value == "safe" and result.warnings == []
    assert MODEL_NONDECREMENTING_NOTE in result.notes


def test_dma_semaphores_count_bytes_on_both_sides():
    p = builder(2)
    send, recv = p.semaphore("send", DMA), p.semaphore("recv", DMA)
    buf = p.buffer("buf", (4, 128), itemsize=4)
    copy = p.thread(0).dma_start(buf.whole, buf.whole, recv_sem=recv, send_sem=send, device=1)
    copy.wait_send()
    p.thread(1).dma_wait(recv, 4 * 128 * 4)
    assert kinds(p.build()) == []


def test_dma_wait_in_smaller_chunks_is_fine_and_one_chunk_too_many_hangs():
    for waits, expected in ((4, []), (5, ["unsatisfied_wait"]), (3, ["semaphore_leftover"])):
        p = builder(1)
        recv = p.semaphore("recv", DMA)
        buf = p.buffer("buf", (8, 128))  # 4096 bytes
        t = p.thread(0)
        t.dma_start(buf.whole, buf.whole, recv_sem=recv)
        for _ in range(waits):
            t.dma_wait(recv, 1024)
        assert kinds(p.build()) == expected, waits


def test_a_regular_semaphore_given_to_a_dma_gains_one():
    p = builder(1)
    done = p.semaphore("done")  # REGULAR: +1 per completion (TPU v6+)
    buf = p.buffer("buf", (8, 128))
    t = p.thread(0)
    t.dma_start(buf.whole, buf.whole, recv_sem=done)
    t.wait(done, 1)
    assert kinds(p.build()) == []


def test_two_copies_on_one_semaphore_may_complete_in_either_order():
    """Copies of 1024 and 3072 bytes on one semaphore; a wait for 3072 can be satisfied
    by the big copy alone (before the small one lands), so the first wait passing does not
    mean the first copy landed. Both orders are explored."""
    p = builder(1)
    recv = p.semaphore("recv", DMA)
    small, big = p.buffer("small", (256,)), p.buffer("big", (768,))
    t = p.thread(0)
    t.dma_start(small.whole, small.whole, recv_sem=recv)
    t.dma_start(big.whole, big.whole, recv_sem=recv)
    t.wait(recv, 3072)
    t.wait(recv, 1024)
    system = System(p.build())
    from semcheck.engines.explicit import search as explicit

    full = explicit.explore(system, ExplicitOptions(reduce=False))
    # after both starts: {small, big} pending -> either lands first -> both landed
    orders = {tuple(s.sems) for s in _all_states(system)}
    assert (1024,) in orders and (3072,) in orders
    assert not full.findings


def _all_states(system):
    seen, stack = set(), list(system.initial_states())
    while stack:
        s = stack.pop()
        if s in seen:
            continue
        seen.add(s)
        stack.extend(system.step(s, a) for a in system.enabled(s))
    return seen


def test_signal_without_core_index_lands_on_own_core():
    """JAX's TPU interpreter sends it to core 0; semcheck keeps the signaller's core."""
    p = builder(1, cores=2)
    s = p.semaphore("s")
    t = p.thread(0, core=1)
    t.signal(s)
    t.wait(s)
    assert kinds(p.build()) == []


def test_invalid_core_and_semaphore_index():
    p = builder(1, cores=2)
    s = p.semaphore("s", size=2)
    p.thread(0, core=0).signal(s, core=2)
    assert kinds(p.build()) == ["invalid_core_index"]
    p = builder(1)
    s = p.semaphore("s", size=2)
    p.thread(0).signal(s[2])
    assert kinds(p.build()) == ["invalid_semaphore_index"]


def test_a_fault_is_reported_once_not_as_the_hang_it_causes():
    p = builder(2)
    s = p.semaphore("s")
    p.thread(0).signal(s, device=2)  # should have been device 1
    p.thread(1).wait(s)
    assert kinds(p.build()) == ["invalid_device_id"]


def test_device_scope_semaphore_is_shared_by_all_cores_and_waiters_compete():
    p = builder(1, cores=2, backend="gpu")
    g = p.global_semaphore("g")
    p.thread(0, 0).signal(g)
    p.thread(0, 0).wait(g)
    p.thread(0, 1).wait(g)  # two takers, one token: whichever loses is stranded
    result = check(p.build(), exhaustive=True)
    # either block can lose: two stuck states, one per waiting line
    assert [v.kind for v in result.errors] == ["unsatisfied_wait", "unsatisfied_wait"]
    assert len({v.location for v in result.errors}) == 2
    assert len(System(p.build()).instances) == 1  # one instance for both cores


def test_read_steers_a_branch_and_only_some_interleavings_hang():
    """Device 1 reads its semaphore: if device 0's signal already arrived it skips its own
    wait (and leaves the token behind: leftover); else it waits for it (balanced)."""
    p = builder(2)
    s = p.semaphore("s")
    p.thread(0).signal(s, device=1)
    t = p.thread(1)
    seen = t.read(s)
    with t.when(ir.BinOp("eq", seen, 0)):
        t.wait(s)
    result = check(p.build())
    assert [v.kind for v in result.errors] == ["semaphore_leftover"]
    # the counterexample is the schedule where the signal lands before the read
    events = [s.event for s in result.errors[0].trace]
    assert events.index("signal") < events.index("read")


def test_every_input_value_is_checked():
    p = builder(1)
    s = p.semaphore("s")
    n = p.input("n", 1, 3)
    t = p.thread(0)
    t.signal(s, n)
    t.wait(s, 2)  # leaves n - 2: leftover when n == 3, hangs when n == 1
    assert kinds(p.build()) == ["semaphore_leftover", "unsatisfied_wait"]


def test_undeclared_semaphore_is_a_protocol_error():
    from semcheck.errors import ProtocolError

    p = builder(1)
    p.thread(0).signal(Sem("nope"))
    with pytest.raises(ProtocolError, match="undeclared semaphore 'nope'"):
        System(p.build())


def _waits_before_its_own_copy(devices: int):
    """Each device waits on a DMA semaphore, then starts the copy that would fill it."""
    p = builder(devices)
    sem = p.semaphore("sem", DMA)
    src, dst = p.buffer("src", (8, 128)), p.buffer("dst", (8, 128))
    for d in range(devices):
        t = p.thread(d)
        t.dma_wait(sem, 4096)
        t.dma_start(src.whole, dst.whole, recv_sem=sem)
    return p.build()


@pytest.mark.parametrize("devices", [1, 2])
def test_a_wait_only_its_own_later_copy_could_satisfy_is_unsatisfied_not_a_deadlock(devices):
    """A thread cannot run what follows its own wait: that is no cycle of waits between
    threads (deadlock), but a wait nothing left can satisfy, in both engines."""
    from tests.agreement import assert_engines_agree

    for exploration in assert_engines_agree(_waits_before_its_own_copy(devices)):
        [finding] = [f for f, _, _ in exploration.findings.values()]  # one line stuck on every device
        assert finding.kind.value == "unsatisfied_wait" and not finding.cycle
        assert "cycle" not in finding.message
        assert "itself, after " in finding.message and "which it never gets past" in finding.message
        assert len(finding.blocked) == devices


def test_actions_name_a_thread_step_or_a_completion_firing():
    """`enabled` lists each movable thread as its `ThreadStep` and each distinct pending
    completion as an `EventFires`; a remote copy's two sides are `ir.DmaSide`s, send first."""
    from semcheck.semantics import EventFires, ThreadStep

    p = builder(2)
    send, recv = p.semaphore("send", DMA), p.semaphore("recv", DMA)
    buf = p.buffer("buf", (8, 128))
    copy = p.thread(0).dma_start(buf.whole, buf.whole, recv_sem=recv, send_sem=send, device=1)
    copy.wait_send()
    p.thread(1).dma_wait(recv, 4096 // 32, side="recv")
    system = System(p.build())
    [start] = system.initial_states()
    assert system.enabled(start) == [ThreadStep(0)] and system.thread_steps[0] == ThreadStep(0)
    started = system.step(start, ThreadStep(0))
    fires = system.enabled(started)  # both threads wait: only the copy's two sides can move
    assert fires == [EventFires(e) for e in started.events] and ThreadStep(0) not in fires
    assert [a.event.side for a in fires] == [ir.DmaSide.SEND, ir.DmaSide.RECV]
    landed = system.step(started, fires[1])
    assert [e.side for e in landed.events] == [ir.DmaSide.SEND] and landed.sems != started.sems


def test_a_dma_side_reads_as_its_word_and_builders_take_either():
    side = ir.DmaSide.named("send")
    assert side is ir.DmaSide.SEND and ir.DmaSide.named(ir.DmaSide.RECV) is ir.DmaSide.RECV
    assert (str(side), f"{ir.DmaSide.RECV}", f"[{side:>5}]") == ("send", "recv", "[ send]")
    assert ir.DmaSide.SEND < ir.DmaSide.RECV  # pending completions sort send side first
    with pytest.raises(ValueError, match="'send' or 'recv', got 'both'"):
        ir.DmaSide.named("both")
    p = builder(1)
    sem = p.semaphore("sem", DMA)
    p.thread(0).dma_wait(sem, 4, side="send")
    p.thread(0).dma_wait(sem, 4, side=ir.DmaSide.SEND)
    first, second = p.build().threads[0].body
    assert first.side is second.side is ir.DmaSide.SEND
