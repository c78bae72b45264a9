"""Root causes named from the IR and the counterexample (engines/diagnosis.py): each shape on a
small model with its one line dropped, the cause's fields exactly, every violation it
explains grouped into one problem, and the fix naming what is missing."""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest

from semcheck import ir
from semcheck.ir import Scope
from semcheck.api import check_protocol
from semcheck.model import DMA, REGULAR, ProtocolBuilder
from semcheck.report import causes, groups, text
from semcheck.result import CauseKind, WaitCall

BLOCK = (8, 128)


def line_of(fn, marker: str) -> int:
    source, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(source) if marker in line)


def ring_threads(name: str, devices: int):
    """A protocol builder with a barrier, a send and a receive semaphore and an output, and
    each device's thread after its entry handshake with both neighbours."""
    p = ProtocolBuilder(name, devices=devices, backend="tpu")
    barrier = p.barrier_semaphore()
    sems = p.semaphore("send_sem", DMA), p.semaphore("recv_sem", DMA)
    out = p.buffer("out", (devices, *BLOCK))
    threads = []
    for d in range(devices):
        t = p.thread(d)
        t.signal(barrier, device=(d - 1) % devices)
        t.signal(barrier, device=(d + 1) % devices)
        t.wait(barrier, 2)
        threads.append(t)
    return p, sems, out, threads


def ring(devices: int, *, wait_send: bool = True, wait_recv: bool = True):
    """Each device copies its block to its right neighbour, after a barrier handshake."""
    p, (send, recv), out, threads = ring_threads("ring", devices)
    for d, t in enumerate(threads):
        copy = t.dma_start(out.region(d), out.region(d), recv_sem=recv, send_sem=send, device=(d + 1) % devices)  # start
        if wait_send:
            copy.wait_send()
        if wait_recv:
            copy.wait_recv()
    return p.build()


def loop_ring(devices: int):
    """Copies in a loop, each waited for at the top of the next turn; the last one is not."""
    p, (send, recv), out, threads = ring_threads("loop_ring", devices)
    for d, t in enumerate(threads):
        copy = None
        for step in range(devices - 1):
            if copy is not None:
                copy.wait()  # earlier
            slot = (d - step) % devices
            copy = t.dma_start(out.region(slot), out.region(slot),  # loop start
                               recv_sem=recv, send_sem=send, device=(d + 1) % devices)
    return p.build()


def loop_ring_sends_waited(devices: int):
    """Copies in a loop whose send side is waited after each start and whose receive side
    is never waited (a ragged all-to-all with its final receive-count wait deleted)."""
    p, (send, recv), out, threads = ring_threads("loop_ring_sends_waited", devices)
    for d, t in enumerate(threads):
        for step in range(devices - 1):
            slot = (d - step) % devices
            copy = t.dma_start(out.region(slot), out.region(slot),  # sends-waited start
                               recv_sem=recv, send_sem=send, device=(d + 1) % devices)
            copy.wait_send()
    return p.build()


def ready_ring(devices: int):
    """Each device tells its left neighbour it is ready; nobody waits for that."""
    p = ProtocolBuilder("ready_ring", devices=devices, backend="tpu")
    barrier = p.barrier_semaphore()
    ready = p.semaphore("ready", REGULAR)
    for d in range(devices):
        t = p.thread(d)
        t.signal(barrier, device=(d - 1) % devices)
        t.signal(barrier, device=(d + 1) % devices)
        t.wait(barrier, 2)
        t.signal(ready, device=(d - 1) % devices)  # ready
    return p.build()


def test_a_copy_never_waited_for_is_one_problem_naming_its_start_and_the_call():
    r = check_protocol(ring(4, wait_send=False, wait_recv=False), engine="explicit", exhaustive=True)
    start = line_of(ring, "# start")
    assert {v.kind for v in r.errors} == {"semaphore_leftover"} and len(r.errors) == 2  # send and receive
    assert {(v.cause.kind, v.cause.site.line, v.cause.sides) for v in r.errors} == {
        (CauseKind.UNWAITED_COPY, start, ("send", "recv"))}
    [problem] = groups.group([r])
    assert len(problem.refs) == 2
    report = text.render([r])
    assert f"  error: the copy started at line {start} is never waited for" in report
    assert f"    fix: call its `.wait()` (or `.wait_send()` / `.wait_recv()`) after line {start}" in report
    assert report.count("  error: ") == 1


def test_one_side_left_names_that_sides_wait():
    r = check_protocol(ring(4, wait_recv=False), engine="explicit")
    [v] = r.errors
    assert v.cause.kind is CauseKind.UNWAITED_COPY and v.cause.sides == ("recv",)
    assert causes.fix(v.cause) == f"call its `.wait_recv()` (on the receiving device) after line {line_of(ring, '# start')}"
    r = check_protocol(ring(4, wait_send=False), engine="explicit")
    [v] = r.errors
    assert v.cause.sides == ("send",) and causes.fix(v.cause).startswith("call its `.wait_send()` after line")


def local_prefetch(devices: int):
    """Each device copies a block within its own memory (`pltpu.make_async_copy`) and never
    waits for it, as a pipeline whose wait for its first block was deleted."""
    p = ProtocolBuilder("local_prefetch", devices=devices, backend="tpu")
    sem = p.semaphore("copy_sem", DMA)
    src, dst = p.buffer("src", BLOCK), p.buffer("dst", BLOCK, space="vmem")
    for d in range(devices):
        p.thread(d).dma_start(src.whole, dst.whole, recv_sem=sem)  # local start
    return p.build()


