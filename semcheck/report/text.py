"""The text report: a verdict line per check, each violation in the protocol's own terms
(which device, which semaphore, which line, what it waited for and what it had), then the
shortest trace as numbered steps."""

from __future__ import annotations

import linecache
import os

from semcheck.ir import Loc, core_unit, thread_name
from semcheck.report import display_path, groups
from semcheck.report.summary import summary_table  # noqa: F401  (part of this module's API)
from semcheck.result import Result, Verdict, Violation

_VERDICT_WORDS = {
    Verdict.SAFE: "SAFE",
    Verdict.VIOLATION: "VIOLATION",
    Verdict.INCONCLUSIVE: "INCONCLUSIVE",
    Verdict.ERROR: "ERROR",
}


def render(
    results: list[Result], *, max_trace_steps: int = 0, judgements=None, all_traces: bool = False, **_options
) -> str:
    """One verdict line per check; then, per kernel, each distinct problem once, by its
    smallest counterexample, with the other checks it was also found in (`report/groups.py`).
    `all_traces` shows every check's violations in full instead.

    With `judgements` (expectations judged), a check that got its declared verdict is one
    line; an unexpected one is reported in full, with what was declared."""
    if all_traces:
        return _render_every_check(results, max_trace_steps=max_trace_steps, judgements=judgements)
    blocks = []
    for indices in _by_kernel(results):
        blocks.append(_render_kernel(results, indices, max_trace_steps, judgements))
    if len(results) > 1 or judgements is not None:
        blocks.append(summary_table(results, judgements, problems=True))
    return "\n\n".join(blocks) + "\n"


def _by_kernel(results: list[Result]) -> list[list[int]]:
    """The indices of each kernel's checks, kernels in the order they first appear."""
    kernels: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(results):
        kernels.setdefault((r.file, r.kernel), []).append(i)
    return list(kernels.values())


def _render_kernel(results: list[Result], indices: list[int], max_trace_steps: int, judgements) -> str:
    lines = []
    in_full = []
    for i in indices:
        r = results[i]
        judgement = judgements[i] if judgements is not None else None
        lines.append(verdict_line(r))
        if judgement is not None and judgement.matched and r.verdict is Verdict.VIOLATION:
            lines.append(f"  expected: {_declared(judgement)}")
            continue
        in_full.append(i)
        if judgement is not None and not judgement.matched:
            lines.append(f"  UNEXPECTED: {judgement.reason}" + (
                f" (declared at {judgement.expected.where})" if judgement.expected else ""))
    shown = [results[i] for i in in_full]
    problems = groups.group(shown)
    problems.sort(key=lambda g: shown[g.shown.result].violations[g.shown.violation].severity != "error")
    for problem in problems:
        r = shown[problem.shown.result]
        v = r.violations[problem.shown.violation]
        lines.append("")
        lines.extend(render_violation(v, kernel_file=r.file, cores=r.cores, max_trace_steps=max_trace_steps,
                                      unit=core_unit(r.semantics), seen_at=_seen_at(shown, problem)))
    notes = dict.fromkeys(note for i in in_full for note in results[i].notes)
    lines.extend(f"  note: {note}" for note in notes)
    return "\n".join(lines)


def _seen_at(results: list[Result], problem: groups.ProblemGroup) -> str:
    """ "at 2 devices; also at 4, 8 devices" (empty for a kernel checked once)."""
    if not problem.also:
        return ""
    here = groups.checks_text(results, [problem.shown])
    return f"at {here}; also at {groups.checks_text(results, problem.also)}"


def _render_every_check(results: list[Result], *, max_trace_steps: int, judgements) -> str:
    blocks = []
    for i, r in enumerate(results):
        judgement = judgements[i] if judgements is not None else None
        if judgement is not None and judgement.matched and r.verdict is Verdict.VIOLATION:
            blocks.append(verdict_line(r) + f"\n  expected: {_declared(judgement)}")
            continue
        block = render_result(r, max_trace_steps=max_trace_steps)
        if judgement is not None and not judgement.matched:
            block += f"\n  UNEXPECTED: {judgement.reason}" + (
                f" (declared at {judgement.expected.where})" if judgement.expected else "")
        blocks.append(block)
    if len(results) > 1 or judgements is not None:
        blocks.append(summary_table(results, judgements))
    return "\n\n".join(blocks) + "\n"


def _declared(judgement) -> str:
    return f"{judgement.reason} at {judgement.expected.where}"


