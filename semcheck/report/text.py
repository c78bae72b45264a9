"""The text report: a verdict line per check, each violation in the protocol's own terms
(which device, which semaphore, which line, what it waited for and what it had), then the
shortest trace as numbered steps."""

from __future__ import annotations

import linecache
import re
import textwrap

from semcheck.ir import Loc, core_unit, display_path, thread_name
from semcheck.records import record
from semcheck.report import causes, colour, groups, origins
from semcheck.report.folding import Fold, devices_text, fold_trace
from semcheck.report.data_origin import data_lines
from semcheck.report.summary import summary_table  # noqa: F401  (part of this module's API)
from semcheck.result import NoVerdict, NoVerdictKind, Result, Verdict, Violation

_VERDICT_WORDS = {
    Verdict.SAFE: "SAFE",
    Verdict.VIOLATION: "VIOLATION",
    Verdict.INCONCLUSIVE: "INCONCLUSIVE",
    Verdict.ERROR: "ERROR",
}


def render(
    results: list[Result], *, max_trace_steps: int = 0, judgements=None, all_traces: bool = False,
    width: int = 0, verbose: bool = False, color: bool = False,
) -> str:
    """One verdict line per check; then, per kernel, each distinct problem once (one per
    root cause, `report/groups.py`), by its smallest counterexample, with the other checks
    it was also found in. `all_traces` shows every check's violations in full instead.

    A trace shows the steps the problem depends on most and folds the rest (`folding.py`);
    `verbose` shows every step it depends on, and the results' notes (otherwise counted).
    `color` paints the verdicts and the fix lines for a terminal.

    With `judgements` (expectations judged), a check that got its declared verdict is one
    line (and its notes, which qualify it); an unexpected one is reported in full, with what
    was declared."""
    style = Style(max_trace_steps=max_trace_steps, verbose=verbose)
    if all_traces:
        report = _render_every_check(results, style, judgements=judgements)
    else:
        blocks = []
        for indices in _by_kernel(results):
            blocks.append(_render_kernel(results, indices, style, judgements))
        notes = _notes_hidden(results, verbose)
        if notes:
            blocks[-1] += "\n" + notes
        if len(blocks) > 1 or judgements is not None:  # one kernel's verdict lines already say it all
            blocks.append(summary_table(results, judgements, problems=True))
        report = "\n\n".join(blocks) + "\n"
    report = _wrap_prose(report, width) if width else report
    return colour.paint_report(report) if color else report


@record(frozen=True)
class Style:
    """How much a text report shows."""

    max_trace_steps: int = 0  # at most this many steps of a trace (0: the folded default, or all with verbose)
    verbose: bool = False  # every causal step of a trace, every note


def _notes_hidden(results: list[Result], verbose: bool) -> str:
    """The last line when notes were left out: how many, and how to see them."""
    if verbose:
        return ""
    count = len({note for r in results for note in r.notes})
    if not count:
        return ""
    return f"  {count} modelling note{'s' if count != 1 else ''} {_NOTES_COUNTED}"


_NOTES_COUNTED = "(what the verdicts rest on): shown with -v, and in --format json and sarif"


_SOURCE_QUOTE = re.compile(r"^\s+\d+ \| ")  # `   41 |     copy.start()`: the kernel's line, as written
_TRACE_STEP = re.compile(r"^\s+\d+\. ")


