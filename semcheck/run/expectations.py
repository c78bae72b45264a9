"""Expected verdicts: how a known-buggy kernel or model counts as a pass in a CI gate.

A declaration names the outcome a file is expected to have:

    # semcheck: expect deadlock                       (a comment in the kernel or model file)
    # semcheck: expect unsatisfied_wait, lowered_as_decrementing
    # semcheck: expect unsatisfied_wait kernel=ring_bad devices=4,8
    # semcheck: expect unsatisfied_wait cores=2       (a kernel split over 2 TensorCores)
    # semcheck: expect remote_before_entry invocations=2  (under --invocations 2)
    # semcheck: expect safe

or, for files that cannot carry a comment, the same text in pyproject.toml:

    [tool.semcheck.expect]
    "examples/ring_bug.py" = "deadlock"
    "vendored/*.py" = ["safe", "unsatisfied_wait kernel=broken_ring"]

Keys are paths or glob patterns relative to the pyproject.toml that holds them (the nearest
one above the checked file). An outcome is `safe` or a violation kind; `kernel=`,
`devices=`, `cores=` and `invocations=` narrow a declaration to some of the file's checks
(a declaration without `invocations=` applies whatever `--invocations` is).

How a check is judged (`judge`): the error kinds it found must be exactly the declared error
kinds (none for `safe`), and every declared warning kind must be among its warnings (a
warning that is not declared is still allowed: warnings never fail a run). A check with no
declaration is expected to be safe. An `error` or `inconclusive` check never matches.

`semcheck verify --expectations` runs every check exhaustively (`--exhaustive`): a
declaration is the record of every bug a file has, and only an exhaustive check sees each
kind; which counterexample comes first may depend on which engine of `--engine auto` gets
there first, while the kinds an exhaustive check finds depend on the protocol alone. A
Result that stopped at its first counterexample (`Result.first_only`, from the API's
default) matches when the kinds it found are some of the declared ones.

Which declaration applies to a check: comments in the file win over pyproject.toml; within
one source the most specific matching declaration (most qualifiers) wins; two equally
specific matching declarations that disagree are an error.
"""

from __future__ import annotations

import fnmatch
import io
import os
import re
import sys
import tokenize

from semcheck.ir import Loc
from semcheck.kinds import SEVERITY, Kind
from semcheck.records import record
from semcheck.result import Result, Verdict

SAFE = "safe"
_COMMENT = re.compile(r"#\s*semcheck:\s*expect\b(?P<spec>.*)$")
# A comment that looks meant for semcheck: `# semcheck expect ...`, `# semcheck: expected ...`.
_LOOKS_LIKE_DIRECTIVE = re.compile(r"#\s*semcheck\b\s*(?P<colon>:?)\s*(?P<word>[A-Za-z_-]*)(?P<rest>.*)$", re.I)
DIRECTIVES = ("expect",)
# Warnings that say a check did not cover what was asked: undeclared, they fail the gate.
COVERAGE_WARNINGS = frozenset({Kind.MESH_SMALLER_THAN_DEVICES.value})
_QUALIFIER = re.compile(r"(?P<key>kernel|devices|cores|invocations)=(?P<value>\S+)")


class ExpectationError(Exception):
    """A declaration that cannot be read; names where it is and what would be valid."""


@record(frozen=True)
class Expectation:
    outcomes: frozenset[str]  # violation kinds; empty means `safe`
    kernel: str | None = None
    devices: frozenset[int] | None = None
    source: str = "comment"  # "comment" (in the file) or "pyproject"
    where: str = ""  # "file:line" of the declaration
    cores: frozenset[int] | None = None
    invocations: frozenset[int] | None = None

    @property
    def specificity(self) -> int:
        qualifiers = (self.kernel, self.devices, self.cores, self.invocations)
        return sum(q is not None for q in qualifiers)

    def applies_to(self, result: Result) -> bool:
        return self.applies(result.kernel, result.devices, result.cores, result.invocations)

    def applies(self, kernel: str | None, devices: int, cores: int, invocations: int) -> bool:
        """Whether it covers a check of `kernel` (None: a kernel no declaration names) at
        `devices` devices on `cores` cores, run `invocations` times."""
        return (
            (self.kernel is None or self.kernel == kernel)
            and (self.devices is None or devices in self.devices)
            and (self.cores is None or cores in self.cores)
            and (self.invocations is None or invocations in self.invocations)
        )

    def describe(self) -> str:
        return ", ".join(sorted(self.outcomes)) or SAFE