def test_a_local_copy_never_waited_for_is_fixed_by_its_wait():
    """A local copy has one semaphore, awaited with `.wait()` by the thread that started it:
    the fix names that call, not `.wait_recv()` on a receiving device (found on a mutant of
    tpu-inference's ragged paged attention v3 whose wait for the query block was deleted)."""
    r = check_protocol(local_prefetch(2), engine="explicit")
    [v] = r.errors
    start = line_of(local_prefetch, "# local start")
    assert v.kind == "semaphore_leftover" and v.cause.kind is CauseKind.UNWAITED_COPY
    assert v.cause.sides == ("recv",) and v.cause.local and v.cause.site.line == start
    assert causes.fix(v.cause) == f"call its `.wait()` after line {start}"
    assert "receiving device" not in text.render([r])
    # a remote copy keeps naming its side
    [remote] = check_protocol(ring(4, wait_recv=False), engine="explicit").errors
    assert not remote.cause.local and "`.wait_recv()` (on the receiving device)" in causes.fix(remote.cause)


def test_a_loops_last_copy_names_the_wait_that_takes_the_earlier_ones():
    r = check_protocol(loop_ring(4), engine="explicit")
    cause = {v.cause for v in r.errors}
    assert len(cause) == 1
    [cause] = cause
    assert (cause.kind, cause.site.line, cause.last_only, cause.wait.line) == (
        CauseKind.UNWAITED_COPY, line_of(loop_ring, "# loop start"), True, line_of(loop_ring, "# earlier"))
    assert causes.statement(cause).startswith(f"the last copy started at line {cause.site.line} is never waited for")
    assert "once more after the last run" in causes.fix(cause)


def test_a_loops_copies_whose_other_side_is_waited_are_not_called_the_last_one():
    """The earlier starts' send-side waits say nothing about their receive side: no copy's
    receive is waited, so the cause is not 'the last copy' with the send wait taking the
    earlier ones (it was, on a mutant of JAX's ragged all-to-all)."""
    r = check_protocol(loop_ring_sends_waited(4), engine="explicit")
    assert r.errors
    start = line_of(loop_ring_sends_waited, "# sends-waited start")
    assert {(v.cause.kind, v.cause.site.line, v.cause.sides, v.cause.last_only, v.cause.wait)
            for v in r.errors} == {(CauseKind.UNWAITED_COPY, start, ("recv",), False, None)}
    assert causes.statement(r.errors[0].cause).startswith(f"the copy started at line {start} is never waited for")
    assert causes.fix(r.errors[0].cause) == (
        f"call its `.wait_recv()` (on the receiving device) after line {start}")


def test_a_semaphore_signalled_and_never_waited_on_says_so():
    r = check_protocol(ready_ring(4), engine="explicit")
    signal = line_of(ready_ring, "# ready")
    assert r.errors and all(v.kind == "semaphore_leftover" for v in r.errors)
    assert {(v.cause.kind, v.cause.site.line, v.cause.semaphore) for v in r.errors} == {
        (CauseKind.UNCONSUMED_SIGNAL, signal, "ready")}
    report = text.render([r])
    assert f"  error: no wait on `ready` exists: its signals at line {signal} are never consumed" in report
    assert "    fix: wait on `ready`" in report


def test_a_correct_ring_has_nothing_to_diagnose():
    r = check_protocol(ring(4), engine="explicit")
    assert r.verdict.value == "safe" and not r.violations


def test_device_lists_fold():
    from semcheck.report.folding import devices_text, ranges

    assert devices_text(range(8), 8) == "every device"
    assert devices_text([0, 1, 2, 3], 8) == "devices 0-3"
    assert devices_text([3], 8) == "device 3"
    assert devices_text([0, 2, 3, 4, 7, 7], 8) == "devices 0, 2-4, 7"
    assert ranges([1, 2]) == "1, 2"


def handshake_without_wait(devices: int):
    """The entry handshake's wait dropped: each device signals its neighbours' barrier
    semaphore and copies to its right neighbour at once."""
    p = ProtocolBuilder("no_handshake_wait", devices=devices, backend="tpu")
    barrier = p.barrier_semaphore()
    send, recv = p.semaphore("send_sem", DMA), p.semaphore("recv_sem", DMA)
    out = p.buffer("out", (devices, *BLOCK))
    for d in range(devices):
        t = p.thread(d)
        t.entry()
        t.signal(barrier, device=(d - 1) % devices)  # handshake
        t.signal(barrier, device=(d + 1) % devices)
        copy = t.dma_start(out.region(d), out.region(d), recv_sem=recv, send_sem=send, device=(d + 1) % devices)  # copy
        copy.wait()
        t.exit()
    return p.build()


def test_a_handshake_without_its_wait_is_one_problem_with_its_early_arrivals():
    r = check_protocol(handshake_without_wait(4), engine="explicit", exhaustive=True)
    signal, copy = line_of(handshake_without_wait, "# handshake"), line_of(handshake_without_wait, "# copy")
    assert {v.kind for v in r.errors} == {"remote_before_entry", "semaphore_leftover"}
    assert {(v.cause.kind, v.cause.semaphore, v.cause.site.line) for v in r.errors} == {
        (CauseKind.UNCONSUMED_SIGNAL, "barrier", signal)}
    [early] = [v for v in r.errors if v.kind == "remote_before_entry"]
    assert early.cause.before.line == copy  # the wait belongs before the copy that arrives early
    assert len(groups.group([r])) == 1


# --- early arrivals let go by the wrong signal ----------------------------------------------------