def _wrap_prose(report: str, width: int) -> str:
    """The report's lines of prose wrapped to `width` at word boundaries, each continued
    indented under its own start (a terminal's own wrap cuts words and loses the indent):
    verdict lines, notes, and a violation's message, trace steps and fix. A quoted source
    line stays as written, and the summary table keeps its columns."""
    out = []
    in_summary = False
    for line in report.split("\n"):
        in_summary = in_summary or line == "summary:"
        if len(line) <= width or in_summary or _SOURCE_QUOTE.match(line):
            out.append(line)
            continue
        lead = " " * (len(line) - len(line.lstrip(" ")))
        step = _TRACE_STEP.match(line)
        if line.startswith(tuple(f"{w}:" for w in _VERDICT_WORDS.values())):
            indent = "    "
        elif line.startswith(("  note: ", "  note [")) or _NOTES_COUNTED in line:
            indent = "        "
        elif step:
            indent = " " * (step.end() + 2)  # under the step's actor, past its number
        else:
            indent = lead + "    "
        out.extend(textwrap.wrap(line.lstrip(" "), width, initial_indent=lead, subsequent_indent=indent,
                                 break_on_hyphens=False, break_long_words=False))
    return "\n".join(out)


def _by_kernel(results: list[Result]) -> list[list[int]]:
    """The indices of each kernel's checks, kernels in the order they first appear."""
    kernels: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(results):
        kernels.setdefault((r.file, r.kernel), []).append(i)
    return list(kernels.values())


def _render_kernel(results: list[Result], indices: list[int], style: Style, judgements) -> str:
    if judgements is None:
        lines, in_full = _verdict_lines(results, indices)
    else:
        lines, in_full = _judged_lines(results, indices, judgements)
    shown = [results[i] for i in in_full]
    problems = groups.group(shown)
    problems.sort(key=lambda g: shown[g.shown.result].violations[g.shown.violation].severity != "error")
    for problem in problems:
        r = shown[problem.shown.result]
        v = r.violations[problem.shown.violation]
        lines.append("")
        lines.extend(render_violation(v, kernel_file=r.file, cores=r.cores, style=style, unit=core_unit(r.backend),
                                      seen_at=_seen_at(shown, problem), devices=r.devices,
                                      found_as=_found_as(shown, problem), from_data=data_lines(v, r)))
    if style.verbose:
        lines.extend(_note_lines(results, indices))
    return "\n".join(lines)


def _verdict_lines(results: list[Result], indices: list[int]) -> tuple[list[str], list[int]]:
    """A kernel's verdict lines, one per run of its checks that say the same but for their
    size; every check's problems are shown."""
    lines = []
    for run in _same_but_size(results, indices):
        lines.append(merged_verdict_line([results[i] for i in run]) or verdict_line(results[run[0]]))
        lines.extend(values_lines(results[run[0]]))
    return lines, list(indices)


def _judged_lines(results: list[Result], indices: list[int], judgements) -> tuple[list[str], list[int]]:
    """A gate's verdict lines, one per check with what was declared; the checks whose
    problems are shown (a declared violation is a line)."""
    lines, in_full = [], []
    for i in indices:
        r, judgement = results[i], judgements[i]
        lines.append(verdict_line(r))
        lines.extend(values_lines(r))
        if judgement.matched and r.verdict is Verdict.VIOLATION:
            lines.append(f"  expected: {_declared(judgement)}")
            continue
        in_full.append(i)
        if not judgement.matched:
            lines.append(f"  UNEXPECTED: {judgement.reason}" + (
                f" (declared at {judgement.expected.where})" if judgement.expected else ""))
    return lines, in_full


def _found_as(results: list[Result], problem: groups.ProblemGroup) -> str:
    """For a problem with a root cause, the violations it was found as: "semaphore_leftover
    at line 54; data_race at lines 57, 62 (5 violations)"."""
    members = groups.members(results, problem)
    if problem.key.cause is None or len(members) < 2:
        return ""
    return f"{causes.found_as(v for _, v in members)} ({len(members)} violations)"


def _note_lines(results: list[Result], indices: list[int]) -> list[str]:
    """Each note of the kernel's checks once. A note describes one check (its threads, the
    values its data gave), so when the kernel was checked more than once each note says
    which checks it belongs to: "note [at 2, 4 devices]: ..." when several share it."""
    owners: dict[str, list[Result]] = {}
    for i in indices:
        for note in dict.fromkeys(results[i].notes):
            owners.setdefault(note, []).append(results[i])
    if len(indices) == 1:
        return [f"  note: {note}" for note in owners]
    return [f"  note [at {groups.sizes_text(checks)}]: {note}" for note, checks in owners.items()]