@record(frozen=True)
class Judgement:
    """How one check compares with what was declared for it."""

    expected: Expectation | None  # None: nothing declared, so `safe` is expected
    matched: bool
    reason: str  # one line, e.g. "expected deadlock, found unsatisfied_wait"

    @property
    def expected_text(self) -> str:
        return self.expected.describe() if self.expected else SAFE



# --- reading declarations --------------------------------------------------------------------


def parse_spec(spec: str, where: str, source: str = "comment") -> Expectation:
    """Read `deadlock, lowered_as_decrementing kernel=k devices=2,4` (the text after `expect`)."""
    qualifiers = {m["key"]: m["value"] for m in _QUALIFIER.finditer(spec)}
    kinds_text = _QUALIFIER.sub("", spec)
    words = [w for w in re.split(r"[\s,]+", kinds_text) if w]
    if not words:
        raise ExpectationError(f"{where}: `expect` names no outcome; write e.g. `expect deadlock` or `expect safe`")
    valid = {k.value for k in Kind}
    outcomes = set()
    for word in words:
        if word == SAFE:
            continue
        if word not in valid:
            import difflib  # only for a misspelt outcome (tests/test_startup.py)

            close = difflib.get_close_matches(word, [SAFE, *valid], n=1, cutoff=0.6)
            raise ExpectationError(
                f"{where}: unknown outcome {word!r} in an expectation; "
                + (f"did you mean {close[0]}? Use" if close else "use")
                + " `safe` or one of: " + ", ".join(sorted(valid))
            )
        outcomes.add(word)
    if SAFE in words and outcomes:
        raise ExpectationError(f"{where}: `safe` cannot be combined with violation kinds")
    counts = {}
    for key in ("devices", "cores", "invocations"):
        if key in qualifiers:
            try:
                counts[key] = frozenset(int(n) for n in qualifiers[key].split(",") if n)
            except ValueError:
                raise ExpectationError(f"{where}: {key}= takes counts like 4,8, got {qualifiers[key]!r}") from None
    return Expectation(
        frozenset(outcomes), qualifiers.get("kernel"), counts.get("devices"), source, where, counts.get("cores"),
        counts.get("invocations"),
    )


def declared_in_file(path: str) -> list[Expectation]:
    """`# semcheck: expect ...` comments (real comments only, never text inside strings).
    A missing or unparsable file has none: the loader reports it."""
    out = []
    for line, comment in _comments(path):
        match = _COMMENT.match(comment)
        if match:
            out.append(parse_spec(match["spec"], str(Loc(path, line))))
    return out


@record(frozen=True)
class NearMiss:
    """A comment that looks like a semcheck directive but is not one, so it is ignored."""

    where: str  # file:line
    text: str  # the comment as written
    suggestion: str  # what it probably meant

    def __str__(self) -> str:
        return f"{self.where}: ignored {self.text!r}: did you mean {self.suggestion!r}?"


