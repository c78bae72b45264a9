"""`--format concise`: one line per finding, `path:line:col: kind: headline`, the form
editors, `grep` and compilers' error parsers read. A finding found at several device
counts is one line; a check that errored or ran out of budget is one line too."""

from __future__ import annotations

from semcheck.ir import display_path
from semcheck.report.findings import collect, problems
from semcheck.report.text import no_verdict_reason
from semcheck.result import Result, Verdict


def render(results: list[Result], *, judgements=None) -> str:
    expected = expected_violations(results, judgements)
    lines = []
    for problem in problems(collect(results)):  # one line per root cause, at its line
        loc = problem.location
        devices = ", ".join(map(str, problem.devices))
        tail = " (expected)" if all(id(v) in expected for _, v in problem.members) else ""
        found = f" ({problem.found_at})" if problem.found_at else ""
        lines.append(f"{display_path(loc.file)}:{max(loc.line, 1)}:1: {problem.kind}: {problem.first.headline}{found} "
                     f"[{problem.first.result.kernel}, {devices} device{'s' if problem.devices != [1] else ''}]{tail}")
    for r in results:
        if r.verdict in (Verdict.ERROR, Verdict.INCONCLUSIVE):
            lines.append(f"{display_path(r.file)}:{max(r.line, 1)}:1: {r.verdict.value}: {check_problem(r)} "
                         f"[{r.kernel}, {r.devices} device{'s' if r.devices != 1 else ''}]")
    return "\n".join(lines) + ("\n" if lines else "")


def check_problem(r: Result) -> str:
    """Why a check has no verdict, in one line."""
    reason = r.no_verdict
    if reason is None:  # an error
        return (r.error or "could not be checked").strip().splitlines()[0]
    return no_verdict_reason(reason)


def expected_violations(results: list[Result], judgements) -> set[int]:
    """ids of the violations of checks that got exactly what was declared for them."""
    if judgements is None:
        return set()
    return {id(v) for r, j in zip(results, judgements) if j.matched and j.expected is not None for v in r.violations}
