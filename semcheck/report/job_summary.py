"""`--summary FILE.md`: the run as Markdown, for a GitHub job summary
(`$GITHUB_STEP_SUMMARY`, which semcheck appends to by itself when the variable is set).

A verdict line, a table with one row per kernel (its verdict at each device count), then
every finding (workflow annotations stop at 10 per step; this has them all).
"""

from __future__ import annotations

from semcheck.ir import display_path
from semcheck.report.concise import check_problem, expected_violations
from semcheck.report.findings import collect
from semcheck.report.groups import devices_text, found_in_text, size_key, sizes_text
from semcheck.report.summary import verdict_cell, verdict_counts
from semcheck.result import Result, Verdict, worst

_ICONS = {Verdict.SAFE: "✅", Verdict.VIOLATION: "❌", Verdict.ERROR: "⚠️", Verdict.INCONCLUSIVE: "❔"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# The headline under --expectations: what the gate made of the run, not the kernels' verdicts
# (a folder of known-buggy examples, every one as declared, passes).
_JUDGED = {Verdict.SAFE: "as expected", Verdict.VIOLATION: "not as expected"}


def render(results: list[Result], *, judgements=None, hidden: int = 0, title: str = "semcheck",
           judged: Verdict | None = None) -> str:
    """`judged`: the gate's verdict of the run (`cli/gate.py`), for the headline, when
    expectations were judged; else the headline is the worst verdict of the checks."""
    counts = {v: sum(r.verdict is v for r in results) for v in Verdict}
    kernels: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(results):
        kernels.setdefault((r.file, r.kernel), []).append(i)
    overall = judged or worst(r.verdict for r in results)
    word = _JUDGED.get(overall, overall.value) if judged is not None else overall.value
    parts = verdict_counts(counts) or "nothing checked"
    out = [f"## {title}: {_ICONS[overall]} {word}", "",
           f"{len(results)} check{'s' if len(results) != 1 else ''} of {len(kernels)} "
           f"kernel{'s' if len(kernels) != 1 else ''}: {parts}."]
    if judgements is not None:
        unexpected = sum(not j.matched for j in judgements)
        out[-1] += f" {unexpected} unexpected." if unexpected else " Every check as expected."
    if hidden:
        out[-1] += f" {hidden} known finding{'s' if hidden != 1 else ''} hidden by the baseline."
    # a column per check size, named as the findings below name their checks' sizes
    sizes = sorted({size_key(r) for r in results}, key=lambda k: (k[1], k[2], k[0]))
    out += ["", "| kernel | file | " + " | ".join(devices_text([n], cores, unit) for n, cores, unit in sizes) + " |",
            "|---|---|" + "---|" * len(sizes)]
    for (file, kernel), indices in kernels.items():
        cells: dict[tuple[int, int, str], str] = {}
        for i in indices:
            r = results[i]
            cell = f"{_ICONS[r.verdict]} {verdict_cell(r)}"
            if judgements is not None:
                cell += " (as expected)" if judgements[i].matched else " (**unexpected**)"
            size = size_key(r)
            cells[size] = cells[size] + "; " + cell if size in cells else cell
        first = results[indices[0]]
        where = f"`{display_path(file)}:{first.line}`" if file else ""
        out.append(f"| {_cell(kernel)} | {where} | " + " | ".join(_cell(cells.get(size, "")) for size in sizes) + " |")
    expected = expected_violations(results, judgements)
    findings = collect(results)
    if findings:
        out += ["", "### Findings", ""]
        for f in findings:
            loc = f.location
            tag = " (expected)" if all(id(v) in expected for _, v in f.members) else ""
            out.append(f"- **{f.kind}**{tag} `{display_path(loc.file)}:{loc.line}` ({f.result.kernel}, "
                       f"{found_in_text(f.members)}): {_cell(f.headline)}")
    problems = [r for r in results if r.verdict in (Verdict.ERROR, Verdict.INCONCLUSIVE)]
    if problems:
        out += ["", "### Not decided", ""]
        out += [f"- **{r.verdict.value}** `{display_path(r.file)}:{r.line}` ({r.kernel}, {sizes_text([r])}): "
                f"{_cell(check_problem(r))}" for r in problems]
    return "\n".join(out) + "\n"