def near_misses(path: str) -> list[NearMiss]:
    """Comments like `# semcheck: expected deadlock` or `# semcheck expect deadlock` (no
    colon): close to a directive, so probably meant as one, and silently ignored otherwise."""
    out = []
    for line, comment in _comments(path):
        if _COMMENT.match(comment):
            continue
        match = _LOOKS_LIKE_DIRECTIVE.match(comment)
        if not match:
            continue
        import difflib  # only for a comment that looks like a directive

        word = match["word"].lower()
        close = difflib.get_close_matches(word, DIRECTIVES, n=1, cutoff=0.6) or (
            [d for d in DIRECTIVES if word.startswith(d)])
        if not close and match["colon"]:
            close = list(DIRECTIVES[:1])  # `# semcheck: <anything>` is meant for semcheck
        if not close:
            continue
        rest = match["rest"].strip()
        if not word.startswith(close[0]) and not difflib.get_close_matches(word, close):
            rest = f"{match['word']} {rest}".strip()  # the word was an outcome, the directive missing
        suggestion = f"# semcheck: {close[0]} {rest}".rstrip()
        out.append(NearMiss(str(Loc(path, line)), comment.strip(), suggestion))
    return out


def _comments(path: str):
    """(line, text) of every real comment in the file (none if it cannot be tokenized, or
    is no regular file: a named pipe would be waited on for ever)."""
    if not os.path.isfile(path):
        return []
    try:
        with open(path, "rb") as f:
            source = f.read()
        tokens = list(tokenize.tokenize(io.BytesIO(source).readline))
    except (OSError, tokenize.TokenError, SyntaxError, ValueError):
        return []
    return [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]


def find_pyproject(path: str) -> str | None:
    """The nearest pyproject.toml in the directories above `path` that has [tool.semcheck]."""
    directory = os.path.dirname(os.path.abspath(path))
    while True:
        candidate = os.path.join(directory, "pyproject.toml")
        if os.path.isfile(candidate) and semcheck_table(candidate) is not None:
            return candidate
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def declared_in_pyproject(path: str) -> list[Expectation]:
    """Declarations in the nearest pyproject.toml whose key matches `path`."""
    pyproject = find_pyproject(path)
    if pyproject is None:
        return []
    table = (semcheck_table(pyproject) or {}).get("expect", {})
    if not isinstance(table, dict):
        raise ExpectationError(f"{pyproject}: [tool.semcheck] expect must be a table of path = outcome")
    root = os.path.dirname(pyproject)
    relative = os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")
    out: list[Expectation] = []
    for pattern, value in table.items():
        if not fnmatch.fnmatchcase(relative, pattern[2:] if pattern.startswith("./") else pattern):
            continue
        specs = [value] if isinstance(value, str) else value
        if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
            raise ExpectationError(f"{pyproject}: expect.{pattern!r} must be a string or a list of strings")
        where = f"{os.path.relpath(pyproject)} [tool.semcheck.expect] {pattern!r}"
        out.extend(parse_spec(spec, where, "pyproject") for spec in specs)
    return out