def one_way_handshake(devices: int, *, to_every_peer: bool = False):
    """Each device signals its right neighbour's barrier semaphore and waits for one signal
    (its left neighbour's), then signals a flag of its right neighbour (or, with
    `to_every_peer`, of every peer) and waits for its own flag(s)."""
    p = ProtocolBuilder("one_way", devices=devices, backend="tpu")
    barrier, flag = p.barrier_semaphore(), p.semaphore("flag", REGULAR)
    for d in range(devices):
        t = p.thread(d)
        t.entry()
        t.signal(barrier, device=(d + 1) % devices)  # handshake
        t.wait(barrier, 1)
        peers = [(d + k) % devices for k in range(1, devices)] if to_every_peer else [(d + 1) % devices]
        for peer in peers:
            t.signal(flag, device=peer)  # flag
        t.wait(flag, len(peers))
        t.exit()
    return p.build()


def test_an_early_signal_let_go_by_the_left_neighbours_handshake_names_the_wrong_signaller():
    r = check_protocol(one_way_handshake(4), engine="explicit")
    [early] = r.errors
    assert early.kind == "remote_before_entry"
    handshake, flag = line_of(one_way_handshake, "# handshake"), line_of(one_way_handshake, "# flag")
    c = early.cause
    assert (c.kind, c.site.line, c.wait.line, c.writer.line) == (CauseKind.WRONG_SIGNALLER, handshake,
                                                                     handshake + 1, flag)
    assert (c.by_offset, c.want_offset, c.writer_signals) == (-1, 1, True)
    assert causes.statement(c) == (
        f"the wait at line {handshake + 1} on device d was satisfied by the signal at line {handshake} from "
        f"device d-1, not by device d+1, whose semaphore the signal at line {flag} increments")
    assert causes.fix(c) == (
        f"the signal at line {handshake} goes from each device d to device d+1; the signal at line {flag} needs "
        "it from the device it signals: send it to device d-1 instead")
    assert check_protocol(one_way_handshake(2), engine="explicit").verdict.value == "safe"


def test_an_early_signal_to_every_peer_gets_no_fix_that_mends_one_peer():
    # Redirecting the handshake's signal would hold back the signal to one peer only.
    r = check_protocol(one_way_handshake(4, to_every_peer=True), engine="explicit")
    [early] = r.errors
    assert early.kind == "remote_before_entry" and early.cause is None


def two_kernels_one_barrier(devices: int):
    """Two kernels run one after the other on every device and share the barrier semaphore
    (one collective_id): `right` copies to the right neighbour after a handshake in which
    each device signals the device that sends to it and waits for one signal; `left` does
    the same the other way round."""
    p = ProtocolBuilder("two_kernels", devices=devices, backend="tpu")
    barrier = p.barrier_semaphore()
    send, recv = p.semaphore("send_sem", DMA), p.semaphore("recv_sem", DMA)
    x = p.buffer("x", BLOCK)
    outs = {"right": p.buffer("out_right", BLOCK), "left": p.buffer("out_left", BLOCK)}
    for d in range(devices):
        t = p.thread(d)
        for kernel, step in (("right", 1), ("left", -1)):
            out = outs[kernel]
            t.entry(kernel)
            t.signal(barrier, device=(d - step) % devices)  # ready
            t.wait(barrier, 1)
            copy = t.dma_start(x.region(0), out.region(0), recv_sem=recv, send_sem=send,
                               device=(d + step) % devices)
            copy.wait()
            t.exit(kernel)
    return replace(p.build(), kernels=("right", "left"))  # a program of two kernels, as linked


@pytest.mark.parametrize("engine", ["explicit", "z3"])
def test_a_barrier_wait_that_passes_on_another_kernels_signal_names_both_kernels_and_invocations(engine):
    # The early pass itself is the first violation (semantics.rules._early_pass): device d's
    # barrier wait in `right` passes on the signal device d-1 sent from `left`.
    r = check_protocol(two_kernels_one_barrier(4), engine=engine)
    [early] = r.errors
    ready = line_of(two_kernels_one_barrier, "# ready")
    assert (early.kind, early.location.line) == ("remote_before_entry", ready + 1)
    c = early.cause
    assert (c.kind, c.site.line, c.wait.line, c.writer) == (CauseKind.OTHER_KERNELS_SIGNAL, ready, ready + 1, None)
    assert (c.kernels, c.invocations, c.by_offset) == (("right", "left"), (1, 2), -1)
    assert causes.statement(c) == (
        f"the wait at line {ready + 1} in `right` (invocation 1) on device d passed on the signal at line {ready} "
        "that device d-1 sent from another kernel, `left` (invocation 2), which shares `barrier`: the signals "
        "meant for this wait had not all arrived, so what follows it runs before its peers are ready for it")
    assert causes.fix(c).startswith("give `right` and `left` different collective_ids")


def test_an_early_copy_let_go_by_a_barrier_wait_that_passed_early_has_that_wait_as_its_cause():
    # The copy the early pass lets go, reported too when the check goes on past the first:
    # its root cause is the early pass (the same cause, so one problem), and it follows it.
    r = check_protocol(two_kernels_one_barrier(4), engine="explicit", exhaustive=True)
    ready, copy = line_of(two_kernels_one_barrier, "# ready"), line_of(two_kernels_one_barrier, "copy = t.dma_start")
    passed, early = r.errors
    assert [(v.kind, v.location.line) for v in r.errors] == [("remote_before_entry", ready + 1),
                                                              ("remote_before_entry", copy)]
    assert early.caused_by is passed
    assert early.cause.key == passed.cause.key
    assert (early.cause.kind, early.cause.site.line, early.cause.invocations) == (CauseKind.OTHER_KERNELS_SIGNAL,
                                                                                  ready, (1, 2))
    assert len(groups.group([r])) == 1
    assert check_protocol(two_kernels_one_barrier(2), engine="explicit").verdict.value == "safe"


