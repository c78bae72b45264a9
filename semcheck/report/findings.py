"""Findings as a CI gate sees them: one per distinct violation and source place, across the
device counts it was found at, with an identity that stays the same from run to run.

Every gate-facing format reads these: SARIF (its results and `partialFingerprints`), the
concise and GitHub formats, the job summary, and `--baseline` (which matches a new run's
findings against an old run's by the same fingerprint).

The identity of a finding is its kind, its file relative to the repository root, its kernel,
its subject (the semaphore it is about, without the device or array index, or for a data
race the text of the other access's line), the text of its source line (not the line's
number, so an edit above it does not make it new) and its occurrence index among the lines of the file that read the same (two `t.wait(s, 1)` lines of one kernel are
two findings; the index depends on the source alone, so hiding a finding with `--baseline`
never renumbers another).
"""

from __future__ import annotations

import functools
import hashlib
import linecache
import os
import re
import subprocess
from dataclasses import field

from semcheck.ir import Loc
from semcheck.records import record
from semcheck.result import Result, Violation

FINGERPRINT_KEY = "semcheckFinding/v2"  # the partialFingerprints key; v1 keyed on line text only


@record(frozen=True)
class FindingId:
    """What makes a finding the same one in two runs."""

    kind: str
    file: str  # relative to the repository root, `/`-separated (absolute when outside it)
    kernel: str
    subject: str
    line_text: str
    occurrence: int = 0
    # For a line in a helper the kernel calls: each calling line's text and occurrence
    # (ir.Loc.chain), so that two calls of one helper are two findings. Empty otherwise,
    # which leaves the fingerprints of lines in the kernel body as they were.
    calls: str = ""

    @property
    def fingerprint(self) -> str:
        parts = [self.kind, self.file, self.kernel, self.subject, self.line_text, str(self.occurrence)]
        key = "\0".join(parts + ([self.calls] if self.calls else []))
        return hashlib.sha256(key.encode()).hexdigest()[:32]


@record
class Finding:
    """One violation at one source place, found at one or more device counts."""

    id: FindingId
    location: Loc
    members: list[tuple[Result, Violation]] = field(default_factory=list)

    @property
    def result(self) -> Result:
        return self.members[0][0]

    @property
    def violation(self) -> Violation:
        return self.members[0][1]

    @property
    def kind(self) -> str:
        return self.violation.kind

    @property
    def severity(self) -> str:
        return self.violation.severity

    @property
    def devices(self) -> list[int]:
        """The device counts it was found at, each once (a check can find it on several
        semaphore instances or devices)."""
        return sorted({r.devices for r, _ in self.members})

    @property
    def headline(self) -> str:
        """What is wrong in one line: its root cause where one is named, else the first
        sentence of its message."""
        if self.violation.cause is not None:
            from semcheck.report.causes import statement

            return statement(self.violation.cause)
        return headline(self.violation.message, self.kind)

    @property
    def fingerprint(self) -> str:
        return self.id.fingerprint


