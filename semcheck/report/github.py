"""`--format github`: GitHub Actions workflow commands (`::error file=...,line=...::...`),
which the Actions log turns into annotations on the pull request's diff.

Paths are relative to the repository root (`$GITHUB_WORKSPACE`), as annotations need.
GitHub shows at most 10 annotations of each level per step; the job summary
(`--summary`) has every finding. A violation declared expected (`--expectations`) is a
`notice`, not an error.
"""

from __future__ import annotations

from semcheck.report.concise import expected_violations, check_problem
from semcheck.report.findings import collect, problems, relative_to_root, repository_root
from semcheck.report.groups import found_in_text
from semcheck.result import Result, Verdict


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, *, file: str | None, line: int, title: str) -> str:
    props = []
    if file and not file.startswith("<"):
        props += [f"file={escape_property(file)}", f"line={max(line, 1)}"]
    props.append(f"title={escape_property(title)}")
    return f"::{level} {','.join(props)}::{escape_data(message)}"


def render(results: list[Result], *, judgements=None) -> str:
    root = repository_root()
    expected = expected_violations(results, judgements)
    lines = []
    for problem in problems(collect(results, root)):  # one annotation per root cause, at its line
        finding = problem.first
        # the sizes as the text report names them: "1, 2 devices x 4 blocks", not "1, 2 devices"
        devices = found_in_text(problem.members)
        declared = all(id(v) in expected for _, v in problem.members)
        level = "notice" if declared else ("warning" if finding.severity == "warning" else "error")
        found = f"; {problem.found_at}" if problem.found_at else ""
        message = f"{finding.headline} (kernel {finding.result.kernel}; {devices}{found})"
        if finding.violation.cause is not None:
            from semcheck.report.causes import fix

            message += f". Fix: {fix(finding.violation.cause)}"
        if declared:
            message += "; declared expected"
        lines.append(command(level, message, file=relative_to_root(problem.location.file, root),
                             line=problem.location.line, title=f"semcheck: {problem.kind}"))
    for r in results:
        if r.verdict in (Verdict.ERROR, Verdict.INCONCLUSIVE):
            level = "error" if r.verdict is Verdict.ERROR else "warning"
            lines.append(command(level, f"{r.kernel} ({r.devices} devices): {check_problem(r)}",
                                 file=relative_to_root(r.file, root) if r.file else None, line=r.line,
                                 title=f"semcheck: {r.verdict.value}"))
    return "\n".join(lines) + ("\n" if lines else "")