def two_copies_in_flight(devices: int, *, cut: bool):
    """Each device sends two slots to its right neighbour on one receive semaphore, with the
    same byte count, waits for one landing and forwards slot 1, as tpu-inference's batched
    RPA ring does when a credit is released before the receive wait: the later copy can
    land first and satisfy the wait. With `cut`, every thread's lowering stopped after the
    forward (as RPA's did at 4 devices), so its later waits are unknown."""
    p, (send, recv), _out, threads = ring_threads("two_copies_in_flight", devices)
    mine, inbox = p.buffer("mine", (2, *BLOCK)), p.buffer("inbox", (2, *BLOCK))
    forwarded = p.buffer("forwarded", BLOCK)
    fwd_send, fwd_recv = p.semaphore("fwd_send", DMA), p.semaphore("fwd_recv", DMA)
    for d, t in enumerate(threads):
        right = (d + 1) % devices
        copies = [t.dma_start(mine.region(slot), inbox.region(slot), recv_sem=recv, send_sem=send, device=right)  # send
                  for slot in (1, 0)]
        copies[0].wait_recv()  # the wait
        t.dma_start(inbox.region(1), forwarded.region(), recv_sem=fwd_recv, send_sem=fwd_send,
                    device=right)  # forward
    protocol = p.build()
    if not cut:
        return protocol
    stop = ir.Cut(protocol.threads[0].body[-1].loc, "the lowering stopped here")
    return replace(protocol, threads=tuple(replace(th, body=th.body + (stop,)) for th in protocol.threads))


def test_a_copy_whose_wait_took_another_copy_is_not_called_never_waited_where_the_lowering_stopped():
    """With the rest of each thread unknown past a cut, a copy with no wait in the prefix
    is not 'never waited for' (RPA's ring was told to wait once more after its loop, a wait
    the part past the stop may hold); the race's cause is the wait that took the other copy."""
    send = line_of(two_copies_in_flight, "# send")
    cut = check_protocol(two_copies_in_flight(3, cut=True), engine="explicit", exhaustive=True)
    races = [v for v in cut.errors if v.kind == "data_race"]
    assert races and all(v.cause is not None for v in races)
    assert {(v.cause.kind, v.cause.site.line, v.cause.by.line) for v in races} == {
        (CauseKind.WRONG_COPY, line_of(two_copies_in_flight, "# the wait"), send)}
    assert "both were in flight on one receive semaphore" in causes.statement(races[0].cause)
    # the whole program, where nothing waits for the copies' other landings: never waited for
    whole = check_protocol(two_copies_in_flight(3, cut=False), engine="explicit")
    assert {v.cause.kind for v in whole.errors if v.cause is not None} == {CauseKind.UNWAITED_COPY}


def rows_then_mail(devices: int, *, mail_sem: str = "recv_sem", read_by_copy: bool = True):
    """Each device sends its row to every peer and then a mail block to its right
    neighbour, both onto one receive semaphore with one byte count, waits for its peers'
    rows by bytes and copies every row out, as moe_metadata_sem_unfenced.py's metadata
    all-gather does before its scatter: a neighbour's mail can meet the wait while a row is
    still to come. With `mail_sem` another name, the mail has a semaphore of its own. The
    rows are read by a local copy (a row sent late starts while it is in flight) or, without
    `read_by_copy`, by a load (a row in flight when it reads)."""
    p, (send, recv), rows, threads = ring_threads("rows_then_mail", devices)
    mail_recv = recv if mail_sem == "recv_sem" else p.semaphore(mail_sem, DMA)
    outbox, mailbox = p.buffer("outbox", BLOCK), p.buffer("mailbox", (devices, *BLOCK))
    snapshot, local = p.buffer("snapshot", (devices, *BLOCK)), p.semaphore("local_sem", DMA)
    row_bytes = p.nbytes(rows.region(0))
    for d, t in enumerate(threads):
        for peer in range(devices):
            if peer != d:
                t.dma_start(rows.region(d), rows.region(d), recv_sem=recv, send_sem=send, device=peer)  # row
        right = (d + 1) % devices
        t.dma_start(outbox.whole, mailbox.region(d), recv_sem=mail_recv, send_sem=send, device=right)  # mail
        t.dma_wait(recv, (devices - 1) * row_bytes)  # the wait
        t.dma_wait(send, devices * row_bytes, side="send")
        if read_by_copy:
            t.dma_start(rows.whole, snapshot.whole, recv_sem=local).wait()  # read every row
        else:
            t.load(rows.whole)  # load every row
        t.dma_wait(mail_recv, row_bytes)
    return p.build()


