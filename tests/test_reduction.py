"""The reduced search must reach exactly the findings of the unreduced one."""

from hypothesis import HealthCheck, assume, given, settings

from semcheck.engines import explicit
from semcheck.engines.budget import Budget
from semcheck.semantics import System
from tests.strategies import protocols

# The unreduced search of a random protocol can be astronomically large (one generated
# example ran past 2,000,000 states); such examples cannot serve as a reference, so they
# are discarded instead of failing the test after a minute of search.
FULL_SEARCH = Budget(max_states=200_000)


def findings(protocol, reduce, budget=None):
    exploration = explicit.explore(System(protocol), reduce=reduce, budget=budget)
    assert exploration.exhausted is None
    return exploration


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(protocols())
def test_reduction_preserves_every_finding(protocol):
    full = explicit.explore(System(protocol), reduce=False, budget=FULL_SEARCH)
    assume(full.exhausted is None)
    reduced = findings(protocol, reduce=True)
    assert set(reduced.findings) == set(full.findings), protocol
    assert reduced.states <= full.states


def test_blocked_competitor_pulls_in_its_enablers():
    """Blocks A and B compete for one GPU-global token; B must first be released by C.

    If the reduction ignored what could release B, it would let A take the token first in
    every schedule and miss the terminal state where B takes it and A is stranded.
    """
    from semcheck import ir

    loc = ir.Loc("t.py", 1)
    g = ir.SemRef("g")
    protocol = ir.Protocol(
        name="competitors",
        backend=ir.Backend.GPU,
        devices=1,
        cores=3,
        semaphores=(
            ir.SemDecl("g", ir.SemKind.GPU_GLOBAL, scope=ir.Scope.DEVICE, origin=ir.SemOrigin.GLOBAL),
            ir.SemDecl("own"),
        ),
        threads=(
            ir.Thread(0, 0, (ir.Wait(loc, g),)),
            ir.Thread(0, 1, (ir.Wait(ir.Loc("t.py", 2), ir.SemRef("own")), ir.Wait(ir.Loc("t.py", 3), g))),
            ir.Thread(0, 2, (ir.Signal(loc, g), ir.Signal(loc, ir.SemRef("own", core=1)))),
        ),
    )
    full = findings(protocol, reduce=False)
    reduced = findings(protocol, reduce=True)
    stranded = {key[1] for key in full.findings}
    assert stranded == {ir.Loc("t.py", 1), ir.Loc("t.py", 3)}  # either block can be stranded
    assert set(reduced.findings) == set(full.findings)
    assert (full.states, reduced.states) == (8, 6)
