"""Ring protocols as builder models, with knobs that break them one way at a time: the
mutants `tests/test_parametric.py` holds `--devices all` to the explicit search on.

Each builder mirrors a kernel of the examples: `allgather` the ring all-gather of JAX's guide
(models/ring_allgather.py, examples/tpu/allgather_alln_guide.py), `allreduce` the guide's
double-buffered all-reduce with its capacity handshake (examples/tpu/allreduce_alln_guide.py),
`bidirectional` the two-direction all-gather (examples/tpu/allgather_bidirectional.py),
`reduce_scatter` the reduce-scatter with two receive slots and credits
(examples/tpu/reduce_scatter_capacity.py) and `permute` the one-step ring shift.
"""

from __future__ import annotations

from functools import partial

from semcheck.model import DMA, REGULAR, ProtocolBuilder

BLOCK = (8, 128)


def _handshake(t, barrier, left, right, sides=("left", "right")):
    if "left" in sides:
        t.signal(barrier, device=left)
    if "right" in sides:
        t.signal(barrier, device=right)
    t.wait(barrier, 2)


def allgather(n, *, shared_recv=False, barrier=True, one_sided_barrier=False, wait_recv_first=False,
              wait_send=True, wait_recv=True, to_left=False, slot_shift=0, recv_index_shift=0, rounds_shift=0,
              entry=True, default_barrier=False):
    p = ProtocolBuilder("allgather", devices=n, backend="tpu")
    bar = p.barrier_semaphore(collective_id=0)
    if default_barrier:  # as semcheck/lower/tpu_kernel.py models XLA's barrier before the body
        arrive = p.barrier_semaphore("device_barrier.arrive", collective_id=1)
        release = p.barrier_semaphore("device_barrier.release", collective_id=2)
    send = p.semaphore("send_sem", DMA)
    recv = p.semaphore("recv_sem", DMA, size=1 if shared_recv else max(n - 1, 1))
    out = p.buffer("out", (n, *BLOCK))
    for d in range(n):
        t = p.thread(d)
        left, right = (d - 1) % n, (d + 1) % n
        if entry:
            t.entry("allgather")
        if default_barrier:
            t.signal(arrive, device=0, core=0)
            if d == 0:
                t.wait(arrive, n)
                for e in range(n):
                    t.signal(release, device=e, core=0)
            t.wait(release)
        if barrier:
            _handshake(t, bar, left, right, ("right",) if one_sided_barrier else ("left", "right"))
        for step in range(n - 1 + rounds_shift):
            slot = (d - step - slot_shift) % n
            sem = recv if shared_recv else recv[step + recv_index_shift]
            if wait_recv_first:
                t.dma_wait(sem, 4096)
            copy = t.dma_start(out.region(slot), out.region(slot), recv_sem=sem, send_sem=send,
                               device=left if to_left else right)
            if wait_send:
                copy.wait_send()
            if wait_recv and not wait_recv_first:
                copy.wait_recv()
        if entry:
            t.exit("allgather")
    return p.build()


def allreduce(n, *, capacity="left", capacity_wait=True, wait_capacity_late=False, wait_local=True,
              swap_slots=False, barrier=True, capacity_amount=1, extra_signal=False, entry=True):
    p = ProtocolBuilder("allreduce", devices=n, backend="tpu")
    bar = p.barrier_semaphore(collective_id=0)
    local = p.semaphore("local_sem", DMA)
    send = p.semaphore("send_sem", DMA)
    recv = p.semaphore("recv_sem", DMA)
    cap = p.semaphore("capacity", REGULAR)
    x = p.buffer("x", BLOCK)
    out = p.buffer("out", BLOCK)
    slots = p.buffer("slots", (2, *BLOCK))
    landing = p.buffer("landing", BLOCK)
    for d in range(n):
        t = p.thread(d)
        left, right = (d - 1) % n, (d + 1) % n
        if entry:
            t.entry("allreduce")
        if barrier:
            _handshake(t, bar, left, right)
        t.store(out.whole)
        first = t.dma_start(x.whole, slots.region(0), recv_sem=recv, send_sem=send, device=right)
        first.wait()
        for step in range(n):
            work, spare = step % 2, 1 - step % 2
            if capacity:
                t.signal(cap, device=left if capacity == "left" else right)
                if extra_signal:
                    t.signal(cap, device=left)
            copy_in = t.dma_start(slots.region(work), landing.whole, recv_sem=local)
            if capacity and capacity_wait and not wait_capacity_late:
                t.wait(cap, capacity_amount)
            onward = t.dma_start(slots.region(work), slots.region(work if swap_slots else spare), recv_sem=recv,
                                 send_sem=send, device=right)
            if capacity and capacity_wait and wait_capacity_late:
                t.wait(cap, capacity_amount)
            if wait_local:
                copy_in.wait()
            t.load(out.whole)
            t.load(landing.whole)
            t.store(out.whole)
            onward.wait()
        if capacity and extra_signal:
            t.wait(cap, n)
        if not wait_local:
            t.dma_wait(local, 4096 * n)
        if entry:
            t.exit("allreduce")
    return p.build()


