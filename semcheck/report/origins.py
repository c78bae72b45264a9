"""Where findings came from, beside the rest of the text report: a consequence folded under the
violation its path passes through first (`Violation.caused_by`), which engines found a violation, and
the disputed modelling readings it rests on with the switch for the other reading."""

from __future__ import annotations

from semcheck.ir import display_path
from semcheck.result import Result, Violation

# Engines whose findings need saying: a random walk is not a search (explicit, alone, is the default).
_SAID = {"simulate": "simulate (a seeded random walk, cut down to the steps the violation depends on)"}


def folded(v: Violation) -> list[str]:
    """A consequence, under the cause reported above it, in two lines after its own
    header: what it follows from and what it is (its trace, which passes through the
    cause's step, is in the JSON)."""
    cause = v.caused_by
    assert cause is not None
    cause_at = f" at {_where(cause)}" if cause.location else ""
    return [
        f"    consequence of the {cause.kind}{cause_at} above (its path passes through it):",
        f"      {v.message.split(chr(10))[0]}",
    ]


def _where(v: Violation) -> str:
    assert v.location is not None
    return f"{display_path(v.location.file)}:{v.location.line}"


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
