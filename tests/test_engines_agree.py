"""The explicit and z3 engines reach the same verdicts and the same findings.

Finding keys are compared, not just kinds: which wait is unsatisfied, which waits form a
cycle, which instruction faults with which kind, which semaphore is left over. The z3
engine reaches that by enumerating every terminal configuration (where each thread stopped)
and every fault site, each answer replayed and classified by the same `properties` code.
"""

from __future__ import annotations

import glob
import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from semcheck.engines.explicit import search as explicit
from semcheck.engines.z3 import engine as smt
from semcheck.frontends import load
from semcheck.frontends.capture_cache import capture
from semcheck.semantics import System
from tests.agreement import assert_engines_agree, kinds, verdict
from tests.strategies import control_flow_protocols, protocols
from tests.test_gpu_examples import EXAMPLES as GPU_EXAMPLES
from tests.tpu_support import expectation

MODELS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")
MODELS = sorted(glob.glob(os.path.join(MODELS_DIR, "*.py")))

# Models that poll a semaphore in a loop with no bound: z3 cannot unroll them far enough and
# says so (inconclusive); the explicit engine decides them (tests/test_endless.py).
UNBOUNDED_POLLING = {"poll_flag", "poll_flag_never_set"}


@pytest.mark.parametrize("devices", [2, 4, 8])
@pytest.mark.parametrize("path", MODELS, ids=lambda p: os.path.splitext(os.path.basename(p))[0])
def test_engines_agree_on_model(path, devices):
    (protocol,) = load(path, devices)
    name = os.path.splitext(os.path.basename(path))[0]
    if name in UNBOUNDED_POLLING:
        by_solver = smt.explore(System(protocol))
        assert by_solver.exhausted and "unrolling bound" in by_solver.exhausted
        assert not explicit.explore(System(protocol)).exhausted
        return
    by_search, by_solver = assert_engines_agree(protocol)
    expected, _warnings = expectation(path).kinds_at(devices)  # its `# semcheck: expect` comments
    assert kinds(by_solver) == expected
    assert verdict(by_solver) == ("violation" if expected else "safe")


@pytest.mark.parametrize("path", GPU_EXAMPLES, ids=os.path.basename)
def test_engines_agree_on_gpu_example(path):
    """Every GPU example at 2 devices, mbarrier phases and all (a phase overrun is z3's
    question too): the same finding keys, and the kinds the example declares."""
    outcome = capture(path, 2)
    assert not outcome.errors, outcome.errors
    for protocol in outcome.protocols:
        _by_search, by_solver = assert_engines_agree(protocol)
        errors, warnings = expectation(path).kinds_at(2, kernel=protocol.name)
        assert kinds(by_solver) == errors | warnings


def _agreement_test(strategy, examples: int):
    """Run `examples` random protocols; stop at the first disagreement (no shrinking, so
    the message shows the protocol that disagreed, as generated)."""
    seen = []

    @settings(
        max_examples=examples,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(strategy)
    def check(protocol):
        seen.append(protocol)
        assert_engines_agree(protocol)

    check()
    return seen


def test_engines_agree_on_1000_random_protocols():
    """Straight-line protocols with read-steered skips, DMAs, loads and stores that may race,
    competing waiters, bad ids, inputs and kernel entry and exit (the strategy the
    reduction is tested with)."""
    from semcheck.ir import KernelEntry

    from semcheck.ir import DmaStart, Load, Store

    seen = _agreement_test(protocols(), 1000)
    assert len(seen) >= 1000
    assert sum(bool(p.inputs) for p in seen) >= 100  # the inputs path is exercised
    # plain accesses of a peer's buffer (GPU remote_ref), and local copies with a send side
    # (GPU TMA stores: the source read and the destination write complete apart)
    assert sum(any(isinstance(i, (Load, Store)) and i.device is not None for t in p.threads for i in t.body)
               for p in seen) >= 100
    assert sum(any(isinstance(i, DmaStart) and i.device is None and i.send_sem is not None
                   for t in p.threads for i in t.body) for p in seen) >= 50
    assert sum(any(isinstance(i, KernelEntry) for t in p.threads for i in t.body) for p in seen) >= 100
    assert sum(any(isinstance(i, (Load, Store)) and i.checked for t in p.threads for i in t.body) for p in seen) >= 100


def test_engines_agree_on_1000_random_protocols_with_control_flow():
    """Loops (counted, input-bounded, retry loops on semaphore_read), if/else with joins,
    register arithmetic, semaphore indices, devices and cores computed from inputs, buffer
    rows computed the same way (races inside loops), kernel entry and exit."""
    from semcheck.engines.z3.unroll import has_loops
    from semcheck.ir import KernelEntry, Load, Store

    seen = _agreement_test(control_flow_protocols(), 1000)
    assert len(seen) >= 1000
    assert sum(any(has_loops(t.body) for t in p.threads) for p in seen) >= 200
    assert sum(any(isinstance(i, (Load, Store)) for t in p.threads for i in t.body) for p in seen) >= 200
    # window-checked accesses at a computed row, which may leave `mem` (invalid_region)
    assert sum(any(isinstance(i, (Load, Store)) and i.checked and not all(isinstance(s, int) for s in i.region.start)
                   for t in p.threads for i in t.body) for p in seen) >= 10
    assert sum(any(isinstance(i, KernelEntry) for t in p.threads for i in t.body) for p in seen) >= 100


def test_z3_reports_the_race_of_a_shared_receive_semaphore():
    """Where races are possible the z3 engine decides them itself, and auto may use it."""
    from semcheck.api import check_protocol
    from semcheck.engines.z3 import engine as smt
    from semcheck.semantics import System

    (racy,) = load(os.path.join(MODELS_DIR, "ring_allgather_shared_recv.py"), 4)
    assert smt.unmodelled(System(racy)) is None
    by_solver = check_protocol(racy, engine="z3")
    assert by_solver.verdict.value == "violation"
    assert {v.kind for v in by_solver.violations} == {"data_race"}
    by_auto = check_protocol(racy, engine="auto")
    assert {v.kind for v in by_auto.violations} == {"data_race"}