def _seen_at(results: list[Result], problem: groups.ProblemGroup) -> str:
    """ "at 2 devices; also at 4, 8 devices" (empty for a problem found in one check only).
    A problem found more than once in one check (a deadlock of each pair of devices) has
    refs into the shown check too: that check is where it is, not where else it is."""
    elsewhere = [ref for ref in problem.also if ref.result != problem.shown.result]
    if not elsewhere:
        return ""
    here = groups.checks_text(results, [problem.shown])
    return f"at {here}; also at {groups.checks_text(results, elsewhere)}"


def _render_every_check(results: list[Result], style: Style, *, judgements) -> str:
    blocks = []
    for i, r in enumerate(results):
        judgement = judgements[i] if judgements is not None else None
        if judgement is not None and judgement.matched and r.verdict is Verdict.VIOLATION:
            blocks.append("\n".join([verdict_line(r), *values_lines(r), f"  expected: {_declared(judgement)}",
                                     *(f"  note: {note}" for note in r.notes if style.verbose)]))
            continue
        block = render_result(r, style=style)
        if judgement is not None and not judgement.matched:
            block += f"\n  UNEXPECTED: {judgement.reason}" + (
                f" (declared at {judgement.expected.where})" if judgement.expected else "")
        blocks.append(block)
    notes = _notes_hidden(results, style.verbose)
    if notes and blocks:
        blocks[-1] += "\n" + notes
    if len(results) > 1 or judgements is not None:
        blocks.append(summary_table(results, judgements))
    return "\n\n".join(blocks) + "\n"


def _declared(judgement) -> str:
    return f"{judgement.reason} at {judgement.expected.where}"


def no_verdict_reason(reason: NoVerdict) -> str:
    """The words for why an inconclusive check has no verdict (`Result.no_verdict`): what
    it could not justify, or why its search stopped (a budget, or a construct the engine
    does not model yet)."""
    return _NO_VERDICT_WORDS[reason.kind].format(detail=reason.detail)


_NO_VERDICT_WORDS = {
    NoVerdictKind.UNJUSTIFIED: "{detail}",
    NoVerdictKind.NOT_LOADED: "no verdict: {detail}",
    NoVerdictKind.SEARCH_STOPPED: "the search stopped early: {detail}",
    NoVerdictKind.INCOMPLETE: "a budget ran out before every schedule was explored",
}


def verdict_line(r: Result, *, count: str | None = None, stats: str | None = None) -> str:
    """The check's verdict line; `count` and `stats` in place of its device count ("4
    devices") and its search's figures, for a line that speaks for several checks."""
    # line 0: no line is known (a script that died before its kernel was found), and `file:0`
    # is no place an editor can open
    where = f"{display_path(r.file)}:{r.line}" if r.file and r.line else display_path(r.file)
    head = f"{r.kernel} [{_device_count(r) if count is None else count}"
    if r.cores > 1:
        head += f" x {r.cores} {core_unit(r.backend)}s"
    head += f", {r.backend} rules]" if r.verdict is not Verdict.ERROR and r.built else "]"
    word = _VERDICT_WORDS[r.verdict]
    if r.verdict is Verdict.SAFE and r.known_findings:
        detail = (f"no new findings: {r.known_findings} known from the baseline "
                  f"{'is' if r.known_findings == 1 else 'are'} not reported")
    elif r.verdict is Verdict.SAFE:
        detail = "no deadlock, unsatisfied wait, leftover, bad id, data race or early arrival in any schedule"
    elif r.verdict is Verdict.VIOLATION:
        kinds = sorted({v.kind for v in r.errors})
        problems = len({groups.problem_key(r, v) for v in r.errors})
        of = f" of {problems} problem{'s' if problems != 1 else ''}" if problems < len(r.errors) else ""
        detail = f"{len(r.errors)} violation{'s' if len(r.errors) != 1 else ''}{of}: {', '.join(kinds)}"
        if r.exhausted:  # found before a budget ran out: what was not explored may hold more
            detail += f" (the search stopped early: {r.exhausted}; there may be more)"
    elif (reason := r.no_verdict) is not None:
        detail = no_verdict_reason(reason)
    else:
        detail = r.error or "error"
    stats = _stats(r) if stats is None else stats
    return f"{word}: {head} {where}: {detail}{origins.first_only_text(r)}{stats}"