def semcheck_table(pyproject: str) -> dict | None:
    """The [tool.semcheck] table of `pyproject`, or None. A file is parsed once while its
    bytes stay the same: a run asks for it when it starts (`cli.config`) and again for each
    file whose declarations it judges."""
    try:
        with open(pyproject, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ExpectationError(f"{pyproject}: cannot read: {e}") from None
    if b"semcheck" not in raw:  # no table of ours: not worth a TOML parser's start-up
        return None
    known = _TABLES.get(pyproject)
    if known is None or known[0] != raw:
        known = _TABLES[pyproject] = (raw, _parse_semcheck_table(pyproject, raw))
    return known[1]


_TABLES: dict[str, tuple[bytes, dict | None]] = {}


def _parse_semcheck_table(pyproject: str, raw: bytes) -> dict | None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        import tomli as tomllib

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ExpectationError(f"{pyproject}: cannot read: {e}") from None
    table = data.get("tool", {}).get("semcheck")
    return table if isinstance(table, dict) else None


def declarations_for(path: str) -> list[Expectation]:
    return declared_in_file(path) + declared_in_pyproject(path)


# --- judging -------------------------------------------------------------------------------


def expectation_for(result: Result, declarations: list[Expectation]) -> Expectation | None:
    return declaration_for(declarations, result.kernel, result.devices, result.cores, result.invocations)


def declaration_for(declarations: list[Expectation], kernel: str | None, devices: int, cores: int = 1,
                    invocations: int = 1) -> Expectation | None:
    """The declaration that applies to a check (comments before pyproject.toml, the most
    specific first), before the check has run: `benchmarks/mutants.py` picks the examples
    declared safe by it."""
    for source in ("comment", "pyproject"):
        matching = [d for d in declarations if d.source == source and d.applies(kernel, devices, cores, invocations)]
        if not matching:
            continue
        best = max(d.specificity for d in matching)
        top = [d for d in matching if d.specificity == best]
        if len({d.outcomes for d in top}) > 1:
            raise ExpectationError(
                f"conflicting expectations for {kernel} at {devices} devices: "
                + "; ".join(f"{d.where} says {d.describe()}" for d in top)
            )
        return top[0]
    return None


def declared_errors(expectation: Expectation | None) -> frozenset[str]:
    """The error kinds a declaration expects (none for `safe`, for warnings only, or for no
    declaration at all)."""
    outcomes = expectation.outcomes if expectation else frozenset()
    return frozenset(k for k in outcomes if SEVERITY[Kind(k)] == "error")


def judge(result: Result, expectation: Expectation | None) -> Judgement:
    declared = expectation.outcomes if expectation else frozenset()
    want_errors = declared_errors(expectation)
    want_warnings = declared - want_errors
    if result.verdict in (Verdict.ERROR, Verdict.INCONCLUSIVE):
        return Judgement(expectation, False, f"expected {_words(declared)}, but the check ended {result.verdict.value}")
    errors = {v.kind for v in result.errors}
    warnings = {v.kind for v in result.warnings}
    missing_warnings = want_warnings - warnings
    uncovered = (warnings & COVERAGE_WARNINGS) - want_warnings
    if uncovered:
        return Judgement(expectation, False, f"expected {_words(declared)}, but {_words(uncovered)}: "
                         "the check did not cover the device count it was asked for")
    if errors == want_errors and not missing_warnings:
        how = "as declared" if expectation else "as expected of a file with no declaration"
        return Judgement(expectation, True, f"{_words(declared)}, {how}")
    if result.first_only and errors and errors < want_errors and not missing_warnings:
        # a check that stopped at its first counterexample cannot have seen every kind
        return Judgement(expectation, True, f"{_words(errors)} of the declared {_words(declared)} (the first "
                         "counterexample; --exhaustive, which --expectations implies, checks every kind)")
    found = errors | (warnings & want_warnings)
    reason = f"expected {_words(declared)}, found {_words(found)}"
    if not errors and want_errors:
        reason += " (fixed? then update the declaration)"
    return Judgement(expectation, False, reason)


def judge_all(results: list[Result]) -> list[Judgement]:
    """Judge every result against the declarations for its file (read once per file)."""
    cache: dict[str, list[Expectation]] = {}
    judgements = []
    for result in results:
        if result.file not in cache:
            cache[result.file] = declarations_for(result.file) if result.file else []
        judgements.append(judge(result, expectation_for(result, cache[result.file])))
    return judgements


def effective_verdict(result: Result, judgement: Judgement) -> Verdict:
    """What a check counts as when expectations are judged: an error stays an error and an
    inconclusive check stays inconclusive; otherwise a match counts as safe and a mismatch
    as a violation. The exit code is then the usual one (`EXIT_CODES[worst(...)]`): 2 if any
    check errored, else 1 if any was unexpected, else 3 if any was inconclusive, else 0."""
    if result.verdict in (Verdict.ERROR, Verdict.INCONCLUSIVE):
        return result.verdict
    return Verdict.SAFE if judgement.matched else Verdict.VIOLATION


def _words(kinds) -> str:
    return ", ".join(sorted(kinds)) or SAFE


def near_misses_in(paths) -> list[NearMiss]:
    """`near_misses` of every file in `paths`."""
    return [m for path in paths for m in near_misses(path)]