def verdict_line(r: Result) -> str:
    where = f"{display_path(r.file)}:{r.line}" if r.file else ""
    head = f"{r.kernel} [{r.devices} device{'s' if r.devices != 1 else ''}"
    if r.cores > 1:
        head += f" x {r.cores} {core_unit(r.semantics)}s"
    head += f", {r.semantics} rules]" if r.verdict is not Verdict.ERROR else "]"
    word = _VERDICT_WORDS[r.verdict]
    if r.verdict is Verdict.SAFE:
        detail = "no deadlock, unsatisfied wait, leftover, bad id, data race or early arrival in any schedule"
    elif r.verdict is Verdict.VIOLATION:
        kinds = sorted({v.kind for v in r.errors})
        detail = f"{len(r.errors)} violation{'s' if len(r.errors) != 1 else ''}: {', '.join(kinds)}"
    elif r.verdict is Verdict.INCONCLUSIVE:
        detail = "a budget ran out before every schedule was explored"
    else:
        detail = r.error or "error"
    stats = ""
    if r.verdict is not Verdict.ERROR and r.stats.solver_queries is not None:
        stats = (
            f"  ({r.stats.encoded_events:,} events, {r.stats.solver_queries:,} solver queries, "
            f"{r.stats.seconds:.2f} s, {r.engine})"
        )
    elif r.verdict is not Verdict.ERROR:
        stats = (
            f"  ({r.stats.states:,} states, {r.stats.transitions:,} transitions, "
            f"{r.stats.seconds:.2f} s, {r.engine})"
        )
    return f"{word}: {head} {where}: {detail}{stats}"


def render_result(r: Result, *, max_trace_steps: int = 0) -> str:
    lines = [verdict_line(r)]
    for v in r.errors + r.warnings:
        lines.append("")
        lines.extend(render_violation(v, kernel_file=r.file, cores=r.cores, max_trace_steps=max_trace_steps,
                                      unit=core_unit(r.semantics)))
    for note in r.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def render_violation(
    v: Violation, *, kernel_file: str = "", cores: int = 1, max_trace_steps: int = 0, unit: str = "core",
    seen_at: str = "",
) -> list[str]:
    who = thread_name(v.device, v.core, 0, cores, unit) if v.device is not None else "protocol"
    where = _loc(v.location)
    lines = [f"  {v.severity}: {v.kind} ({who}) at {where}" + (f"  [{seen_at}]" if seen_at else "")]
    excerpt = source_excerpt(v.location)
    if excerpt:
        lines.append(f"    {v.location.line:>5} | {excerpt}")
    lines.extend("    " + part for part in v.message.split("\n"))
    if v.inputs:
        values = ", ".join(f"{name} = {value}" for name, value in v.inputs.items())
        lines.append(f"    with inputs: {values}")
    lines.extend(_other_blocked_lines(v))
    if v.trace:
        steps = v.trace
        shown = steps if not max_trace_steps or len(steps) <= max_trace_steps else steps[-max_trace_steps:]
        count = f"{len(steps)} step{'s' if len(steps) != 1 else ''}"
        if v.kind == "unsatisfied_wait" and not v.blocked:  # a loop that spins for ever
            lines.append(f"    trace into the loop it never leaves, then one turn of it ({count}):")
        else:
            label = "the stuck state" if v.kind in ("deadlock", "unsatisfied_wait") else "it"
            lines.append(f"    shortest trace to {label} ({count}):")
        if len(shown) < len(steps):
            lines.append(f"      ... {len(steps) - len(shown)} earlier steps omitted")
        width = max(len(s.actor) for s in shown)
        for s in shown:
            at = _short_loc(s.location, kernel_file)
            fed = f"  <- step{'s' if len(s.fed_by) > 1 else ''} {', '.join(map(str, s.fed_by))}" if s.fed_by else ""
            lines.append(f"      {s.index:>4}. {s.actor:<{width}}  {s.text}{fed}  [{at}]")
    elif v.kind in ("deadlock", "unsatisfied_wait"):
        lines.append("    the initial state is already stuck: every thread starts at a wait")
    return lines


def _other_blocked_lines(v: Violation) -> list[str]:
    """The source of every other line a thread is stuck at, so the reader sees each wait."""
    out, seen = [], {v.location}
    for b in v.blocked:
        loc = b.location
        if loc is None or loc in seen:
            continue
        seen.add(loc)
        excerpt = source_excerpt(loc)
        if excerpt:
            out.append(f"    {loc.line:>5} | {excerpt}")
    if out:
        out.insert(0, "    also stuck at:")
    return out


def source_excerpt(loc: Loc | None) -> str:
    if loc is None or not loc.file or loc.line <= 0:
        return ""
    return linecache.getline(loc.file, loc.line).rstrip()


def _loc(loc: Loc | None) -> str:
    return f"{display_path(loc.file)}:{loc.line}" if loc else "(no location)"


def _short_loc(loc: Loc | None, kernel_file: str) -> str:
    if loc is None:
        return ""
    if kernel_file and os.path.abspath(loc.file) == os.path.abspath(kernel_file):
        return f"line {loc.line}"
    return _loc(loc)
