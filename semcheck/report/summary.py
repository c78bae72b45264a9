"""The summary table a run over many kernels ends with: one row per check (kernel at a
device count), then one line of totals. With expectations judged, two more columns say
what was declared and whether the check matched it."""

from __future__ import annotations

from semcheck.ir import display_path
from semcheck.report import groups
from semcheck.result import Result, Verdict


def verdict_cell(r: Result) -> str:
    """`safe`, the violation kinds found, `inconclusive` or `error`; warnings in brackets."""
    if r.verdict is Verdict.VIOLATION:
        cell = ", ".join(sorted({v.kind for v in r.errors}))
    else:
        cell = r.verdict.value
    warnings = sorted({v.kind for v in r.warnings})
    if warnings:
        cell += f" (+{', '.join(warnings)})"
    return cell


def summary_table(results: list[Result], judgements=None, *, problems: bool = False) -> str:
    """With `problems`, the table is followed by one line per distinct problem (kind, line,
    semaphore) and the checks it was found in (`report/groups.py`)."""
    header = ["kernel", "devices", "verdict", "states", "time"]
    if judgements is not None:
        header += ["expected", "status"]
    header.append("file")
    rows = [header]
    previous = None
    for i, r in enumerate(results):
        same_kernel = previous is not None and (previous.kernel, previous.file) == (r.kernel, r.file)
        row = [
            "" if same_kernel else r.kernel,
            str(r.devices),
            verdict_cell(r),
            f"{r.stats.states:,}" if r.verdict is not Verdict.ERROR else "-",
            f"{r.stats.seconds:.2f} s" if r.verdict is not Verdict.ERROR else "-",
        ]
        if judgements is not None:
            j = judgements[i]
            row += [j.expected_text, "ok" if j.matched else "UNEXPECTED"]
        row.append("" if same_kernel else (f"{display_path(r.file)}:{r.line}" if r.file and r.line else display_path(r.file)))
        rows.append(row)
        previous = r
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    numeric = {header.index("devices"), header.index("states"), header.index("time")}
    out = ["summary:"]
    for n, row in enumerate(rows):
        cells = [cell.rjust(w) if c in numeric and n else cell.ljust(w) for c, (cell, w) in enumerate(zip(row, widths))]
        out.append("  " + "  ".join(cells).rstrip())
        if n == 0:
            out.append("  " + "  ".join("-" * w for w in widths))
    if problems:
        out.extend(problem_lines(results))
    out.append("  " + totals_line(results, judgements))
    return "\n".join(out)


def problem_lines(results: list[Result]) -> list[str]:
    found = [g for g in groups.group(results)
             if results[g.shown.result].violations[g.shown.violation].severity == "error"]
    if not found:
        return []
    rows = []
    for g in found:
        where = f"{display_path(g.key.location.file)}:{g.key.location.line}" if g.key.location else g.key.kernel
        cause = results[g.shown.result].violations[g.shown.violation].cause
        said = (cause.semaphore_shown_as if cause is not None else "") or g.key.semaphore
        sem = f" ({said})" if said else ""
        kind = "+".join(groups.violation_kinds(results, g)) if g.key.cause is not None else g.key.kind
        rows.append((kind, where + sem, groups.checks_text(results, g.refs)))
    widths = [max(len(row[c]) for row in rows) for c in range(2)]
    out = [f"  {len(found)} distinct problem{'s' if len(found) != 1 else ''}:"]
    out += [f"    {kind:<{widths[0]}}  {where:<{widths[1]}}  at {checks}" for kind, where, checks in rows]
    return out


# A count of checks by verdict, as a reader says it: "2 violations", "1 error"; the
# adjectives stay as they are ("2 safe", "2 inconclusive").
_PLURALS = {Verdict.VIOLATION: "violations", Verdict.ERROR: "errors"}


def verdict_counts(counts: dict[Verdict, int]) -> str:
    """`1 safe, 2 violations`: the nonzero counts, in the verdicts' order; "" for none."""
    return ", ".join(f"{counts[v]} {_PLURALS.get(v, v.value) if counts[v] != 1 else v.value}"
                     for v in Verdict if counts.get(v))


def totals_line(results: list[Result], judgements=None) -> str:
    counts = {v: sum(r.verdict is v for r in results) for v in Verdict}
    kernels = len({(r.file, r.kernel) for r in results})
    seconds = sum(r.stats.seconds for r in results)
    line = (f"{len(results)} check{'s' if len(results) != 1 else ''} of {kernels} "
            f"kernel{'s' if kernels != 1 else ''}: {verdict_counts(counts) or 'none'}; {seconds:.2f} s checking")
    if judgements is not None:
        unexpected = sum(not j.matched for j in judgements)
        line += (f"; {len(judgements) - unexpected} as expected, {unexpected} unexpected"
                 if unexpected else "; every check as expected")
    return line