@pytest.mark.parametrize("read_by_copy", [True, False])
def test_a_wait_met_by_another_lines_copy_names_it_whichever_copy_the_race_is_found_at(read_by_copy):
    """The race is found at a row that starts after the reading copy began (its wait passed
    before the row was sent), or at a load while a row is in flight (the load reads every
    device's row, so rows that did land are no sign the wait was for them): both are the
    wait met by the mail's bytes (moe_metadata_sem_unfenced.py's headline named only the
    race at 4 and 8 devices)."""
    wait, mail, row = (line_of(rows_then_mail, m) for m in ("# the wait", "# mail", "# row"))
    found_at = row if read_by_copy else line_of(rows_then_mail, "# load every row")
    r = check_protocol(rows_then_mail(3, read_by_copy=read_by_copy), engine="explicit", exhaustive=True)
    races = [v for v in r.errors if v.kind == "data_race"]
    assert races and {v.location.line for v in races} == {found_at}
    assert [(v.cause.kind, v.cause.site.line, v.cause.by.line, v.cause.writer.line) for v in races
            if v.cause is not None] == [(CauseKind.WRONG_COPY, wait, mail, row)] * len(races)
    assert causes.statement(races[0].cause) == (f"the wait at line {wait} was satisfied by the copy from line "
                                                f"{mail}, not by the copy from line {row} that writes these rows")
    assert len(groups.group([r])) == 1
    fixed = rows_then_mail(3, mail_sem="mail_sem", read_by_copy=read_by_copy)
    assert check_protocol(fixed, engine="explicit").verdict.value == "safe"



def slot_reused_after_shared_send_wait(devices: int, *, own_sem: bool = False):
    """Each device scatters a block to its right neighbour, then sends a slot home on the
    same send semaphore, waits for one copy's worth of sends and refills the slot, as
    moe_expert_pipeline_shared_send.py's gather does: the scatter's send can meet the wait
    while the slot is still being read. With `own_sem`, the slot's send has its own."""
    p, (send, recv), _rows, threads = ring_threads("slot_reused_after_shared_send_wait", devices)
    tokens, mailbox = p.buffer("tokens", BLOCK), p.buffer("mailbox", (devices, *BLOCK))
    slot, home = p.buffer("slot", BLOCK), p.buffer("home", (devices, *BLOCK))
    slot_send = p.semaphore("slot_send", DMA) if own_sem else send
    home_recv = p.semaphore("home_recv", DMA)
    block_bytes = p.nbytes(tokens.whole)
    for d, t in enumerate(threads):
        right = (d + 1) % devices
        t.dma_start(tokens.whole, mailbox.region(d), recv_sem=recv, send_sem=send, device=right)  # scatter
        t.dma_start(slot.whole, home.region(d), recv_sem=home_recv, send_sem=slot_send, device=right)  # send home
        t.dma_wait(slot_send, block_bytes, side="send")  # slot free
        t.store(slot.whole)  # refill
        t.dma_wait(send, block_bytes, side="send")
        t.dma_wait(recv, block_bytes)
        t.dma_wait(home_recv, block_bytes)
    return p.build()


def test_a_send_wait_met_by_another_copys_send_names_the_copy_still_reading_the_rows():
    wait, scatter, home = (line_of(slot_reused_after_shared_send_wait, m)
                           for m in ("# slot free", "# scatter", "# send home"))
    r = check_protocol(slot_reused_after_shared_send_wait(3), engine="explicit", exhaustive=True)
    races = [v for v in r.errors if v.kind == "data_race"]
    assert races and {v.location.line for v in races} == {line_of(slot_reused_after_shared_send_wait, "# refill")}
    assert [(v.cause.kind, v.cause.site.line, v.cause.by.line, v.cause.writer.line, v.cause.sides) for v in races
            if v.cause is not None] == [(CauseKind.WRONG_COPY, wait, scatter, home, ("send",))] * len(races)
    assert causes.statement(races[0].cause) == (f"the wait at line {wait} was satisfied by the copy from line "
                                                f"{scatter}, not by the copy from line {home} that reads these rows")
    assert causes.fix(races[0].cause) == (f"give the copies from line {home} and line {scatter} send semaphores of "
                                          f"their own, so that the wait at line {wait} counts only the copy from "
                                          f"line {home}")
    assert len(groups.group([r])) == 1
    fixed = slot_reused_after_shared_send_wait(3, own_sem=True)
    assert check_protocol(fixed, engine="explicit").verdict.value == "safe"


def landing_slot_reused(devices: int, *, capacity: bool = False, rows_read: int = 0):
    """Each device sends two blocks, one after the other, into its right neighbour's
    landing slot and reads what its left neighbour sent after each receive wait, as a ring
    all-gather without a capacity semaphore does: the second copy can land while the first
    is still being read. With `capacity`, each device tells its left neighbour when its
    slot is free. The two blocks go to rows 0 and 1 of the slot when `rows_read` is 1, and
    the reader reads row 1 after the first wait: then the race is the reader's, not the
    sender's (nothing earlier wrote those rows)."""
    p, (send, recv), _out, threads = ring_threads("landing_slot_reused", devices)
    landing, mine = p.buffer("landing", (2, *BLOCK)), p.buffer("mine", (2, *BLOCK))
    free = p.semaphore("free", REGULAR)
    for d, t in enumerate(threads):
        left, right = (d - 1) % devices, (d + 1) % devices
        for step in range(2):
            if capacity and step:
                t.wait(free)
            row = step if rows_read else 0
            t.dma_start(mine.region(step), landing.region(row), recv_sem=recv, send_sem=send, device=right).wait()  # copy
            t.load(landing.region(rows_read if rows_read else 0))  # read the slot
            if capacity and not step:
                t.signal(free, device=left)
    return p.build()


