"""What a result says about values taken from data (see docs/data-evaluation.md).

The lowering records every value that decides the protocol and was computed from buffer
contents as a typed `ir.DataUse`. The evaluation follows one schedule's values; for a kernel
without data races every schedule computes the same ones. When a data race touches a buffer
that fed such a value, that no longer holds, and the result says so.

A region the lowering widened because it could not follow an index (`ir.Region.widened`)
covers more than one run touches, so a data race on it may be one no run reaches: such a
race is kept as a warning that says why, and a result whose only errors were such races is
inconclusive (`uncertain_races`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from semcheck import ir
from semcheck.result import CheckedValues, Result, Verdict, Violation

DATA_RACE = "data_race"


def raced_data_buffers(protocol: ir.Protocol, result: Result) -> list[str]:
    """Buffers that fed values taken from data and are touched by a reported data race
    (found by the racing instructions' lines in the protocol, not from messages)."""
    fed = {b for use in protocol.data_uses for b in use.buffers}
    if not fed:
        return []
    regions = _regions_by_line(protocol)
    raced: set[str] = set()
    for violation in result.violations:
        if violation.kind != DATA_RACE:
            continue
        for loc in [violation.location, *violation.related]:
            if loc is not None:
                raced |= {r.buffer for r in regions.get((loc.file, loc.line), [])} & fed
    return sorted(raced)


def _regions(instr: ir.Instr) -> list[ir.Region]:
    if isinstance(instr, (ir.Load, ir.Store)):
        return [instr.region]
    if isinstance(instr, ir.DmaStart):
        return [instr.src, instr.dst]
    return []


def checked_values(protocol: ir.Protocol) -> CheckedValues:
    """Which values `protocol` was checked for: the operands whose script values decided
    it, its inputs' ranges (as assumed), and the operands whose script values were not used."""
    fed = {f.buffer for f in protocol.fed}
    script = sorted({name for use in protocol.data_uses for name in use.script_inputs} - fed)
    return CheckedValues(tuple(script), protocol.inputs, protocol.withheld, protocol.fed)


def with_data_race_note(protocol: ir.Protocol, result: Result) -> Result:
    """`result` with the protocol's data uses and checked values, and a note when a race
    touches the buffers the data uses were read from."""
    result.data_uses = protocol.data_uses
    result.values = checked_values(protocol)
    raced = raced_data_buffers(protocol, result)
    if raced:
        result.notes.append(
            f"a data race touches {', '.join(raced)}, which fed values taken from data: those "
            "values may differ between schedules, so the protocol checked is the one of "
            "semcheck's canonical schedule (fix the race first)"
        )
    return result


def _regions_by_line(protocol: ir.Protocol) -> dict[tuple[str, int], list[ir.Region]]:
    regions = defaultdict(list)
    for thread in protocol.threads:
        for instr in thread.body:
            regions[(instr.loc.file, instr.loc.line)].extend(_regions(instr))
    return regions


def widened_reasons(regions: dict[tuple[str, int], list[ir.Region]], violation: Violation) -> list[str]:
    """Why a data race may be one no run reaches: the widened regions, on the buffer both
    sides touch, of the instructions at its lines (`regions`: by line; none: the race is
    certain)."""
    sides = [regions.get((loc.file, loc.line), []) for loc in [violation.location, *violation.related] if loc]
    if len(sides) < 2:
        return []
    shared = set.intersection(*({r.buffer for r in side} for side in sides))
    return sorted({r.widened for side in sides for r in side if r.widened and r.buffer in shared})


def uncertain_races(protocol: ir.Protocol, result: Result) -> Result:
    """`result` with each data race on a widened region kept as a warning that says why it
    may not be real; when no error is left, the verdict is inconclusive with that reason."""
    regions = _regions_by_line(protocol)
    if not any(r.widened for side in regions.values() for r in side):
        return result
    kept, reasons = [], []
    for violation in result.violations:
        why = widened_reasons(regions, violation) if violation.kind == DATA_RACE and violation.severity == "error" else []
        if why:
            violation = dataclasses.replace(
                violation, severity="warning",
                message=f"{violation.message} (may be one no run reaches: {'; '.join(why)})")
            reasons.append(f"the data race at {violation.location} may be one no run reaches: {'; '.join(why)}")
        kept.append(violation)
    if not reasons:
        return result
    result.violations = kept
    result.notes.extend(reasons)
    if result.verdict is Verdict.VIOLATION and not result.errors:
        result.verdict = Verdict.INCONCLUSIVE
        result.unjustified = (
            "every data race found is on a region semcheck widened because it could not follow "
            "its index, so none is certain (see the notes)"
        )
    return result
