"""The reference searches of the random reduction tests, each made once per distinct protocol.

Hypothesis draws equal protocols more than once (different choices can build equal values):
in CI's derandomized draws of tests/test_ordering.py, one control-flow protocol of 175,500
unreduced states was drawn twice (two 17 s searches a draw), and over the ordering tests 186
of 1,053 reference searches were repeats, 79 of 704 in tests/test_reduction.py, 27 of 300 in
the mbarrier test of tests/test_gpu_reduction.py. A search is deterministic, so a second draw
of a protocol checks nothing the first did not: its reference is answered from memory, and
every check against it still runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from hypothesis import assume

from semcheck.engines.budget import Budget
from semcheck.engines.explicit import search as explicit
from semcheck.engines.options import ExplicitOptions
from semcheck.ir import Protocol
from semcheck.semantics import System

# Now and then a random protocol (nine threads full of DMAs) has millions of unreduced
# states. The reference search is bounded, and such an example is set aside rather than
# failed: a failing example would make hypothesis shrink through million-state searches.
REFERENCE_BUDGET = Budget(max_states=200_000)


@dataclass(frozen=True)
class Reference:
    """What the tests compare against: every finding of the search, watching every line (a
    silencing search's racing pairs depend on its order), and the states it stored."""

    findings: frozenset
    states: int
    finished: bool  # within its budget: otherwise the draw is set aside


@functools.lru_cache(maxsize=1024)
def reference(protocol: Protocol, *, reduce: bool = False, exclude_ordered_pairs: bool = True,
              budget: Budget = REFERENCE_BUDGET) -> Reference:
    exploration = explicit.explore(System(protocol, exclude_ordered_pairs=exclude_ordered_pairs),
                                   ExplicitOptions(reduce=reduce, silence_reported_races=False), budget=budget)
    return Reference(frozenset(exploration.findings), exploration.states, exploration.exhausted is None)


def reference_findings(protocol: Protocol, **options) -> Reference:
    """`reference(protocol, **options)`; a draw whose search did not finish is set aside."""
    found = reference(protocol, **options)
    assume(found.finished)
    return found
