"""The summary table a run over many kernels ends with: one row per check (kernel at a
device count), then one line of totals. With expectations judged, two more columns say
what was declared and whether the check matched it."""

from __future__ import annotations

from semcheck.ir import display_path
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


def summary_table(results: list[Result], judgements=None) -> str:
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
        row.append("" if same_kernel else (f"{display_path(r.file)}:{r.line}" if r.file else ""))
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
    out.append("  " + totals_line(results, judgements))
    return "\n".join(out)


def totals_line(results: list[Result], judgements=None) -> str:
    counts = {v: sum(r.verdict is v for r in results) for v in Verdict}
    kernels = len({(r.file, r.kernel) for r in results})
    seconds = sum(r.stats.seconds for r in results)
    parts = [f"{counts[v]} {v.value}" for v in Verdict if counts[v]]
    line = (f"{len(results)} check{'s' if len(results) != 1 else ''} of {kernels} "
            f"kernel{'s' if kernels != 1 else ''}: {', '.join(parts) or 'none'}; {seconds:.2f} s checking")
    if judgements is not None:
        unexpected = sum(not j.matched for j in judgements)
        line += (f"; {len(judgements) - unexpected} as expected, {unexpected} unexpected"
                 if unexpected else "; every check as expected")
    return line
