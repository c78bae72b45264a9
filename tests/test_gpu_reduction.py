"""The reduced search reaches exactly the findings of the unreduced one on the GPU example
protocols: the GPU frontend adds no instruction, but uses the existing ones in new ways
(non-decrementing waits as mbarrier phases, competing waits on a per-launch semaphore shared
by blocks, TMA copies whose completion arrives on a barrier), so the footprints that the
reduction trusts are exercised here on real kernels."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings

from semcheck.frontends.capture_cache import capture
from semcheck.engines.explicit import search as explicit
from semcheck.semantics import System
from semcheck.engines.options import ExplicitOptions
from tests.strategies import protocols
from tests.reference import reference_findings
from tests.test_gpu_examples import EXAMPLES

_protocols: dict[str, list] = {}


@pytest.fixture(scope="module", autouse=True)
def _captured():
    with ThreadPoolExecutor(max_workers=2) as pool:
        for path, outcome in zip(EXAMPLES, pool.map(lambda p: capture(p, 2), EXAMPLES)):
            assert not outcome.errors, outcome.errors
            _protocols[path] = outcome.protocols


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_reduction_preserves_every_finding_on_gpu_examples(path):
    for protocol in _protocols[path]:
        full = explicit.explore(System(protocol), ExplicitOptions(reduce=False, silence_reported_races=False))
        reduced = explicit.explore(System(protocol), ExplicitOptions(reduce=True, silence_reported_races=False))
        assert full.exhausted is None and reduced.exhausted is None
        assert set(reduced.findings) == set(full.findings)
        assert reduced.states <= full.states


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(protocols(with_mbarriers=True))
def test_reduction_preserves_every_finding_with_mbarrier_phase_waits(protocol):
    # As in test_reduction: a random protocol whose unreduced search is huge is set aside.
    full = reference_findings(protocol)
    reduced = explicit.explore(System(protocol), ExplicitOptions(reduce=True, silence_reported_races=False))
    assert reduced.exhausted is None
    assert set(reduced.findings) == set(full.findings), protocol