def test_a_copy_into_a_peers_rows_again_without_a_go_ahead_names_the_missing_capacity_handshake():
    copy = line_of(landing_slot_reused, "# copy")
    r = check_protocol(landing_slot_reused(3), engine="explicit", exhaustive=True)
    races = [v for v in r.errors if v.kind == "data_race"]
    assert races and all(v.cause is not None for v in races)
    assert {(v.cause.kind, v.cause.site.line, v.cause.buffer, v.cause.want_offset) for v in races} == {
        (CauseKind.NO_GO_AHEAD, copy, "landing", 1)}
    assert causes.statement(races[0].cause) == (
        f"the copy at line {copy} writes rows of `landing` on device d+1 again with no word from device d+1 since "
        "the last copy into them: that copy may still be landing, or device d+1 still reading it")
    assert "a capacity semaphore" in causes.fix(races[0].cause)
    assert len(groups.group([r])) == 1
    assert check_protocol(landing_slot_reused(3, capacity=True), engine="explicit").verdict.value == "safe"
    # a read of rows whose copy was not waited for: no earlier copy wrote them, so no go-ahead was missed
    other = check_protocol(landing_slot_reused(3, rows_read=1), engine="explicit", exhaustive=True)
    assert other.verdict.value == "violation"
    assert all(v.cause is None or v.cause.kind is not CauseKind.NO_GO_AHEAD for v in other.errors)


# --- Mosaic GPU shapes: a wait placed after what it guards, a release nobody waits for, waits
# that compete for one count (examples/gpu's buggy twins, each on a model of its own) ---------


def gpu_early_read(*, wait_first: bool):
    """A thread copies a tile in and reads it, waiting for the copy's barrier after the read
    (examples/gpu/tma_barrier_early_read.py)."""
    p = ProtocolBuilder("gpu_early_read", devices=1, backend="gpu")
    x, tile = p.buffer("x", BLOCK, space="gmem", scope=Scope.DEVICE), p.buffer("tile", BLOCK, space="smem")
    bar = p.semaphore("bar")
    t = p.thread(0)
    t.dma_start(x.whole, tile.whole, recv_sem=bar)  # tma copy
    if wait_first:
        t.wait(bar, 1, decrement=False)
    t.load(tile.whole)  # early read
    if not wait_first:
        t.wait(bar, 1, decrement=False)  # late wait
    return p.build()


def test_a_read_before_the_copys_barrier_wait_names_the_wait_to_move():
    r = check_protocol(gpu_early_read(wait_first=False), engine="explicit", exhaustive=True)
    [race] = r.errors
    copy, read, wait = (line_of(gpu_early_read, m) for m in ("# tma copy", "# early read", "# late wait"))
    c = race.cause
    assert (c.kind, c.site.line, c.before.line, c.by.line, c.writer.line, c.semaphore, c.needs) == (
        CauseKind.LATE_WAIT, wait, read, copy, copy, "bar", ())
    assert causes.statement(c) == (f"the read at line {read} comes before the wait at line {wait} on `bar` that orders "
                                   f"it after the copy from line {copy}: until that wait, nothing keeps the two apart")
    assert causes.fix(c) == f"move the wait at line {wait} before line {read}"
    assert check_protocol(gpu_early_read(wait_first=True), engine="explicit").verdict.value == "safe"


def gpu_store_ring(*, wait_first: bool, devices: int = 2):
    """Each device stores into its right neighbour's inbox and signals it, and reads its own
    inbox, waiting for the signal after the read (examples/gpu/remote_store_ring_no_wait.py:
    the other side is a plain store, whose signal follows it)."""
    p = ProtocolBuilder("gpu_store_ring", devices=devices, backend="gpu")
    inbox = p.buffer("inbox", (1, 128), space="gmem", scope=Scope.DEVICE)
    ready = p.global_semaphore("ready")
    for d in range(devices):
        t = p.thread(d)
        t.store(inbox.region(0, size=(1,)), device=(d + 1) % devices)  # remote store
        t.signal(ready, 1, device=(d + 1) % devices)  # ready signal
        if wait_first:
            t.wait(ready, 1, decrement=False)
        t.load(inbox.region(0, size=(1,)))  # inbox read
        if not wait_first:
            t.wait(ready, 1, decrement=False)  # ready wait
    return p.build()


def test_a_read_before_the_wait_for_the_writers_signal_names_the_signal_and_the_wait():
    r = check_protocol(gpu_store_ring(wait_first=False), engine="explicit", exhaustive=True)
    store, signal, read, wait = (line_of(gpu_store_ring, m)
                                 for m in ("# remote store", "# ready signal", "# inbox read", "# ready wait"))
    assert r.errors and {(v.cause.kind, v.cause.site.line, v.cause.before.line, v.cause.by.line, v.cause.writer.line)
                         for v in r.errors} == {(CauseKind.LATE_WAIT, wait, read, store, signal)}
    assert causes.statement(r.errors[0].cause) == (
        f"the read at line {read} comes before the wait at line {wait} on `ready` that orders it after the write at "
        f"line {store} (through the signal at line {signal}): until that wait, nothing keeps the two apart")
    assert len(groups.group([r])) == 1
    assert check_protocol(gpu_store_ring(wait_first=True), engine="explicit").verdict.value == "safe"