def headline(message: str, kind: str = "") -> str:
    """The first sentence of a violation message, without a leading `kind:` (the formats
    that show a headline name the kind beside it)."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    end = re.search(r"\.(\s|$)", first)
    if end:
        first = first[: end.start()]
    for prefix in (f"{kind}: ", f"{kind.replace('_', ' ')}: "):
        if kind and first.startswith(prefix):
            first = first[len(prefix):]
    return first.rstrip(":; ")


def subject(violation: Violation) -> str:
    """The semaphore a finding is about, or the other line of a race, device-independent."""
    if violation.kind == "data_race" and violation.related:
        return "\n".join(sorted(_line_text(loc) for loc in violation.related))
    if violation.semaphore:
        return re.sub(r"(\[[^\]]*\])?@.*$", "", violation.semaphore)
    return ""


def collect(results: list[Result], root: str | None = None) -> list[Finding]:
    """The findings of `results`, in the order they were first found."""
    root = repository_root() if root is None else root
    groups: dict[tuple, Finding] = {}
    for result in results:
        for violation in result.violations:
            loc = violation.location or Loc(result.file, result.line)
            what = subject(violation)
            key = (result.kernel, os.path.abspath(result.file) if result.file else "", violation.kind,
                   os.path.abspath(loc.file), loc.line, loc.chain, what)
            finding = groups.get(key)
            if finding is None:
                text = _line_text(loc)
                base = FindingId(violation.kind, relative_to_root(loc.file, root), result.kernel, what,
                                 text, _occurrence(loc, text), _calls(loc))
                finding = groups[key] = Finding(base, loc)
            finding.members.append((result, violation))
    return list(groups.values())


def fingerprints_by_violation(results: list[Result], root: str | None = None) -> dict[int, str]:
    """{id(violation): fingerprint} for every violation of `results`."""
    return {id(v): f.fingerprint for f in collect(results, root) for _, v in f.members}


def _occurrence(loc: Loc, text: str) -> int:
    """How many lines above `loc` in its file read the same (stripped): 0 for the first."""
    if not text:
        return 0
    return sum(line.strip() == text for line in linecache.getlines(loc.file)[: loc.line - 1])


def _calls(loc: Loc) -> str:
    """Each calling line of `loc`'s chain as its text and occurrence (see FindingId.calls)."""
    calls = []
    for frame in loc.chain:
        at = Loc(frame.file, frame.line)
        text = _line_text(at)
        calls.append(f"{text}#{_occurrence(at, text)}")
    return "\n".join(calls)


def _line_text(loc: Loc) -> str:
    if not loc.file or loc.line <= 0:
        return ""
    linecache.checkcache(loc.file)  # the file may have changed since this process last read it
    return linecache.getline(loc.file, loc.line).strip()


def repository_root(cwd: str | None = None) -> str:
    """The root paths are shown relative to: `$GITHUB_WORKSPACE` in a GitHub workflow, else
    the git work tree the working directory is in, else the working directory."""
    workspace = os.environ.get("GITHUB_WORKSPACE")
    if workspace and os.path.isdir(workspace):
        return os.path.realpath(workspace)
    return _git_toplevel(os.path.realpath(cwd or os.getcwd()))


@functools.lru_cache(maxsize=16)
def _git_toplevel(cwd: str) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return cwd
    top = out.stdout.strip()
    return os.path.realpath(top) if out.returncode == 0 and top else cwd


def relative_to_root(path: str, root: str) -> str:
    """`path` relative to `root` with `/` separators; absolute when it lies outside."""
    if not path or path.startswith("<"):
        return path
    absolute = os.path.realpath(path)
    if absolute == root or absolute.startswith(root.rstrip(os.sep) + os.sep):
        return os.path.relpath(absolute, root).replace(os.sep, "/")
    return absolute


@record
class Problem:
    """The findings one root cause explains (a finding without a named cause is a problem of
    its own): what the one-line formats (concise, github) print one line for."""

    findings: list[Finding]

    @property
    def first(self) -> Finding:
        return self.findings[0]

    @property
    def location(self) -> Loc:
        cause = self.first.violation.cause
        return cause.site if cause is not None else self.first.location

    @property
    def kind(self) -> str:
        """The kind, or the kinds a root cause was found as: "data_race+semaphore_leftover"."""
        return "+".join(dict.fromkeys(sorted(f.kind for f in self.findings)))

    @property
    def devices(self) -> list[int]:
        return sorted({n for f in self.findings for n in f.devices})

    @property
    def members(self) -> list[tuple[Result, Violation]]:
        return [m for f in self.findings for m in f.members]

    @property
    def found_at(self) -> str:
        """For a root cause found as several findings: "found as data_race at lines 57, 62;
        semaphore_leftover at line 54"; empty for one finding."""
        if len(self.findings) < 2:
            return ""
        from semcheck.report.causes import found_as

        return "found as " + found_as(f.violation for f in self.findings)


def problems(findings: list[Finding]) -> list[Problem]:
    """`findings` grouped by root cause, in the order first found."""
    grouped: dict[object, Problem] = {}
    for f in findings:
        cause = f.violation.cause
        key = (f.result.kernel, f.result.file, cause.key) if cause is not None else id(f)
        grouped.setdefault(key, Problem([])).findings.append(f)
    return list(grouped.values())
