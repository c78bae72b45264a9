"""`--format sarif`: SARIF 2.1.0 for GitHub code scanning and other SARIF viewers.

* One rule per violation kind (all of them, so a viewer can tell "checked, nothing found"
  from "not checked"), described by `properties.DESCRIPTIONS`.
* One result per violation and place: the same violation found at 2, 4 and 8 devices is one
  result (at the kernel source line), with one code flow per device count. A code flow has
  one thread flow per device and core, its steps in the global order of the trace
  (`executionOrder`); the blocked waits end their threads.
* Paths are relative to the working directory (`uriBaseId` %SRCROOT%), as code scanning
  expects when semcheck runs at the repository root.
* Checks that could not run (error) or did not finish (inconclusive) are tool execution
  notifications, and `executionSuccessful` is false when any check errored.
* With `--expectations`, a violation declared expected carries a SARIF suppression
  (`inSource` for a `# semcheck: expect` comment, `external` for pyproject.toml).
"""

from __future__ import annotations

import hashlib
import json
import linecache
import os
import urllib.parse
from pathlib import Path

from semcheck.version import __version__
from semcheck.ir import Loc, core_unit, display_path, thread_name
from semcheck.kinds import DESCRIPTIONS, SEVERITY, Kind
from semcheck.result import Result, TraceStep, Verdict, Violation

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"

RULE_NAMES = {kind: "".join(word.capitalize() for word in kind.value.split("_")) for kind in Kind}


def render(results: list[Result], *, judgements=None, **_options) -> str:
    return json.dumps(sarif_log(results, judgements), indent=2)


