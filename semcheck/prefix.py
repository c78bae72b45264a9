"""Prefix results: what semcheck can still say about a kernel whose lowering stopped.

When a thread's lowering reaches a construct semcheck cannot follow, the thread ends in an
`ir.Cut` (lower/tpu_kernel.py) and the kernel is an error, as before. Its protocol up to the cut
is checked anyway: a thread at its cut stays there for good, which is a legal (if slow)
prefix of every real schedule, so every data race, fault and early arrival found on the way
is real (a race on a region widened because its index could not be followed is only a warning
that says so, `provenance.uncertain_races`); hangs and leftovers are judged only in states no thread's cut is part of
(`semantics`, `properties.terminal_findings`), since the thread would go on.

The verdict is `error` (exit 2), since what lies behind the cut is unchecked, unless the
prefix already has a violation: that one happens whatever the rest of the kernel does, so
the verdict is `violation` (exit 1), and the stop is a note (a gate must not read a kernel
with a real deadlock as one semcheck merely could not read).
"""

from __future__ import annotations

import dataclasses

from semcheck import ir
from semcheck.kinds import Kind
from semcheck.result import Result, Verdict


def prefix_result(checked: Result, protocol: ir.Protocol, message: str, loc: ir.Loc | None) -> Result:
    """The error Result of a kernel whose lowering stopped, carrying what the check of its
    prefix (`checked`) found."""
    stops = ir.cuts(protocol)
    where = sorted({str(cut.loc) for _thread, cut in stops})
    threads = len({(t.device, t.core, t.sub) for t, _cut in stops})
    # A finding of the lowering (not_lowerable) is about the whole kernel, not a schedule.
    before = [v for v in checked.errors if v.kind != Kind.NOT_LOWERABLE.value]
    found = (
        "the violations listed happen before it, whatever the rest of the kernel does"
        if before
        else "no data race, bad id or early arrival happens before it"
    )
    note = (
        f"lowering stopped at {', '.join(where)} on {threads} of {len(protocol.threads)} thread(s); "
        f"semcheck checked the kernel up to there: {found}; hangs and leftovers are not judged, "
        "and nothing after the stop is checked"
    )
    if checked.errors:  # found before the stop: a violation, with the stop noted
        stopped = message.split("\n")[0]
        return dataclasses.replace(
            checked, verdict=Verdict.VIOLATION,
            notes=list(checked.notes) + [f"{note}; it stopped there because {stopped}"],
        )
    return dataclasses.replace(
        checked,
        file=loc.file if loc else checked.file,
        line=loc.line if loc else checked.line,
        verdict=Verdict.ERROR,
        error=message,
        notes=list(checked.notes) + [note],
    )
