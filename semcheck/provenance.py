"""What a result says about values taken from data (see docs/data-evaluation.md).

The lowering records every value that decides the protocol and was computed from buffer
contents as a typed `ir.DataUse`. The evaluation follows one schedule's values; for a kernel
without data races every schedule computes the same ones. When a data race touches a buffer
that fed such a value, that no longer holds, and the result says so.
"""

from __future__ import annotations

from semcheck import ir
from semcheck.result import Result

DATA_RACE = "data_race"


def raced_data_buffers(protocol: ir.Protocol, result: Result) -> list[str]:
    """Buffers that fed values taken from data and are touched by a reported data race
    (found by the racing instructions' lines in the protocol, not from messages)."""
    fed = {b for use in protocol.data_uses for b in use.buffers}
    if not fed:
        return []
    raced: set[str] = set()
    for violation in result.violations:
        if violation.kind != DATA_RACE:
            continue
        lines = {(loc.file, loc.line) for loc in [violation.location, *violation.related] if loc is not None}
        for thread in protocol.threads:
            for instr in thread.body:
                if (instr.loc.file, instr.loc.line) in lines:
                    raced |= {r.buffer for r in _regions(instr)} & fed
    return sorted(raced)


def _regions(instr: ir.Instr) -> list[ir.Region]:
    if isinstance(instr, (ir.Load, ir.Store)):
        return [instr.region]
    if isinstance(instr, ir.DmaStart):
        return [instr.src, instr.dst]
    return []


def with_data_race_note(protocol: ir.Protocol, result: Result) -> Result:
    """`result` with the protocol's data uses, and a note when a race touches their buffers."""
    result.data_uses = protocol.data_uses
    raced = raced_data_buffers(protocol, result)
    if raced:
        result.notes.append(
            f"a data race touches {', '.join(raced)}, which fed values taken from data: those "
            "values may differ between schedules, so the protocol checked is the one of "
            "semcheck's canonical schedule (fix the race first)"
        )
    return result
