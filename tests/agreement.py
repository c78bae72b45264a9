"""What "the engines agree" means, shared by the model and the random-protocol tests."""

from __future__ import annotations

from semcheck.engines.explicit import search as explicit
from semcheck.engines.z3 import engine as smt
from semcheck.engines.common import Exploration
from semcheck.ir import Protocol
from semcheck.semantics.properties import SEVERITY
from semcheck.semantics import System
from tests.listing import protocol_listing


def kinds(exploration: Exploration) -> set[str]:
    return {finding.kind.value for finding, _, _ in exploration.findings.values()}


def verdict(exploration: Exploration) -> str:
    if any(SEVERITY[f.kind] == "error" for f, _, _ in exploration.findings.values()):
        return "violation"
    return "inconclusive" if exploration.exhausted else "safe"


def explore_both(protocol: Protocol) -> tuple[Exploration, Exploration]:
    """Both engines on the full semantics, each reporting every racing pair of lines: the
    explicit engine drops only later races between a pair it already reported, and stops
    watching a line only once every pair it may race in is reported."""
    return explicit.explore(System(protocol)), smt.explore(System(protocol))


def assert_engines_agree(protocol: Protocol) -> tuple[Exploration, Exploration]:
    """Same verdict, same violation kinds, same finding keys (which wait, which cycle, which
    fault site, which semaphore), both searches complete."""
    by_search, by_solver = explore_both(protocol)
    problems = []
    if by_search.exhausted or by_solver.exhausted:
        problems.append(f"incomplete: explicit {by_search.exhausted!r}, z3 {by_solver.exhausted!r}")
    if verdict(by_search) != verdict(by_solver):
        problems.append(f"verdict: explicit {verdict(by_search)}, z3 {verdict(by_solver)}")
    only_explicit = set(by_search.findings) - set(by_solver.findings)
    only_z3 = set(by_solver.findings) - set(by_search.findings)
    if only_explicit:
        problems.append(f"found only by explicit: {sorted(map(str, only_explicit))}")
    if only_z3:
        problems.append(f"found only by z3: {sorted(map(str, only_z3))}")
    assert not problems, "the engines disagree on\n" + protocol_listing(protocol) + "\n" + "\n".join(problems)
    return by_search, by_solver
