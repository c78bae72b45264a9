"""Data races, arrivals outside the kernel, and the exit check, one rule at a time."""

from tests.engine_check import check
from semcheck.passes.invocations import repeat
from semcheck.model import DMA, ProtocolBuilder


def errors(protocol, **options):
    return sorted(v.kind for v in check(protocol, **options).errors)


def builder(devices=1, backend="tpu"):
    return ProtocolBuilder("t", devices=devices, backend=backend)


def test_reading_a_copy_destination_before_waiting_is_a_race():
    for wait_first, expected in ((True, []), (False, ["data_race"])):
        p = builder()
        sem = p.semaphore("sem", DMA)
        src, dst = p.buffer("src", (8, 128)), p.buffer("dst", (8, 128))
        t = p.thread(0)
        copy = t.dma_start(src.whole, dst.whole, recv_sem=sem)
        if wait_first:
            copy.wait_recv()
        t.load(dst.whole)
        if not wait_first:
            copy.wait_recv()
        assert errors(p.build()) == expected, wait_first


def test_disjoint_slots_do_not_race():
    p = builder()
    sem = p.semaphore("sem", DMA)
    src, slots = p.buffer("src", (8, 128)), p.buffer("slots", (2, 8, 128))
    t = p.thread(0)
    copy = t.dma_start(src.whole, slots.region(0), recv_sem=sem)
    t.store(slots.region(1))  # the other slot: fine while the copy lands in slot 0
    t.load(src.whole)  # reading a copy's source while it reads it too: fine
    copy.wait_recv()
    assert errors(p.build()) == []


def test_overwriting_a_source_before_wait_send_is_a_race():
    p = builder(2)
    send, recv = p.semaphore("send", DMA), p.semaphore("recv", DMA)
    buf = p.buffer("buf", (8, 128))
    t = p.thread(0)
    copy = t.dma_start(buf.whole, buf.whole, recv_sem=recv, send_sem=send, device=1)
    t.store(buf.whole)  # the bug: the data may not have left yet
    copy.wait_send()
    p.thread(1).dma_wait(recv, 4096)
    result = check(p.build())
    [race] = result.errors
    assert race.kind == "data_race"
    assert race.location.line != race.related[0].line  # the store and the copy's start
    assert "while a copy still in flight reads" in race.message


def test_two_copies_in_flight_into_one_slot_race():
    p = builder(3)
    recv = p.semaphore("recv", DMA)
    send = p.semaphore("send", DMA)
    buf = p.buffer("buf", (8, 128))
    for d in (0, 1):
        copy = p.thread(d).dma_start(buf.whole, buf.whole, recv_sem=recv, send_sem=send, device=2)
        copy.wait_send()
    p.thread(2).dma_wait(recv, 8192)
    assert errors(p.build()) == ["data_race"]


def _signal_into_peer(handshake: bool):
    p = builder(2)
    barrier = p.barrier_semaphore()
    flag = p.semaphore("flag")
    for d in (0, 1):
        t = p.thread(d)
        t.entry()
        if handshake:
            t.signal(barrier, device=1 - d)
            t.wait(barrier)
        if d == 0:
            t.signal(flag, device=1)
        else:
            t.wait(flag)
        t.exit()
    return p.build()


def test_remote_signal_before_the_peer_entered():
    # The early signal is lost when the peer enters (a fresh allocation), so its wait hangs
    # too; that hang is the early arrival's consequence, not a second bug: one report.
    assert errors(_signal_into_peer(handshake=False)) == ["remote_before_entry"]
    assert errors(_signal_into_peer(handshake=True)) == []


def test_no_engine_reports_a_cascade():
    from semcheck.api import check_protocol

    for engine in ("explicit", "z3"):
        for reduce in (True, False):
            result = check_protocol(_signal_into_peer(handshake=False), engine=engine, reduce=reduce)
            assert sorted(v.kind for v in result.errors) == ["remote_before_entry"], (engine, reduce)


def test_barrier_semaphores_may_be_signalled_any_time():
    p = builder(2)
    barrier = p.barrier_semaphore()
    for d in (0, 1):
        t = p.thread(d)
        t.entry()
        t.signal(barrier, device=1 - d)
        t.wait(barrier)
        t.exit()
    assert errors(p.build()) == []


def test_a_copy_landing_after_the_peer_left_is_reported():
    p = builder(2)
    barrier = p.barrier_semaphore()
    send, recv = p.semaphore("send", DMA), p.semaphore("recv", DMA)
    buf = p.buffer("buf", (8, 128))
    for d in (0, 1):
        t = p.thread(d)
        t.entry()
        t.signal(barrier, device=1 - d)
        t.wait(barrier)
        if d == 0:
            copy = t.dma_start(buf.whole, buf.whole, recv_sem=recv, send_sem=send, device=1)
            copy.wait_send()
        t.exit()  # device 1 never waits for the copy: it may leave before it lands
    [v] = check(p.build()).errors
    # the copy adds to a count nobody waits for again: reported at the end as a leftover
    assert v.kind == "semaphore_leftover" and "added to after the kernel exited" in v.message


def test_exit_requires_scratch_semaphores_back_at_zero():
    p = builder()
    s = p.semaphore("s")
    t = p.thread(0)
    t.entry()
    t.signal(s)
    t.exit()
    [v] = check(p.build()).errors
    assert v.kind == "semaphore_leftover" and "when the kernel exits" in v.message
    [v] = check(repeat(p.build(), 2)).errors  # the second entry finds what the first left
    assert v.kind == "semaphore_leftover" and "enters the kernel again" in v.message