def sarif_log(results: list[Result], judgements=None) -> dict:
    rules = [_rule(kind) for kind in Kind]
    rule_index = {kind.value: i for i, kind in enumerate(Kind)}
    judged = dict(zip(map(id, results), judgements)) if judgements is not None else None
    groups: dict[tuple, list[tuple[Result, Violation]]] = {}
    for result in results:
        for violation in result.violations:
            groups.setdefault(_group_key(result, violation), []).append((result, violation))
    sarif_results = [
        _result(members, rule_index, _expected_by(members, judged)) for members in groups.values()
    ]
    notifications = [n for r in results for n in _notifications(r)]
    invocation = {"executionSuccessful": all(r.verdict is not Verdict.ERROR for r in results)}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    run = {
        "tool": {
            "driver": {
                "name": "semcheck",
                "version": __version__,
                "semanticVersion": __version__,
                "rules": rules,
            }
        },
        "invocations": [invocation],
        "originalUriBaseIds": {SRCROOT: {"uri": Path.cwd().as_uri() + "/"}},
        "results": sarif_results,
        "columnKind": "unicodeCodePoints",
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _expected_by(members: list[tuple[Result, Violation]], judged: dict | None):
    """The declaration that makes every check in the group pass, if there is one."""
    if judged is None:
        return None
    judgements = [judged[id(result)] for result, _ in members]
    if all(j.matched and j.expected is not None for j in judgements):
        return judgements[0].expected
    return None


def _rule(kind: Kind) -> dict:
    level = SEVERITY[kind]
    return {
        "id": kind.value,
        "name": RULE_NAMES[kind],
        "shortDescription": {"text": DESCRIPTIONS[kind]},
        "fullDescription": {"text": DESCRIPTIONS[kind]},
        "defaultConfiguration": {"level": level},
        "properties": {"tags": ["concurrency", "pallas", "semaphore"], "problem.severity": level},
    }


def _group_key(result: Result, violation: Violation) -> tuple:
    loc = violation.location or Loc(result.file, result.line)
    return (result.kernel, os.path.abspath(result.file) if result.file else "", violation.kind,
            os.path.abspath(loc.file), loc.line)


def _result(members: list[tuple[Result, Violation]], rule_index: dict, expectation) -> dict:
    result, violation = members[0]
    loc = violation.location or Loc(result.file, result.line)
    devices = [r.devices for r, _ in members]
    counts = ", ".join(map(str, devices))
    message = f"{result.kernel}: {violation.message}\n(found with {counts} device{'s' if devices != [1] else ''})"
    out = {
        "ruleId": violation.kind,
        "ruleIndex": rule_index[violation.kind],
        "level": violation.severity,
        "message": {"text": message},
        "locations": [_location(loc)],
        "partialFingerprints": {"semcheckViolation/v1": _fingerprint(result, violation, loc)},
        "properties": {"kernel": result.kernel, "devices": devices, "backend": result.backend,
                       "semantics": result.semantics, "engine": result.engine},
    }
    related = _related_locations(violation, loc)
    if related:
        out["relatedLocations"] = related
    flows = [flow for r, v in members if (flow := _code_flow(r, v)) is not None]
    if flows:
        out["codeFlows"] = flows
    if expectation is not None:
        out["suppressions"] = [{
            "kind": "inSource" if expectation.source == "comment" else "external",
            "status": "accepted",
            "justification": f"declared expected: {expectation.where}",
        }]
    return out


def _location(loc: Loc, message: str | None = None, id_: int | None = None) -> dict:
    location: dict = {"physicalLocation": {
        "artifactLocation": _artifact(loc.file),
        "region": {"startLine": max(loc.line, 1)},
    }}
    if message:
        location["message"] = {"text": message}
    if id_ is not None:
        location["id"] = id_
    return location


def _artifact(path: str) -> dict:
    shown = display_path(path)
    if os.path.isabs(shown):
        return {"uri": Path(shown).as_uri()}
    return {"uri": urllib.parse.quote(shown.replace(os.sep, "/")), "uriBaseId": SRCROOT}


def _related_locations(violation: Violation, primary: Loc) -> list[dict]:
    out, seen = [], {primary}
    for b in violation.blocked:
        loc = b.location
        if loc is None or loc in seen:
            continue
        seen.add(loc)
        out.append(_location(loc, f"{b.name} is blocked here: {b.what} on {b.semaphore} "
                                  f"needs {b.needs}, has {b.has}", len(out) + 1))
    return out


def _code_flow(result: Result, violation: Violation) -> dict | None:
    threads: dict[tuple, list[dict]] = {}
    names: dict[tuple, str] = {}
    for step in violation.trace:
        if step.location is None:
            continue
        lane = (step.device or 0, step.core or 0, step.sub)
        threads.setdefault(lane, []).append(_flow_step(step, violation))
    order = len(violation.trace)
    primary = set(violation.cycle) if violation.cycle else None
    for i, b in enumerate(violation.blocked):
        if b.location is None:
            continue
        order += 1
        lane = (b.device, b.core or 0, b.sub)
        names[lane] = b.name
        threads.setdefault(lane, []).append({
            "location": _location(b.location, f"blocked: {b.what} on {b.semaphore} needs "
                                              f"{b.needs}, has {b.has}"),
            "executionOrder": order,
            "importance": "essential" if primary is None or i in primary else "important",
            "kinds": ["danger"],
        })
    if not threads:
        return None
    thread_flows = []
    for lane in sorted(threads):
        device, core, sub = lane
        name = names.get(lane) or thread_name(device, core, sub, result.cores, core_unit(result.semantics))
        thread_flows.append({"id": name, "message": {"text": name}, "locations": threads[lane]})
    return {
        "message": {"text": f"schedule with {result.devices} devices ({len(violation.trace)} steps)"},
        "threadFlows": thread_flows,
    }


def _flow_step(step: TraceStep, violation: Violation) -> dict:
    focus = {b.short for b in violation.blocked} | {violation.semaphore}
    fault = step.fault is not None
    essential = fault or step.relevance == 0 or (step.semaphore and step.semaphore in focus)
    entry = {
        "location": _location(step.location, f"{step.index}. {step.actor}: {step.text}"),
        "executionOrder": step.index,
        # the violation's causal past is what a reader needs; other steps are context
        "importance": "essential" if essential else ("important" if step.relevance is not None else "unimportant"),
    }
    if fault:
        entry["kinds"] = ["danger"]
    return entry


def _notifications(result: Result) -> list[dict]:
    if result.verdict is Verdict.ERROR:
        level, text = "error", f"{result.kernel} ({result.devices} devices) could not be checked: {result.error}"
    elif result.verdict is Verdict.INCONCLUSIVE:
        level, text = "warning", f"{result.kernel} ({result.devices} devices) is inconclusive: " + (
            "; ".join(result.notes) or "a budget ran out")
    else:
        return []
    notification = {"level": level, "message": {"text": text}}
    if result.file and not result.file.startswith("<"):
        notification["locations"] = [_location(Loc(result.file, max(result.line, 1)))]
    return [notification]


def _fingerprint(result: Result, violation: Violation, loc: Loc) -> str:
    """Stable across runs and line shifts: the kind, the file, the kernel and the text of
    the source line (not its number)."""
    text = linecache.getline(loc.file, loc.line).strip()  # "" when the source is gone
    key = "\0".join([violation.kind, display_path(loc.file), result.kernel, text])
    return hashlib.sha256(key.encode()).hexdigest()[:32]