def _device_count(r: Result) -> str:
    return f"{r.devices} device{'s' if r.devices != 1 else ''}"


def _n(count: int, one: str, many: str) -> str:
    """ "1 state", "17 states"."""
    return f"{count:,} {one if count == 1 else many}"


def _stats(r: Result) -> str:
    """What the search of a check took, as its verdict line ends."""
    stats = ""
    states = _n(r.stats.states, "state", "states")
    queries = _n(r.stats.solver_queries or 0, "solver query", "solver queries")
    if r.verdict is not Verdict.ERROR and r.runs:  # auto ran engines side by side: the work of both
        stats = (
            f"  ({states}, {queries}, {r.stats.seconds:.2f} s, {r.engine} decided)"
            if any(run.decided for run in r.runs) else
            f"  ({states}, {queries}, {r.stats.seconds:.2f} s, {' and '.join(run.engine for run in r.runs)})"
        )
    elif r.verdict is not Verdict.ERROR and r.stats.solver_queries is not None:
        # z3 may decline a protocol before encoding it (then it has no event count).
        events = "" if r.stats.encoded_events is None else _n(r.stats.encoded_events, "event", "events") + ", "
        stats = f"  ({events}{queries}, {r.stats.seconds:.2f} s, {r.engine})"
    elif r.verdict is not Verdict.ERROR and not r.built:
        stats = f"  ({r.stats.seconds:.2f} s)"
    elif r.verdict is not Verdict.ERROR:
        stats = (
            f"  ({states}, {_n(r.stats.transitions, 'transition', 'transitions')}, "
            f"{r.stats.seconds:.2f} s, {r.engine})"
        )
    return stats


def _same_but_size(results: list[Result], indices: list[int]) -> list[list[int]]:
    """A kernel's checks in runs of neighbours that say the same but for the device count
    and the search's size (`_shape`); a check that can not share its line is a run alone."""
    runs: list[list[int]] = []
    last = None
    for i in indices:
        shape = _shape(results[i])
        if runs and shape is not None and shape == last \
                and results[i].devices not in {results[k].devices for k in runs[-1]}:
            runs[-1].append(i)
        else:
            runs.append([i])
        last = shape
    return runs


def _shape(r: Result) -> tuple | None:
    """What a verdict line says of a check but its device count and its search's figures;
    None for a check whose line is its own (no verdict, an error, engines side by side, z3)."""
    if r.verdict not in (Verdict.SAFE, Verdict.VIOLATION) or r.runs or r.stats.solver_queries is not None \
            or not r.built:
        return None
    return verdict_line(r, count="", stats=""), r.engine, r.cores, tuple(values_lines(r))


def merged_verdict_line(checks: list[Result]) -> str | None:
    """One verdict line for a kernel's checks at several device counts that say the same but
    for the device count and the search's size (the common case: one bug found at 2, 4 and 8
    devices, or safe at each), so a report keeps to a screen; None for a single check."""
    if len(checks) < 2:
        return None
    states = " / ".join(f"{r.stats.states:,}" for r in checks)
    seconds = sum(r.stats.seconds for r in checks)
    return verdict_line(checks[0], count=f"{', '.join(str(r.devices) for r in checks)} devices",
                        stats=f"  ({states} states, {seconds:.2f} s, {checks[0].engine})")


