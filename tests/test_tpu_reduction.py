"""The reduced search reaches exactly the findings of the unreduced one on the TPU ring
examples: one receive semaphore shared by every step's copy, capacity handshakes, local
copies and double-buffered slots, where the counting cut over a whole stubborn set
(`Independence.cut`) and the waiters-first closure (`engines/explicit/reduction.py`) save the most
and would go wrong first. At 2 devices, where the unreduced search is small (the
all-reduce: 2,396 states, the bidirectional reduce-scatter: 14,581; at 3 devices minutes)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from semcheck import core_entry
from semcheck.frontends.capture import capture_script
from semcheck.engines.explicit import search as explicit
from semcheck.engines.budget import Budget
from semcheck.semantics import System
from tests.tpu_support import EXAMPLES

RING_EXAMPLES = [
    os.path.join(EXAMPLES, name) for name in (
        "allreduce_ring.py", "allreduce_ring_no_capacity.py",
        "reduce_scatter_bidirectional.py", "reduce_scatter_bidirectional_no_drain.py",
        "reduce_scatter_capacity.py", "reduce_scatter_capacity_deadlock.py",
        "allgather_ring_capacity.py", "allgather_ring_overwrite.py",
    )
]
CHECKS = [(path, 2) for path in RING_EXAMPLES]
_protocols: dict[tuple[str, int], list] = {}


@pytest.fixture(scope="module", autouse=True)
def _captured():
    with ThreadPoolExecutor(max_workers=2) as pool:
        for check, outcome in zip(CHECKS, pool.map(lambda c: capture_script(*c), CHECKS)):
            assert not outcome.errors, outcome.errors
            _protocols[check] = outcome.protocols


@pytest.mark.parametrize("path, devices", CHECKS, ids=lambda v: os.path.basename(v) if isinstance(v, str) else str(v))
def test_reduction_preserves_every_finding_on_tpu_ring_examples(path, devices):
    for captured in _protocols[path, devices]:
        protocol = core_entry.apply(captured, True)
        full = explicit.explore(System(protocol), reduce=False, silence_reported_races=False,
                                budget=Budget(max_states=300_000))
        reduced = explicit.explore(System(protocol), reduce=True, silence_reported_races=False)
        assert full.exhausted is None and reduced.exhausted is None
        assert set(reduced.findings) == set(full.findings)
        assert reduced.states <= full.states
