"""What "the engines agree" means, shared by the model and the random-protocol tests."""

from __future__ import annotations

from semcheck.engines.explicit import search as explicit
from semcheck.engines.z3 import engine as smt
from semcheck.engines.common import Exploration
from semcheck.ir import Protocol
from semcheck.properties import SEVERITY, Kind
from semcheck.semantics import System
from tests.listing import protocol_listing


def kinds(exploration: Exploration) -> set[str]:
    return {finding.kind.value for finding, _, _ in exploration.findings.values()}


def verdict(exploration: Exploration) -> str:
    if any(SEVERITY[f.kind] == "error" for f, _, _ in exploration.findings.values()):
        return "violation"
    return "inconclusive" if exploration.exhausted else "safe"


def explore_both(protocol: Protocol) -> tuple[Exploration, Exploration]:
    """Both engines on the full semantics; z3 reports every racing pair of lines.

    The explicit engine stops watching two lines once it reported a race between them, so
    in general which pairs it reports depends on its search order; when it reported every
    pair that may race at all (`System.racing_pairs`), nothing was left to miss and that
    cheaper search is exact. Otherwise it searches again, watching every line throughout.
    (Pairs of plain accesses count too: leaving them out let a second plain race sharing a
    line with the first go unreported by explicit while z3 found it.)"""
    system = System(protocol)
    possible = {
        frozenset((system.bodies[t][pc].loc, system.bodies[ct][cpc].loc))
        for t, pc, ct, cpc in [*system.racing_pairs(), *system.plain_racing_pairs()]
    }
    explicitly = explicit.explore(system)
    reported = {key[1] for key in explicitly.findings if key[0] is Kind.DATA_RACE}
    if explicitly.exhausted or not possible <= reported:
        explicitly = explicit.explore(System(protocol), silence_reported_races=False)
    return explicitly, smt.explore(System(protocol))


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
