"""The reduced search reaches exactly the findings of the unreduced one on the TPU ring
examples: one receive semaphore shared by every step's copy, capacity handshakes, local
copies and double-buffered slots, where the counting cut over a whole stubborn set
(`Independence.cut`) and the waiters-first closure (`engines/explicit/reduction.py`) save the most
and would go wrong first. At 2 devices, where the unreduced search is small (the
all-reduce: 2,396 states, the bidirectional reduce-scatter: 14,581; at 3 devices minutes)."""

from __future__ import annotations

import os

import pytest

from semcheck.passes import core_entry
from semcheck.engines.budget import Budget
from semcheck.engines.explicit import search as explicit
from semcheck.frontends import capture_cache
from semcheck.semantics import System
from semcheck.engines.options import ExplicitOptions
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


# Each test captures its own example (through the session's capture cache, so a module that
# checks the same example at the same count shares the capture), and xdist may run the tests
# on different workers.
@pytest.mark.parametrize("path, devices", CHECKS, ids=lambda v: os.path.basename(v) if isinstance(v, str) else str(v))
def test_reduction_preserves_every_finding_on_tpu_ring_examples(path, devices):
    outcome = capture_cache.capture(path, devices)
    assert not outcome.errors, outcome.errors
    for captured in outcome.protocols:
        protocol = core_entry.apply(captured, True)
        full = explicit.explore(System(protocol),
                                ExplicitOptions(reduce=False, silence_reported_races=False), budget=Budget(max_states=300_000))
        reduced = explicit.explore(System(protocol), ExplicitOptions(reduce=True, silence_reported_races=False))
        assert full.exhausted is None and reduced.exhausted is None
        assert set(reduced.findings) == set(full.findings)
        assert reduced.states <= full.states
