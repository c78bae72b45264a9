"""`--baseline FILE`: report and gate only on findings that a previous run did not have.

The previous run is a `--format json` or `--format sarif` file; findings are matched by
the fingerprint of `report/findings.py` (kind, repository-relative file, kernel, subject,
line text and its occurrence), so a finding that only moved to another line is still known.
A check whose every error is known becomes `safe`, with a note saying how many were hidden.
"""

from __future__ import annotations

import json
from dataclasses import replace

from semcheck.report.findings import FINGERPRINT_KEY, fingerprints_by_violation
from semcheck.result import Result, Verdict


class BaselineError(Exception):
    """The baseline file cannot be read as a semcheck result."""


def known_fingerprints(path: str) -> frozenset[str]:
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except OSError as e:
        raise BaselineError(f"--baseline {path}: cannot read it: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise BaselineError(f"--baseline {path}: not JSON ({e.msg} at line {e.lineno})") from None
    if isinstance(document, dict) and "runs" in document:
        return _from_sarif(path, document)
    if isinstance(document, dict) and "results" in document and "semcheck" in document:
        return _from_json(path, document)
    raise BaselineError(f"--baseline {path}: neither semcheck's --format json nor SARIF")


def _from_sarif(path: str, document: dict) -> frozenset[str]:
    found = set()
    for run in document.get("runs") or []:
        for result in run.get("results") or []:
            fingerprint = (result.get("partialFingerprints") or {}).get(FINGERPRINT_KEY)
            if fingerprint is None:
                raise BaselineError(f"--baseline {path}: a result has no {FINGERPRINT_KEY} fingerprint "
                                    "(written by another tool, or an older semcheck: write it again)")
            found.add(fingerprint)
    return frozenset(found)


def _from_json(path: str, document: dict) -> frozenset[str]:
    found = set()
    for result in document["results"]:
        for violation in result.get("violations") or []:
            if "fingerprint" not in violation:
                raise BaselineError(f"--baseline {path}: a violation has no fingerprint "
                                    "(written by an older semcheck: write it again)")
            found.add(violation["fingerprint"])
    return frozenset(found)


def without_known(results: list[Result], known: frozenset[str], source: str) -> tuple[list[Result], int]:
    """`results` with the violations `known` holds removed, and how many were."""
    fingerprints = fingerprints_by_violation(results)
    out, hidden = [], 0
    for r in results:
        kept = [v for v in r.violations if fingerprints[id(v)] not in known]
        if len(kept) == len(r.violations):
            out.append(r)
            continue
        gone = len(r.violations) - len(kept)
        hidden += gone
        verdict = r.verdict
        if verdict is Verdict.VIOLATION and not any(v.severity == "error" for v in kept):
            verdict = Verdict.SAFE
        note = f"{gone} finding{'s' if gone != 1 else ''} known from the baseline {source} not reported"
        out.append(replace(r, violations=kept, verdict=verdict, notes=[*r.notes, note],
                           known_findings=r.known_findings + gone))
    return out, hidden