def gpu_reload_before_mma_done(*, wait_first: bool):
    """A thread reloads an operand while the tensor core may still read it: the tensor core
    (a thread of its own) arrives on `mma_done` once a commit is issued and the MMA is done,
    and the thread commits and waits only after the reload (examples/gpu/tcgen05_mma_reload_early.py)."""
    p = ProtocolBuilder("gpu_reload", devices=1, backend="gpu")
    x, a = p.buffer("x", BLOCK, space="gmem", scope=Scope.DEVICE), p.buffer("a", BLOCK, space="smem")
    ops = p.buffer("ops", BLOCK, space="tmem")
    loaded, done, commits, mma_done = (p.semaphore(n) for n in ("loaded", "done", "commits", "mma_done"))
    t, core = p.thread(0, 0, 0), p.thread(0, 0, 4)
    t.dma_start(a.whole, ops.whole, recv_sem=done)  # mma read
    if wait_first:
        t.signal(commits)
        t.wait(mma_done, 1, decrement=False)
    t.dma_start(x.whole, a.whole, recv_sem=loaded)  # reload
    if not wait_first:
        t.signal(commits)  # commit
        t.wait(mma_done, 1, decrement=False)  # mma wait
    t.wait(loaded, 1, decrement=False)
    core.wait(commits)
    core.wait(done, 1, decrement=False)
    core.signal(mma_done)  # arrive
    return p.build()


def test_a_reload_before_the_relayed_wait_moves_the_commit_it_needs_with_the_wait():
    r = check_protocol(gpu_reload_before_mma_done(wait_first=False), engine="explicit", exhaustive=True)
    read, reload, commit, wait, arrive = (line_of(gpu_reload_before_mma_done, m) for m in (
        "# mma read", "# reload", "# commit", "# mma wait", "# arrive"))
    [race] = r.errors
    c = race.cause
    assert (c.kind, c.site.line, c.before.line, c.by.line, c.writer.line, tuple(n.line for n in c.needs)) == (
        CauseKind.LATE_WAIT, wait, reload, read, arrive, (commit,))
    assert causes.fix(c) == f"move the signal at line {commit} and the wait at line {wait} before line {reload}"
    assert check_protocol(gpu_reload_before_mma_done(wait_first=True), engine="explicit").verdict.value == "safe"


def gpu_scoped_handoff(*, wait_first: bool):
    """Thread 0 stores a tile with a TMA store and tells thread 1 it may refill the tile, but
    waits for the store's read of it only after that (examples/gpu/scoped_tile_handoff_no_read_wait.py)."""
    p = ProtocolBuilder("gpu_handoff", devices=1, backend="gpu")
    out, tile = p.buffer("out", BLOCK, space="gmem", scope=Scope.DEVICE), p.buffer("tile", BLOCK, space="smem")
    read, written, turn = p.semaphore("read"), p.semaphore("written"), p.semaphore("turn")
    t0, t1 = p.thread(0, 0, 0), p.thread(0, 0, 1)
    t0.dma_start(tile.whole, out.whole, recv_sem=written, send_sem=read, dst_device=0)  # tma store
    if wait_first:
        t0.wait(read, 1, decrement=False)
    t0.signal(turn)  # hand over
    if not wait_first:
        t0.wait(read, 1, decrement=False)  # read wait
    t0.wait(written, 1, decrement=False)
    t1.wait(turn)
    t1.store(tile.whole)  # refill
    return p.build()


def test_a_copys_wait_after_the_signal_that_lets_the_racing_thread_go_names_that_signal():
    r = check_protocol(gpu_scoped_handoff(wait_first=False), engine="explicit", exhaustive=True)
    store, hand, wait, refill = (line_of(gpu_scoped_handoff, m) for m in (
        "# tma store", "# hand over", "# read wait", "# refill"))
    [race] = r.errors
    c = race.cause
    assert (c.kind, c.site.line, c.before.line, c.by.line, c.lets_go.line) == (
        CauseKind.LATE_WAIT, wait, hand, store, refill)
    assert causes.statement(c) == (
        f"the signal at line {hand}, which lets the write at line {refill} go, comes before the wait at line {wait} "
        f"on `read` that orders it after the copy from line {store}: until that wait, nothing keeps the two apart")
    assert causes.fix(c) == f"move the wait at line {wait} before line {hand}"
    assert check_protocol(gpu_scoped_handoff(wait_first=True), engine="explicit").verdict.value == "safe"


def gpu_exchange(*, wait: bool):
    """Two threads of a block each store a row and signal `arrived`, then read the other's
    row; nothing waits on `arrived` unless `wait` (examples/gpu/thread_exchange_no_wait.py)."""
    p = ProtocolBuilder("gpu_exchange", devices=1, backend="gpu")
    stage = p.buffer("stage", (2, 128), space="smem")
    arrived = p.semaphore("arrived")
    for k in range(2):
        t = p.thread(0, 0, k)
        t.store(stage.region(k, size=(1,)))
        t.signal(arrived)  # arrive
        if wait:
            t.wait(arrived, 2, decrement=False)
        t.load(stage.region(1 - k, size=(1,)))  # read other
    return p.build()


def test_a_store_whose_arrival_nobody_waits_for_names_the_missing_wait_before_the_read():
    r = check_protocol(gpu_exchange(wait=False), engine="explicit", exhaustive=True)
    arrive, read = line_of(gpu_exchange, "# arrive"), line_of(gpu_exchange, "# read other")
    assert r.errors and {(v.cause.kind, v.cause.site.line, v.cause.semaphore, v.cause.before.line)
                         for v in r.errors} == {(CauseKind.UNCONSUMED_SIGNAL, arrive, "arrived", read)}
    assert causes.fix(r.errors[0].cause).startswith(f"wait on `arrived` (`pl.semaphore_wait(arrived, ...)`) before line {read}")
    assert check_protocol(gpu_exchange(wait=True), engine="explicit").verdict.value == "safe"


