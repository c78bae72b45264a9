"""`--format sarif`: SARIF 2.1.0 for GitHub code scanning and other SARIF viewers.

* One rule per violation kind (all of them, so a viewer can tell "checked, nothing found"
  from "not checked"), with a full description and `help`: the kind's whole page from
  `docs/kinds/`, in Markdown (the pages ship with the package, so no link has to resolve).
* One result per finding (`report/findings.py`): the same violation at the same place found
  at 2, 4 and 8 devices is one result, with one code flow per device count. Its message
  starts with the headline (what an alert list shows), and its `partialFingerprints` carry
  the finding's identity, so code scanning tells two findings on identical lines apart and
  keeps one alert per finding across runs.
* A code flow holds the threads involved in the finding (the violating thread, the threads
  in its wait-for cycle, and those that touched the semaphores it is about, or the copy it
  races with), one thread flow each, steps in the global order of the trace
  (`executionOrder`); the blocked waits end their threads. The fewest-devices schedule shows
  every step of those threads; larger ones only the essential steps (on the finding's
  semaphores, faults, blocked waits), which keeps the SARIF of a whole sweep small.
* Paths are relative to the repository root (`$GITHUB_WORKSPACE`, else the git work tree
  of the working directory) under `uriBaseId` %SRCROOT%, from whatever directory semcheck runs.
* Checks that could not run (error) or did not finish (inconclusive) are tool execution
  notifications, and `executionSuccessful` is false when any check errored.
* `--category NAME` sets `runAutomationDetails.id` (`NAME/`), so several analyses of one
  commit (per device count or configuration) stay apart in code scanning.
* With `--expectations`, a violation declared expected carries a SARIF suppression
  (`inSource` for a `# semcheck: expect` comment, `external` for pyproject.toml).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path

from semcheck.ir import Loc, core_unit, thread_name
from semcheck.kinds import DESCRIPTIONS, SEVERITY, Kind
from semcheck.report import findings as findings_module
from semcheck.report.findings import FINGERPRINT_KEY, Finding
from semcheck.report import causes
from semcheck.report.kinds import FULL_DESCRIPTIONS, help_markdown
from semcheck.version import REPOSITORY_URL, __version__
from semcheck.result import Result, TraceStep, Verdict, Violation

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"

RULE_NAMES = {kind: "".join(word.capitalize() for word in kind.value.split("_")) for kind in Kind}


def render(results: list[Result], *, judgements=None, category: str | None = None) -> str:
    return json.dumps(sarif_log(results, judgements, category=category), separators=(",", ":"))


def sarif_log(results: list[Result], judgements=None, *, category: str | None = None,
              root: str | None = None) -> dict:
    root = findings_module.repository_root() if root is None else root
    rules = [_rule(kind) for kind in Kind]
    rule_index = {kind.value: i for i, kind in enumerate(Kind)}
    judged = dict(zip(map(id, results), judgements)) if judgements is not None else None
    sarif_results = [
        _result(finding, rule_index, _expected_by(finding.members, judged), root)
        for finding in findings_module.collect(results, root)
    ]
    notifications = [n for r in results for n in _notifications(r, root)]
    invocation: dict[str, object] = {"executionSuccessful": all(r.verdict is not Verdict.ERROR for r in results)}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    run = {
        "tool": {
            "driver": {
                "name": "semcheck",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": REPOSITORY_URL,
                "rules": rules,
            }
        },
        "invocations": [invocation],
        "originalUriBaseIds": {SRCROOT: {"uri": Path(root).as_uri().rstrip("/") + "/"}},
        "results": sarif_results,
        "columnKind": "unicodeCodePoints",
    }
    if category:
        run["automationDetails"] = {"id": category.rstrip("/") + "/"}
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
        "fullDescription": {"text": FULL_DESCRIPTIONS[kind]},
        "help": {"text": FULL_DESCRIPTIONS[kind], "markdown": help_markdown(kind)},
        "defaultConfiguration": {"level": level},
        "properties": {"tags": ["concurrency", "pallas", "semaphore"], "problem.severity": level},
    }


def _result(finding: Finding, rule_index: dict, expectation, root: str) -> dict:
    result, violation = finding.result, finding.violation
    devices = finding.devices
    counts = ", ".join(map(str, devices))
    rest = violation.message.strip()
    fix = f"\n\nFix: {causes.fix(violation.cause)}." if violation.cause is not None else ""
    message = (f"{finding.headline}.\n\n{rest}{fix}\n\n(kernel {result.kernel}; found with {counts} "
               f"device{'s' if devices != [1] else ''})")
    out = {
        "ruleId": violation.kind,
        "ruleIndex": rule_index[violation.kind],
        "level": violation.severity,
        "message": {"text": message},
        "locations": [_location(finding.location, root)],
        "partialFingerprints": {FINGERPRINT_KEY: finding.fingerprint},
        "properties": {"kernel": result.kernel, "devices": devices, "backend": result.frontend,
                       "semantics": result.backend, "engine": result.engine,
                       **_provenance(violation, root)},
    }
    related = _related_locations(violation, finding.location, root)
    if related:
        out["relatedLocations"] = related
    first_per_check = list({r.devices: (r, v) for r, v in reversed(finding.members)}.values())[::-1]
    flows = [flow for i, (r, v) in enumerate(first_per_check)
             if (flow := _code_flow(r, v, root, whole_threads=i == 0)) is not None]
    if flows:
        out["codeFlows"] = flows
    if expectation is not None:
        out["suppressions"] = [{
            "kind": "inSource" if expectation.source == "comment" else "external",
            "status": "accepted",
            "justification": f"declared expected: {expectation.where}",
        }]
    return out


def _provenance(v, root: str) -> dict:
    """Which engines found it, the root cause it follows from, the readings it rests on."""
    out: dict = {}
    if v.found_by:
        out["foundBy"] = list(v.found_by)
    if v.caused_by is not None and v.caused_by.location is not None:
        out["causedBy"] = {"kind": v.caused_by.kind,
                           "file": findings_module.relative_to_root(v.caused_by.location.file, root),
                           "line": v.caused_by.location.line}
    if v.rests_on:
        out["restsOn"] = [{"rule": r.rule, "switch": r.switch} for r in v.rests_on]
    return out


def _location(loc: Loc, root: str, message: str | None = None, id_: int | None = None) -> dict:
    location: dict = {"physicalLocation": {
        "artifactLocation": _artifact(loc.file, root),
        "region": {"startLine": max(loc.line, 1)},
    }}
    if message:
        location["message"] = {"text": message}
    if id_ is not None:
        location["id"] = id_
    return location


def _artifact(path: str, root: str) -> dict:
    shown = findings_module.relative_to_root(path, root)
    if os.path.isabs(shown):
        return {"uri": Path(shown).as_uri()}
    return {"uri": urllib.parse.quote(shown), "uriBaseId": SRCROOT}


def _related_locations(violation: Violation, primary: Loc, root: str) -> list[dict]:
    out: list[dict] = []
    seen = {primary}
    _add_calls(out, primary, root, "this line")
    for b in violation.blocked:
        loc = b.location
        if loc is None or loc in seen:
            continue
        seen.add(loc)
        out.append(_location(loc, root, f"{b.name} is blocked here: {b.what} on {b.semaphore} "
                                        f"needs {b.needs}, has {b.has}", len(out) + 1))
    for loc in violation.related:
        if isinstance(loc, Loc) and loc not in seen:
            seen.add(loc)
            out.append(_location(loc, root, "the other access", len(out) + 1))
            _add_calls(out, loc, root, "the other access")
    return out


def _add_calls(out: list[dict], loc: Loc, root: str, what: str) -> None:
    """The kernel's calls that led to `loc`, a line in a helper (ir.Loc.chain), as related
    locations: the helper's caller first, the kernel body's line last."""
    for frame in loc.chain:
        where = f" in {frame.function}" if frame.function else ""
        out.append(_location(Loc(frame.file, frame.line), root, f"{what} is reached from this call{where}",
                             len(out) + 1))


def _stack(loc: Loc, root: str) -> dict:
    """A SARIF stack: the line itself, then each call that led to it (ir.Loc.chain)."""
    frames = [{"location": _location(loc.bare(), root)}]
    frames += [{"location": _location(Loc(f.file, f.line), root, f"called from {f.function}" if f.function else None)}
               for f in loc.chain]
    return {"message": {"text": f"{loc.bare()} {loc.chain_text()}"}, "frames": frames}


Lane = tuple[int, int]  # (device, core): the thread a step or a blocked wait belongs to


def _lane(device, core) -> Lane:
    return (device or 0, core or 0)


def involved_lanes(violation: Violation) -> set[Lane]:
    """The threads a finding is about: the violating thread, the threads of its wait-for
    cycle, every thread that touched a semaphore those threads are blocked on (or the
    violation is about), and the thread that started a racing copy. Empty when the
    violation names no thread (then every thread is shown)."""
    lanes: set[Lane] = set()
    if violation.device is not None:
        lanes.add(_lane(violation.device, violation.core))
    if violation.cycle:
        blocked = [violation.blocked[i] for i in violation.cycle if i < len(violation.blocked)]
    else:  # the violating thread's own wait; the waits stuck behind it are related locations
        blocked = [b for b in violation.blocked if _lane(b.device, b.core) in lanes]
    lanes |= {_lane(b.device, b.core) for b in blocked}
    focus = {b.short for b in blocked} | {violation.semaphore}
    focus.discard(None)
    steps = {step.index: step for step in violation.trace}
    for step in violation.trace:
        if step.semaphore and step.semaphore in focus:
            lanes.add(_lane(step.device, step.core))
            starter = steps.get(step.started_by) if step.started_by else None
            if starter is not None:
                lanes.add(_lane(starter.device, starter.core))
    racing = steps.get(violation.racing_step) if violation.racing_step else None
    if racing is not None:
        lanes.add(_lane(racing.device, racing.core))
    return lanes


def _code_flow(result: Result, violation: Violation, root: str, *, whole_threads: bool) -> dict | None:
    """The schedule, on the threads involved: every step of theirs for the first (fewest
    devices) schedule of a finding, only the essential ones (on the finding's semaphores,
    faults, blocked waits) for the larger ones, which repeat the pattern on more devices."""
    involved = involved_lanes(violation)
    threads: dict[tuple, list[dict]] = {}
    names: dict[tuple, str] = {}
    causal = any(step.relevance is not None for step in violation.trace)
    for step in violation.trace:
        if step.location is None or (involved and _lane(step.device, step.core) not in involved):
            continue
        if causal and step.relevance is None:  # outside the violation's causal past
            continue
        entry = _flow_step(step, violation, root)
        if not whole_threads and entry["importance"] != "essential":
            continue
        lane = (step.device or 0, step.core or 0, step.sub)
        threads.setdefault(lane, []).append(entry)
    order = len(violation.trace)
    primary = set(violation.cycle) if violation.cycle else None
    for i, b in enumerate(violation.blocked):
        if b.location is None:
            continue
        order += 1
        if involved and _lane(b.device, b.core) not in involved:
            continue
        lane = (b.device, b.core or 0, b.sub)
        names[lane] = b.name
        blocked: dict = {
            "location": _location(b.location, root, f"blocked: {b.what} on {b.semaphore} needs "
                                                    f"{b.needs}, has {b.has}"),
            "executionOrder": order,
            "importance": "essential" if primary is None or i in primary else "important",
            "kinds": ["danger"],
        }
        if b.location.chain:
            blocked["stack"] = _stack(b.location, root)
        threads.setdefault(lane, []).append(blocked)
    if not threads:
        return None
    thread_flows = []
    for lane in sorted(threads):
        device, core, sub = lane
        name = names.get(lane) or thread_name(device, core, sub, result.cores, core_unit(result.backend))
        thread_flows.append({"id": name, "message": {"text": name}, "locations": threads[lane]})
    shown = sum(len(t["locations"]) for t in thread_flows)
    which = "" if whole_threads else "essential "
    return {
        "message": {"text": f"schedule with {result.devices} devices ({len(violation.trace)} steps; "
                            f"{shown} {which}shown, of the {len(thread_flows)} threads involved)"},
        "threadFlows": thread_flows,
    }


def _flow_step(step: TraceStep, violation: Violation, root: str) -> dict:
    focus = {b.short for b in violation.blocked} | {violation.semaphore}
    fault = step.fault is not None
    essential = fault or step.relevance == 0 or (step.semaphore and step.semaphore in focus)
    assert step.location is not None, "every step of a counterexample is at a line of the kernel"
    entry = {
        "location": _location(step.location, root, f"{step.index}. {step.actor}: {step.text}"),
        "executionOrder": step.index,
        # the violation's causal past is what a reader needs; other steps are context
        "importance": "essential" if essential else ("important" if step.relevance is not None else "unimportant"),
    }
    if fault:
        entry["kinds"] = ["danger"]
    if step.location.chain:  # a line in a helper: the calls from the kernel body that led there
        entry["stack"] = _stack(step.location, root)
    return entry


def _notifications(result: Result, root: str) -> list[dict]:
    if result.verdict is Verdict.ERROR:
        level, text = "error", f"{result.kernel} ({result.devices} devices) could not be checked: {result.error}"
    elif result.verdict is Verdict.INCONCLUSIVE:
        level, text = "warning", f"{result.kernel} ({result.devices} devices) is inconclusive: " + (
            "; ".join(result.notes) or "a budget ran out")
    else:
        return []
    notification: dict[str, object] = {"level": level, "message": {"text": text}}
    if result.file and not result.file.startswith("<"):
        notification["locations"] = [_location(Loc(result.file, max(result.line, 1)), root)]
    return [notification]