# Operands or ranges named in the values line; the rest are counted (the JSON lists them all).
VALUES_SHOWN = 3
_INT_RANGES = {(-(1 << 31), (1 << 31) - 1): "int32", (0, (1 << 32) - 1): "uint32",
               (-(1 << 63), (1 << 63) - 1): "int64", (-(1 << 15), (1 << 15) - 1): "int16",
               (-(1 << 7), (1 << 7) - 1): "int8", (0, 255): "uint8"}


def values_lines(r: Result) -> list[str]:
    """One short line saying what the verdict holds for (result.CheckedValues): the
    operands whose script values decided the protocol, the inputs checked over a range,
    one per family (`init_flag_ref[0]` for its per-device inputs `init_flag_ref[0]@d0`, ...),
    and the operands whose script values were not used (frontends/provenance.py)."""
    values = r.values
    if not values:
        return []
    parts = []
    if values.script:
        parts.append(f"as the script passed {_few(list(values.script))}")
    if values.ranges:
        families = dict.fromkeys(
            (re.sub(r"@d\d+", "", i.name), i.lo, i.hi, i.assumed) for i in values.ranges)
        parts.append("over ranges " + _few([
            f"{name} {_range_text(lo, hi)}{' (assumed)' if assumed else ''}" for name, lo, hi, assumed in families]))
    if values.fed:
        by: dict[str, list[str]] = {}
        for f in values.fed:
            by.setdefault(f.producer, []).append(f.buffer)
        parts.extend(f"as semcheck's lowering of {producer} computed {_few(buffers)}" for producer, buffers in by.items())
    if values.withheld:
        parts.append(f"not as passed {_few(list(values.withheld))} (an earlier kernel's output may reach them)")
    return ["  values: " + "; ".join(parts)]


def _range_text(lo: int, hi: int) -> str:
    kind = _INT_RANGES.get((lo, hi))
    return f"any {kind}" if kind else f"{lo}..{hi}"


def _few(names: list[str]) -> str:
    if len(names) <= VALUES_SHOWN + 1:  # "and 1 more" would be no shorter
        return ", ".join(names)
    return ", ".join(names[:VALUES_SHOWN]) + f" and {len(names) - VALUES_SHOWN} more"


def render_result(r: Result, *, max_trace_steps: int = 0, style: Style | None = None) -> str:
    style = style or Style(max_trace_steps=max_trace_steps)
    lines = [verdict_line(r), *values_lines(r)]
    for v in r.errors + r.warnings:
        lines.append("")
        lines.extend(render_violation(v, kernel_file=r.file, cores=r.cores, style=style, unit=core_unit(r.backend),
                                      devices=r.devices, from_data=data_lines(v, r)))
    if style.verbose:
        lines.extend(f"  note: {note}" for note in r.notes)
    return "\n".join(lines)


