"""The text of root causes and where findings came from, beside the rest of the text report:
a consequence folded under its cause, which engines found a violation, and the disputed
modelling readings it rests on with the switch for the other reading."""

from __future__ import annotations

from semcheck.ir import display_path
from semcheck.result import Result, Violation

# Engines whose findings need saying: a random walk is not a search (explicit, alone, is the default).
_SAID = {"simulate": "simulate (a seeded random walk, cut down to the steps the violation depends on)"}


def folded(v: Violation) -> list[str]:
    """A consequence, under the cause reported just above it: where it is and what it is,
    in two lines (its own trace passes through the cause's step; JSON and SARIF have it)."""
    cause = v.caused_by
    assert cause is not None
    where = f"{display_path(v.location.file)}:{v.location.line}" if v.location else "(no location)"
    cause_at = f" at line {cause.location.line}" if cause.location else ""
    first = v.message.split("\n")[0]
    return [
        f"    consequence: {v.kind} at {where}, after the {cause.kind}{cause_at} above:",
        f"      {first}",
    ]


def provenance_lines(v: Violation) -> list[str]:
    """Which engines found `v` (when it was not the explicit search alone) and the readings
    it rests on."""
    lines = []
    if v.found_by and v.found_by != ("explicit",):
        lines.append("    found by: " + ", ".join(_SAID.get(e, e) for e in v.found_by))
    for reading in v.rests_on:
        other = (f"; {reading.switch} checks the other reading, and what else the kernel has under it"
                 if reading.switch else "; no switch takes another reading yet")
        lines.append(f"    rests on: {reading.rule}{other}")
    return lines


def first_only_text(r: Result) -> str:
    """What the verdict line adds for a check that stopped at its first counterexample."""
    return " (the first counterexample found; --exhaustive reports every finding)" if r.first_only else ""