def bidirectional(n, *, shared_recv=False, swap_recv=False, late_wait=True):
    """Half of every slot travels right, half left; one receive semaphore per direction and step."""
    p = ProtocolBuilder("bidirectional", devices=n, backend="tpu")
    bar = p.barrier_semaphore(collective_id=0)
    send = p.semaphore("send_sems", DMA, size=2)
    recv = p.semaphore("recv_sems", DMA, size=2 if shared_recv else 2 * max(n - 1, 1))
    out = p.buffer("out", (n, 8, 128))
    for d in range(n):
        t = p.thread(d)
        left, right = (d - 1) % n, (d + 1) % n
        t.entry("bidirectional")
        _handshake(t, bar, left, right)
        pending = []
        for step in range(n - 1):
            r_sem = recv[0] if shared_recv else recv[step]
            l_sem = recv[1] if shared_recv else recv[(n - 1) + step]
            if swap_recv:
                r_sem, l_sem = l_sem, r_sem
            up = t.dma_start(out.region((d - step) % n, 0, size=(1, 4, 128)),
                             out.region((d - step) % n, 0, size=(1, 4, 128)), recv_sem=r_sem, send_sem=send[0],
                             device=right)
            down = t.dma_start(out.region((d + step) % n, 4, size=(1, 4, 128)),
                               out.region((d + step) % n, 4, size=(1, 4, 128)), recv_sem=l_sem, send_sem=send[1],
                               device=left)
            if late_wait:
                pending = [up, down]
                for c in pending:
                    c.wait()
            else:
                pending.extend([up, down])
        for c in ([] if late_wait else pending):
            c.wait()
        t.exit("bidirectional")
    return p.build()


def reduce_scatter(n, *, slots=2, credits=2, drain=True):
    """Partial sums travel right into one of `slots` receive slots; a sender waits for a unit
    of capacity before every send past the first `credits`."""
    p = ProtocolBuilder("reduce_scatter", devices=n, backend="tpu")
    bar = p.barrier_semaphore(collective_id=0)
    send = p.semaphore("send_sems", DMA, size=slots)
    recv = p.semaphore("recv_sems", DMA, size=slots)
    cap = p.semaphore("capacity", REGULAR)
    acc = p.buffer("acc", BLOCK)
    buf = p.buffer("recv_buf", (slots, *BLOCK))
    for d in range(n):
        t = p.thread(d)
        left, right = (d - 1) % n, (d + 1) % n
        t.entry("reduce_scatter")
        _handshake(t, bar, left, right)
        t.store(acc.whole)
        for step in range(n - 1):
            slot = step % slots
            if step >= credits:
                t.wait(cap)
            copy = t.dma_start(acc.whole, buf.region(slot), recv_sem=recv[slot], send_sem=send[slot], device=right)
            copy.wait()
            t.load(buf.region(slot))
            t.store(acc.whole)
            t.signal(cap, device=left)
        if drain:
            t.wait(cap, min(credits, n - 1))
        t.exit("reduce_scatter")
    return p.build()


def permute(n, *, handshake=True, wait_recv=True):
    p = ProtocolBuilder("permute", devices=n, backend="tpu")
    bar = p.barrier_semaphore(collective_id=0)
    send = p.semaphore("send_sem", DMA)
    recv = p.semaphore("recv_sem", DMA)
    x = p.buffer("x", BLOCK)
    out = p.buffer("out", BLOCK)
    for d in range(n):
        t = p.thread(d)
        t.entry("permute")
        if handshake:
            _handshake(t, bar, (d - 1) % n, (d + 1) % n)
        copy = t.dma_start(x.whole, out.whole, recv_sem=recv, send_sem=send, device=(d + 1) % n)
        copy.wait_send()
        if wait_recv:
            copy.wait_recv()
        t.load(out.whole)
        t.exit("permute")
    return p.build()