def gpu_slot_reuse(*, release: bool):
    """A producer thread copies two tiles into one slot; the consumer waits for each, reads
    it and arrives on `consumed`, which the producer waits for before reusing the slot only
    if `release` (examples/gpu/warp_producer_consumer_no_release.py)."""
    p = ProtocolBuilder("gpu_slot", devices=1, backend="gpu")
    x, slot = p.buffer("x", (2, *BLOCK), space="gmem", scope=Scope.DEVICE), p.buffer("slot", BLOCK, space="smem")
    loaded, consumed = p.semaphore("loaded"), p.semaphore("consumed")
    producer, consumer = p.thread(0, 0, 0), p.thread(0, 0, 1)
    for step in range(2):
        if step and release:
            producer.wait(consumed, 1, decrement=False)
        producer.dma_start(x.region(step, size=(1,)), slot.whole, recv_sem=loaded)  # fill slot
        consumer.wait(loaded, step + 1, decrement=False)
        consumer.load(slot.region(0, size=(1,)))
        consumer.signal(consumed)  # release slot
    return p.build()


def test_a_slot_refilled_without_waiting_for_the_consumers_release_names_that_release():
    r = check_protocol(gpu_slot_reuse(release=False), engine="explicit", exhaustive=True)
    fill, release = line_of(gpu_slot_reuse, "# fill slot"), line_of(gpu_slot_reuse, "# release slot")
    races = [v for v in r.errors if v.kind == "data_race"]
    assert races and {(v.cause.kind, v.cause.site.line, v.cause.semaphore, v.cause.before.line)
                      for v in races} == {(CauseKind.UNCONSUMED_SIGNAL, release, "consumed", fill)}
    assert check_protocol(gpu_slot_reuse(release=True), engine="explicit").verdict.value == "safe"


def gpu_grid_barrier(*, decrement: bool):
    """Every block adds one to a global semaphore and waits for the total
    (examples/gpu/grid_barrier_competing_waits.py with `decrement`)."""
    p = ProtocolBuilder("gpu_grid_barrier", devices=1, cores=3, backend="gpu")
    arrived = p.global_semaphore("arrived")
    for block in range(3):
        t = p.thread(0, block)
        t.signal(arrived)
        t.wait(arrived, 3, decrement=decrement)  # barrier wait
    return p.build()


def test_decrementing_waits_for_one_total_are_named_as_competing():
    r = check_protocol(gpu_grid_barrier(decrement=True), engine="explicit", exhaustive=True)
    wait = line_of(gpu_grid_barrier, "# barrier wait")
    assert r.errors and {(v.kind, v.cause.kind, v.cause.site.line, v.cause.semaphore) for v in r.errors} == {
        ("unsatisfied_wait", CauseKind.COMPETING_WAITS, wait, "arrived")}
    assert "`decrement=False`" in causes.fix(r.errors[0].cause)
    assert check_protocol(gpu_grid_barrier(decrement=False), engine="explicit").verdict.value == "safe"


def gpu_tma_store_read_back(*, read_only: bool):
    """A TMA store's output read back after a wait for the store's reads only
    (examples/gpu/tma_store_read_only_wait.py)."""
    p = ProtocolBuilder("gpu_read_back", devices=1, backend="gpu")
    out, tile = p.buffer("out", BLOCK, space="gmem", scope=Scope.DEVICE), p.buffer("tile", BLOCK, space="smem")
    read, written = p.semaphore("read"), p.semaphore("written")
    t = p.thread(0)
    t.dma_start(tile.whole, out.whole, recv_sem=written, send_sem=read, dst_device=0)  # tma store
    t.wait(read, 1, decrement=False)
    if not read_only:
        t.wait(written, 1, decrement=False)
    t.load(out.whole)
    return p.build()


def test_a_tma_store_waited_for_its_reads_only_names_the_full_wait():
    r = check_protocol(gpu_tma_store_read_back(read_only=True), engine="explicit", exhaustive=True)
    store = line_of(gpu_tma_store_read_back, "# tma store")
    [race] = r.errors
    c = race.cause
    assert (c.kind, c.site.line, c.sides, c.waited_with) == (CauseKind.UNWAITED_COPY, store, ("recv",),
                                                             WaitCall.TMA_STORE_WAIT)
    assert causes.statement(c) == (f"the writes of the copy started at line {store} are never waited for: the wait "
                                   "for it takes only its reads of the source")
    assert causes.fix(c) == (f"wait for it with `plgpu.wait_smem_to_gmem(0)` (not `wait_read_only=True`) after "
                             f"line {store}")
    assert check_protocol(gpu_tma_store_read_back(read_only=False), engine="explicit").verdict.value == "safe"


def gpu_store_then_copy_in():
    """A thread starts a copy into a tile, then stores into the tile, then waits for the copy:
    which of the two writes was meant first is not said by where the wait is."""
    p = ProtocolBuilder("gpu_waw", devices=1, backend="gpu")
    x, tile = p.buffer("x", BLOCK, space="gmem", scope=Scope.DEVICE), p.buffer("tile", BLOCK, space="smem")
    bar = p.semaphore("bar")
    t = p.thread(0)
    t.dma_start(x.whole, tile.whole, recv_sem=bar)
    t.store(tile.whole)
    t.wait(bar, 1, decrement=False)
    return p.build()


def test_two_writes_of_one_tile_are_not_called_a_late_wait():
    r = check_protocol(gpu_store_then_copy_in(), engine="explicit", exhaustive=True)
    assert r.errors and all(v.kind == "data_race" for v in r.errors)
    assert all(v.cause is None or v.cause.kind is not CauseKind.LATE_WAIT for v in r.errors)