def render_violation(
    v: Violation, *, kernel_file: str = "", cores: int = 1, max_trace_steps: int = 0, unit: str = "core",
    seen_at: str = "", style: Style | None = None, devices: int = 0, found_as: str = "",
    from_data: list[str] | None = None,
) -> list[str]:
    """A violation: what and where, its source line, why (its root cause where one is named,
    else its message and what could have changed its semaphore), where the values its line
    took from outside the kernel came from (`from_data`, report/data_origin.py), its trace,
    and the fix."""
    style = style or Style(max_trace_steps=max_trace_steps, verbose=True)
    seen = f"  [{seen_at}]" if seen_at else ""
    if v.caused_by is not None:  # reported under the violation its path passes through, just above
        who = thread_name(v.device, v.core, 0, cores, unit) if v.device is not None else "protocol"
        return [f"  {v.severity}: {v.kind} ({who}) at {_loc(v.location)}{seen}"] + origins.folded(v)
    cause = v.cause
    if cause is not None:
        lines = [f"  {v.severity}: {causes.statement(cause)}{seen}"]
        lines.extend(_excerpt_lines(cause.site))
        who = f" on {thread_name(v.device, v.core, 0, cores, unit)}" if v.device is not None else ""
        lines.append(f"    found as: {found_as}" if found_as else
                     f"    found as: {v.kind} at {_short_loc(v.location, kernel_file)}{who}")
    else:
        who = thread_name(v.device, v.core, 0, cores, unit) if v.device is not None else "protocol"
        lines = [f"  {v.severity}: {v.kind} ({who}) at {_loc(v.location)}{seen}"]
        lines.extend(_excerpt_lines(v.location))
        lines.extend("    " + part for part in v.message.split("\n"))
    lines.extend(from_data or ())
    lines.extend(origins.provenance_lines(v))
    if v.inputs:
        values = ", ".join(f"{name} = {value}" for name, value in v.inputs.items())
        lines.append(f"    with inputs: {values}")
    lines.extend(_other_blocked_lines(v))
    if cause is None or style.verbose:
        for m in v.missing:
            lines.extend(missing_lines(m, kernel_file, devices))
    lines.extend(_trace_lines(v, kernel_file, style, devices, shown_with=cause is not None))
    fix = causes.fix(cause) if cause is not None else v.hint
    if fix:
        lines.append(f"    fix: {fix}")
    return lines


def _excerpt_lines(loc: Loc | None) -> list[str]:
    """The source line, and for a line in a helper the calls through the user's files that led there."""
    excerpt = source_excerpt(loc)
    if not excerpt or loc is None:
        return []
    return [f"    {loc.line:>5} | {excerpt}", *call_lines(loc)]


def _trace_lines(v: Violation, kernel_file: str, style: Style, devices: int, shown_with: bool) -> list[str]:
    """The trace: with `style.verbose` (or a step limit) every step the violation depends
    on (the `max_trace_steps` closest); by default the ones it depends on most, the runs
    between them folded into a line each."""
    if not v.trace:
        if v.kind in ("deadlock", "unsatisfied_wait"):
            return ["    the initial state is already stuck: every thread starts at a wait"]
        return []
    steps = v.trace
    count = f"{len(steps)} step{'s' if len(steps) != 1 else ''}"
    if v.kind == "unsatisfied_wait" and not v.blocked:  # a loop that spins for ever
        head = "trace into the loop it never leaves, then one turn of it"
    elif shown_with:  # a root cause's problem: say which of its violations the trace reaches
        head = f"trace to the {v.kind} at {_short_loc(v.location, kernel_file)}"
        if v.device is not None:
            head += f" on device {v.device}"
    else:
        head = "trace to " + ("the stuck state" if v.kind in ("deadlock", "unsatisfied_wait") else "it")
    if style.verbose or style.max_trace_steps:
        shown: list = relevant_steps(v, style.max_trace_steps)
        left_out = len(steps) - len(shown)
        lines = [f"    {head}: the {len(shown)} of its {count} that it depends on ({left_out} elided):"
                 if left_out else f"    {head} ({count}):"]
    else:
        shown, unrelated = fold_trace(v, devices)
        folded = sum(item.count for item in shown if isinstance(item, Fold))
        lines = [f"    {head} ({count}: {len(shown) - sum(isinstance(i, Fold) for i in shown)} shown, {folded} folded"
                 + (f", {unrelated} not involved" if unrelated else "") + "; -v shows every step):"]
    width = max((len(s.actor) for s in shown if not isinstance(s, Fold)), default=0)
    for s in shown:
        if isinstance(s, Fold):
            span = f"{s.first}-{s.last}" if s.count > 1 else f"{s.first}."
            lines.append(f"      {span:>9} ... {s.summary}")
            continue
        at = _short_loc(s.location, kernel_file)
        if s.kernel:
            at = f"{s.kernel} {at}"
        elif s.invocation is not None:  # one kernel run several times (--invocations)
            at = f"call {s.invocation}, {at}"
        fed = f"  <- step{'s' if len(s.fed_by) > 1 else ''} {', '.join(map(str, s.fed_by))}" if s.fed_by else ""
        lines.append(f"      {s.index:>4}. {s.actor:<{width}}  {s.text}{fed}  [{at}]")
    return lines