def _barrier_then_copy(double_barrier: bool, devices: int = 5):
    """The all-reduce pattern of JAX's distributed tutorial, reduced to its handshake: a
    barrier with both neighbours, then a copy to the right neighbour.

    With one barrier and two invocations, device 1's left neighbour 0 can finish invocation
    1 (it needs only its own left neighbours) and signal device 1's barrier again for
    invocation 2, so device 1 passes barrier 1 without its right neighbour 2 and copies into
    it before it entered. Finishing needs data from the left, whose barrier needs its left
    neighbour's signal: from 5 devices on, that chain no longer forces device 2 in."""
    p = ProtocolBuilder("handshake", devices=devices)
    barrier = p.barrier_semaphore(collective_id=7)
    second = p.semaphore("second_barrier")
    send, recv = p.semaphore("send", DMA), p.semaphore("recv", DMA)
    x, out = p.buffer("x", (8, 128)), p.buffer("out", (8, 128))
    for d in range(devices):
        t = p.thread(d)
        left, right = (d - 1) % devices, (d + 1) % devices
        t.signal(barrier, device=left)
        t.signal(barrier, device=right)
        t.wait(barrier, 2)
        if double_barrier:
            t.signal(second, device=left)
            t.signal(second, device=right)
            t.wait(second, 2)
        copy = t.dma_start(x.whole, out.whole, recv_sem=recv, send_sem=send, device=right)
        copy.wait_send()
        copy.wait_recv()
    return p.build()


def test_single_barrier_breaks_only_when_the_kernel_runs_twice():
    for double in (False, True):
        assert errors(repeat(_barrier_then_copy(double), 1)) == [], double
    assert "remote_before_entry" in errors(repeat(_barrier_then_copy(False), 2))
    assert errors(repeat(_barrier_then_copy(True), 2)) == []
    assert errors(repeat(_barrier_then_copy(False, devices=4), 2)) == []  # the ring closes too soon


def _ring_waiting_only_for_its_send(devices: int = 2):
    """Each device copies its block to its right neighbour and waits only until its own
    block has left (`wait_send`), never until the neighbour's block has landed."""
    p = ProtocolBuilder("send_only", devices=devices)
    barrier = p.barrier_semaphore()
    send, recv = p.semaphore("send", DMA), p.semaphore("recv", DMA)
    x, out = p.buffer("x", (8, 128)), p.buffer("out", (8, 128))
    for d in range(devices):
        t = p.thread(d)
        t.signal(barrier, device=(d - 1) % devices)
        t.wait(barrier)
        t.dma_start(x.whole, out.whole, recv_sem=recv, send_sem=send, device=(d + 1) % devices).wait_send()
    return p.build()


def _copy_start_loc(protocol):
    from semcheck import ir

    [loc] = {i.loc for t in protocol.threads for i in t.body if isinstance(i, ir.DmaStart)}
    return loc


def test_a_copy_still_landing_at_the_next_entry_is_found_at_its_start():
    """The entry that finds the copy names it: its start line, not the kernel's first line
    (where the semaphore is declared), and no 'last addition' that never happened."""
    from semcheck import ir
    from semcheck.semantics.properties import hazard_findings
    from semcheck.semantics import System

    p = builder()
    sem = p.semaphore("sem", DMA)
    src, dst = p.buffer("src", (8, 128)), p.buffer("dst", (8, 128))
    p.thread(0).dma_start(src.whole, dst.whole, recv_sem=sem)  # nobody waits for it
    protocol = repeat(p.build(), 2)
    assert isinstance(protocol.threads[0].body[3], ir.KernelEntry)
    system = System(protocol)
    state = system.initial_states()[0]
    for _ in range(4):  # entry, start, exit, entry again: the copy is still in flight
        state = system.step(state, system.thread_steps[0])
    [finding] = hazard_findings(system, state)
    start = _copy_start_loc(protocol)
    assert finding.kind.value == "semaphore_leftover" and finding.loc == start
    assert finding.other_start == (0, 1)
    assert f"the copy device 0 started at {start}" in finding.message and "still landing" in finding.message


def test_both_engines_locate_a_leftover_copy_of_a_kernel_run_twice_at_its_start():
    from semcheck.api import check_protocol
    from semcheck.report.text import missing_lines

    protocol = repeat(_ring_waiting_only_for_its_send(), 2)
    start = _copy_start_loc(protocol)
    for engine in ("explicit", "z3"):
        [v] = [v for v in check_protocol(protocol, engine=engine).errors if v.kind == "semaphore_leftover"]
        assert v.location == start, engine
        if "still landing" in v.message:  # found in flight, or landed (then the count is its addition)
            assert "The last addition" not in v.message, engine
        else:
            assert f"The last addition to it is at {start}." in v.message, engine
        [takes] = v.missing
        # what it held when the second entry found it, not after that entry reset it
        assert takes.has + takes.in_flight == 4096, (engine, takes)
        if takes.in_flight:
            assert "still landing add 4096" in missing_lines(takes)[0], engine


def test_a_count_left_at_the_next_entry_is_what_the_previous_invocation_left():
    p = builder()
    s = p.semaphore("s")
    p.thread(0).signal(s)
    [v] = check(repeat(p.build(), 2)).errors
    assert v.kind == "semaphore_leftover" and "enters the kernel again" in v.message
    assert v.location.line == p.build().threads[0].body[0].loc.line  # the signal
    [takes] = v.missing
    assert takes.has == 1  # what the entry found, not the 0 it leaves
    assert takes.in_flight == 0
