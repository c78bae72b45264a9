"""Random uniform ring protocols: whatever `--devices all` says of one is what the explicit
search says count by count. A loop body is drawn from the steps ring kernels are made of
(a remote copy into a slot that depends on the round and its send and receive waits, in any
order, with capacity signals and waits, local copies, loads and stores), so most draws race, block or leave a count behind
somewhere, and some are safe: a "safe for every N" must be safe at every count searched
(including counts beyond those the template was fitted at), and a smallest failing N must
be the smallest the search finds."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semcheck.api import check_protocol
from semcheck.model import DMA, REGULAR, ProtocolBuilder
from semcheck.parametric.family import EveryCount, every_count_of
from semcheck.result import Verdict

BLOCK = (8, 128)


EXTRAS = ("signal_left", "signal_right", "wait_capacity", "local_copy", "wait_local", "load_work", "store_work")
OPTIONS = {"handshake": ("both", "right", "none"), "rounds": (0, -1), "per_step_recv": (True, False),
           "slot": ("spare", "work", "ring"), "target": (1, -1), "credit": (True, False), "drain": (True, False)}
# Two safe rings the draws start from: the all-gather (one receive semaphore per step) and the
# double-buffered all-reduce with its capacity handshake.
BASES = (
    {"handshake": "both", "rounds": -1, "per_step_recv": True, "slot": "ring", "target": 1,
     "body": ("copy", "wait_send", "wait_recv"), "credit": False, "drain": False},
    {"handshake": "both", "rounds": 0, "per_step_recv": False, "slot": "spare", "target": 1,
     "body": ("signal_left", "local_copy", "wait_capacity", "copy", "wait_local", "load_work", "wait_send",
              "wait_recv"), "credit": False, "drain": False},
)


@st.composite
def rings(draw):
    """A safe base with up to three edits: two steps swapped, a step added or dropped, an
    option changed (about a third of the draws stay safe)."""
    spec = dict(draw(st.sampled_from(BASES)))
    body = list(spec["body"])
    for edit in draw(st.lists(st.sampled_from(("swap", "add", "drop", "option")), max_size=3)):
        if edit == "swap":
            a, b = draw(st.integers(0, len(body) - 1)), draw(st.integers(0, len(body) - 1))
            body[a], body[b] = body[b], body[a]
        elif edit == "add":
            body.insert(draw(st.integers(0, len(body))), draw(st.sampled_from(EXTRAS)))
        elif edit == "drop" and any(s in EXTRAS for s in body):
            body.pop(draw(st.sampled_from([i for i, s in enumerate(body) if s in EXTRAS])))
        elif edit == "option":
            key = draw(st.sampled_from(sorted(OPTIONS)))
            spec[key] = draw(st.sampled_from(OPTIONS[key]))
    spec["body"] = tuple(body)
    return spec


def build(n: int, spec: dict):  # noqa: C901
    p = ProtocolBuilder("random_ring", devices=n, backend="tpu")
    barrier = p.barrier_semaphore(collective_id=0)
    send = p.semaphore("send_sem", DMA)
    recv = p.semaphore("recv_sem", DMA, size=n + 1 if spec["per_step_recv"] else 1)
    local = p.semaphore("local_sem", DMA)
    capacity = p.semaphore("capacity", REGULAR)
    slots = p.buffer("slots", (2, *BLOCK))
    ring = p.buffer("ring", (n, *BLOCK))
    landing = p.buffer("landing", BLOCK)
    for d in range(n):
        t = p.thread(d)
        left, right = (d - 1) % n, (d + 1) % n
        t.entry("random_ring")
        if spec["handshake"] != "none":
            t.signal(barrier, device=right)
            if spec["handshake"] == "both":
                t.signal(barrier, device=left)
            t.wait(barrier, 2 if spec["handshake"] == "both" else 1)
        if spec["credit"]:
            t.signal(capacity, device=left)
        for k in range(n + spec["rounds"]):
            work = k % 2
            copy = inward = None
            for step in spec["body"]:
                if step in ("signal_left", "signal_right"):
                    t.signal(capacity, device=left if step == "signal_left" else right)
                elif step == "wait_capacity":
                    t.wait(capacity)
                elif step == "copy" and copy is None:
                    if spec["slot"] == "ring":
                        src = dst = ring.region((d - k) % n)
                    else:
                        src, dst = slots.region(work), slots.region(1 - work if spec["slot"] == "spare" else work)
                    sem = recv[k] if spec["per_step_recv"] else recv
                    copy = t.dma_start(src, dst, recv_sem=sem, send_sem=send, device=(d + spec["target"]) % n)
                elif step == "wait_send":
                    t.dma_wait(send, 4096, side="send")
                elif step == "wait_recv":
                    t.dma_wait(recv[k] if spec["per_step_recv"] else recv, 4096)
                elif step == "local_copy" and inward is None:
                    inward = t.dma_start(slots.region(work), landing.whole, recv_sem=local)
                elif step == "wait_local" and inward is not None:
                    inward.wait()
                elif step == "load_work":
                    t.load(slots.region(work))
                elif step == "store_work":
                    t.store(slots.region(work))
        if spec["drain"]:
            t.wait(capacity)
        t.exit("random_ring")
    return p.build()


def _explicit(spec, n):
    result = check_protocol(build(n, spec), engine="explicit", stop_at_first=True)
    return result.verdict


def _agrees(spec, up_to):
    outcome = every_count_of(lambda n: build(n, spec), EveryCount(search_up_to=up_to))
    if outcome.verdict is Verdict.SAFE:
        for n in range(2, up_to + 1):
            assert _explicit(spec, n) is Verdict.SAFE, (n, outcome.claim)
    elif outcome.verdict is Verdict.VIOLATION:
        assert outcome.smallest is not None
        for n in range(2, outcome.smallest):
            assert _explicit(spec, n) is Verdict.SAFE, n
        assert _explicit(spec, outcome.smallest) is Verdict.VIOLATION
    else:  # inconclusive: it searched up to `up_to` and found nothing
        for n in range(2, up_to + 1):
            assert _explicit(spec, n) is not Verdict.VIOLATION, n


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(rings())
def test_random_ring_agrees_with_the_explicit_search(spec):
    _agrees(spec, 9)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rings())
def test_many_random_rings_agree_with_the_explicit_search(spec):
    _agrees(spec, 12)


def test_a_safe_random_ring_is_proved():
    """The draws start from safe rings: the all-reduce with its capacity handshake is proved."""
    spec = BASES[1]
    outcome = every_count_of(lambda n: build(n, spec), EveryCount(search_up_to=9))
    assert outcome.verdict is Verdict.SAFE, outcome.claim
    _agrees(spec, 9)