def missing_lines(m, kernel_file: str = "", devices: int = 0) -> list[str]:
    """What could have changed the semaphore of a stuck wait or a leftover, and what did."""
    takes = m.needs is None
    state = f"holds {m.has}" if takes else f"needs {m.needs}, has {m.has}"
    if m.in_flight:
        state += f", and copies still landing add {m.in_flight}"
    verb = "take from" if takes else "add to"
    semaphore = m.semaphore_shown_as or m.semaphore
    out = [f"    what could {verb} {semaphore} ({state}):"]
    wanted = [s for s in m.sites if s.adds != takes]
    if not wanted:
        out.append(f"      nothing in the kernel can {verb} it")
    ran: dict[tuple, list] = {}  # sites that ran, one line per source line and instruction
    for site in m.sites:
        where = _short_loc(site.location, kernel_file)
        if site.ran:
            ran.setdefault((where, site.what, site.adds), []).append(site)
        else:
            out.append(f"      {site.what} at {where} on {site.thread} never runs: {site.not_run}")
    for (where, what, adds), sites in ran.items():
        steps = ", ".join(str(site.step) for site in sites)
        role = "added to it" if adds else "took from it"
        out.append(f"      {what} at {where} on {_threads_text(sites, devices)} ran and "
                   f"{role} (step{'s' if len(sites) > 1 else ''} {steps})")
    for a in m.absent:
        reaches = ", ".join(a.reaches[:3]) + (f" and {len(a.reaches) - 3} more" if len(a.reaches) > 3 else "")
        missing = (devices_text(a.missing_devices, devices) if a.missing_devices
                   else _names(a.missing_on))
        out.append(f"      {_short_loc(a.location, kernel_file)}'s {a.what} adds to {reaches}, but "
                   f"{missing} {'has' if len(a.missing_on) == 1 else 'have'} no such "
                   f"{a.what}: none reaches {semaphore}")
    return out


def _threads_text(sites, devices: int) -> str:
    """The threads of `sites`, each once: "device 1", "devices 0-3", "every device"; named
    one by one where a device has several threads."""
    if all(site.device is not None and site.core is None for site in sites):
        return devices_text([site.device for site in sites], devices)
    return _names(tuple(dict.fromkeys(site.thread for site in sites)))


def _names(threads: tuple[str, ...]) -> str:
    return ", ".join(threads[:4]) + (f" and {len(threads) - 4} more" if len(threads) > 4 else "")


def relevant_steps(v: Violation, limit: int = 0) -> list:
    """The steps of `v`'s trace in its happens-before past, in trace order; with `limit`,
    only the `limit` closest to the violation (ties: the later step)."""
    relevant = [s for s in v.trace if s.relevance is not None]
    if limit and len(relevant) > limit:
        closest = sorted(relevant, key=lambda s: (s.relevance, -s.index))[:limit]
        relevant = sorted(closest, key=lambda s: s.index)
    return relevant


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


def call_lines(loc: Loc) -> list[str]:
    """For a line in a helper the kernel calls: each call that led there, with its source."""
    out = []
    for frame in loc.chain:
        where = f" in {frame.function}" if frame.function else ""
        call = linecache.getline(frame.file, frame.line).strip()
        at = f"line {frame.line}" if frame.file == loc.file else f"{display_path(frame.file)}:{frame.line}"
        out.append(f"          called at {at}{where}" + (f": {call}" if call else ""))
    return out


def _loc(loc: Loc | None) -> str:
    return str(loc) if loc else "(no location)"


def _short_loc(loc: Loc | None, kernel_file: str) -> str:
    return loc.said_in(kernel_file) if loc is not None else ""
