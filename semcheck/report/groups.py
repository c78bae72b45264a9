"""One problem, one report: the violations of a kernel's checks (at several device counts,
core splits or invocation counts) grouped by what makes them the same bug.

Two violations are one problem when they have the same root cause (`Violation.cause`: a
copy never waited for is one problem, whatever leftovers and races it leads to), or, where
no root cause is named, the same kind, source line, semaphore declaration and related lines
(the other access of a race, the waits of a deadlock's cycle). Device ids, semaphore
instances and traces differ between device counts; the problem does not. Each group is
shown once, by its smallest counterexample (fewest devices, then fewest trace steps), with
the other checks and violations it was also found in.
"""

from __future__ import annotations


from semcheck.ir import Loc, core_unit
from semcheck.records import record
from semcheck.result import Result, Violation


@record(frozen=True)
class ProblemKey:
    """What stays the same when one bug is found at several device counts."""

    file: str
    kernel: str
    kind: str
    location: Loc | None
    semaphore: str | None  # the declaration's name
    related: frozenset[Loc]  # the other line of a race; the lines of a deadlock's cycle
    cause: tuple | None = None  # the root cause's key (then `kind` is the cause's kind)


@record(frozen=True)
class CheckRef:
    """One violation of one check: `results[result].violations[violation]`."""

    result: int
    violation: int


@record(frozen=True)
class ProblemGroup:
    key: ProblemKey
    shown: CheckRef  # the smallest counterexample, rendered in full
    also: tuple[CheckRef, ...]  # the same problem in the other checks, smallest first

    @property
    def refs(self) -> tuple[CheckRef, ...]:
        return (self.shown, *self.also)


def problem_key(result: Result, violation: Violation) -> ProblemKey:
    cause = violation.cause
    if cause is not None:
        return ProblemKey(file=result.file, kernel=result.kernel, kind=cause.kind.value, location=cause.site,
                          semaphore=cause.semaphore, related=frozenset(), cause=cause.key)
    related: set[Loc | None] = set(violation.related)
    related |= {violation.blocked[i].location for i in violation.cycle}
    return ProblemKey(
        file=result.file,
        kernel=result.kernel,
        kind=violation.kind,
        location=violation.location,
        semaphore=violation.semaphore_name,
        related=frozenset(loc for loc in related if loc is not None),
    )


def _size(results: list[Result], ref: CheckRef) -> tuple:
    r = results[ref.result]
    return (r.devices * max(r.cores, 1), r.invocations, len(r.violations[ref.violation].trace), ref.result)


def group(results: list[Result]) -> list[ProblemGroup]:
    """Every violation (errors and warnings) of `results`, grouped; groups in the order
    their first check appears."""
    found: dict[ProblemKey, list[CheckRef]] = {}
    for i, r in enumerate(results):
        for j, v in enumerate(r.violations):
            found.setdefault(problem_key(r, v), []).append(CheckRef(i, j))
    groups = []
    for key, refs in found.items():
        refs = sorted(refs, key=lambda ref: _size(results, ref))
        groups.append(ProblemGroup(key, refs[0], tuple(refs[1:])))
    return groups


def checks_text(results: list[Result], refs) -> str:
    """ "2, 4, 8 devices" for the checks `refs` point at ("4, 8 devices (2 invocations)")."""
    return sizes_text([results[ref.result] for ref in refs])


def sizes_text(checks: list[Result]) -> str:
    """ "2, 4, 8 devices" for `checks` ("4, 8 devices (2 invocations)", "2, 4 devices x 2 cores"):
    consecutive sizes that share a core count and an invocation count share one unit."""
    invocations = sorted({r.invocations for r in checks})
    sizes = list(dict.fromkeys((*size_key(r), r.invocations if len(invocations) > 1 else 0) for r in checks))
    runs: list[tuple[list[int], tuple]] = []
    for devices, *rest in sizes:
        if runs and runs[-1][1] == tuple(rest):
            runs[-1][0].append(devices)
        else:
            runs.append(([devices], tuple(rest)))
    parts = []
    for counts, (cores, unit, invocation) in runs:
        part = devices_text(counts, cores, unit)
        if invocation:
            part += f" ({invocation} invocation{'s' if invocation > 1 else ''})"
        parts.append(part)
    text = ", ".join(parts)
    if len(invocations) == 1 and invocations[0] > 1:
        text += f" ({invocations[0]} invocations)"
    return text


def devices_text(counts: list[int], cores: int, unit: str) -> str:
    """ "2, 4 devices", "1 device x 4 blocks": device counts that share a core count (0: one
    core, not said) of `unit` (`ir.core_unit`)."""
    text = f"{', '.join(map(str, counts))} {'device' if counts == [1] else 'devices'}"
    return text + f" x {cores} {unit}s" if cores else text


def size_key(r: Result) -> tuple[int, int, str]:
    """A check's size as `devices_text` says it: devices, cores (0 for one), their unit."""
    return r.devices, r.cores if r.cores > 1 else 0, core_unit(r.backend)


def found_in_text(found_in: list[tuple[Result, Violation]]) -> str:
    """`sizes_text` of the checks a finding's violations were found in, smallest first, each
    check once."""
    checks = {id(r): r for r, _ in sorted(found_in, key=lambda m: (m[0].devices, m[0].cores, m[0].invocations))}
    return sizes_text(list(checks.values()))


def members(results: list[Result], group: ProblemGroup) -> list[tuple[Result, Violation]]:
    """Every violation of `group`, with its check."""
    return [(results[ref.result], results[ref.result].violations[ref.violation]) for ref in group.refs]


def violation_kinds(results: list[Result], group: ProblemGroup) -> list[str]:
    """The violation kinds a problem was found as, in the order first found."""
    return list(dict.fromkeys(v.kind for _, v in members(results, group)))