def token_from_device0(n):
    """Not one program: device 0 signals first, the others wait first."""
    p = ProtocolBuilder("token", devices=n, backend="tpu")
    token = p.semaphore("token", REGULAR)
    for d in range(n):
        t = p.thread(d)
        if d == 0:
            t.signal(token, device=1 % n)
            t.wait(token)
        else:
            t.wait(token)
            t.signal(token, device=(d + 1) % n)
    return p.build()


def _permute_handshake_above_2(n):
    """The handshake left out at 2 devices only (a kernel that special-cases a pair): the
    template holds from N = 3 on, where it is proved; N = 2 is checked on its own and fails."""
    return permute(n, handshake=n != 2)


def _allgather_shared_from_6(n):
    """One receive semaphore for every step from 6 devices on: not one template at N = 4..7."""
    return allgather(n, shared_recv=n >= 6)


# name -> (model, what --devices all says: "safe", ("kind", smallest N) or "not parametric")
MUTANTS = {
    "allgather": (allgather, "safe"),
    "allgather_shared_recv": (partial(allgather, shared_recv=True), ("data_race", 3)),
    "allgather_no_barrier": (partial(allgather, barrier=False), ("remote_before_entry", 2)),
    "allgather_default_barrier": (partial(allgather, barrier=False, default_barrier=True), "safe"),
    "allgather_one_sided_barrier": (partial(allgather, one_sided_barrier=True), ("unsatisfied_wait", 2)),
    "allgather_wait_recv_first": (partial(allgather, wait_recv_first=True), ("deadlock", 2)),
    "allgather_no_wait_send": (partial(allgather, wait_send=False), ("semaphore_leftover", 2)),
    "allgather_no_wait_recv": (partial(allgather, wait_recv=False), ("semaphore_leftover", 2)),
    "allgather_to_left": (partial(allgather, to_left=True), ("data_race", 3)),
    # forwards slot d - k - 1: another starting slot, the same handoffs (the data is wrong, the protocol is not)
    "allgather_slot_off_by_one": (partial(allgather, slot_shift=1), "safe"),
    "allgather_recv_index_next": (partial(allgather, recv_index_shift=1), ("invalid_semaphore_index", 2)),
    "allgather_extra_round": (partial(allgather, rounds_shift=1), ("invalid_semaphore_index", 2)),
    "allreduce": (allreduce, "safe"),
    "allreduce_no_capacity": (partial(allreduce, capacity=None), ("data_race", 2)),
    "allreduce_capacity_to_right": (partial(allreduce, capacity="right"), ("data_race", 3)),
    "allreduce_no_capacity_wait": (partial(allreduce, capacity_wait=False), ("data_race", 2)),
    "allreduce_capacity_wait_late": (partial(allreduce, wait_capacity_late=True), ("data_race", 2)),
    "allreduce_no_local_wait": (partial(allreduce, wait_local=False), ("data_race", 2)),
    "allreduce_swap_slots": (partial(allreduce, swap_slots=True), ("data_race", 2)),
    "allreduce_no_barrier": (partial(allreduce, barrier=False), ("remote_before_entry", 2)),
    "allreduce_capacity_two": (partial(allreduce, capacity_amount=2), ("deadlock", 2)),
    "allreduce_extra_signal": (partial(allreduce, extra_signal=True), ("data_race", 2)),
    "bidirectional": (bidirectional, "safe"),
    "bidirectional_shared_recv": (partial(bidirectional, shared_recv=True), ("data_race", 3)),
    "bidirectional_waits_at_end": (partial(bidirectional, late_wait=False), ("data_race", 3)),
    "reduce_scatter": (reduce_scatter, "safe"),
    "reduce_scatter_no_drain": (partial(reduce_scatter, drain=False), ("semaphore_leftover", 2)),
    "reduce_scatter_three_credits": (partial(reduce_scatter, credits=3), ("data_race", 4)),
    "permute": (permute, "safe"),
    "permute_no_handshake": (partial(permute, handshake=False), ("remote_before_entry", 2)),
    "permute_no_wait_recv": (partial(permute, wait_recv=False), ("data_race", 2)),
    "permute_no_handshake_at_2": (partial(_permute_handshake_above_2), ("remote_before_entry", 2)),
    "allgather_shared_recv_from_6": (_allgather_shared_from_6, ("data_race", 6)),
    "token_from_device0": (token_from_device0, "not parametric"),
}
