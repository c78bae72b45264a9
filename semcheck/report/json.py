"""`--format json`: one object, `{"semcheck": version, "results": [...]}` (DESIGN.md)."""

from __future__ import annotations

import json

from semcheck import __version__
from semcheck.ir import Loc
from semcheck.report import display_path
from semcheck.result import Result, TraceStep, Violation


def location(loc: Loc | None) -> dict | None:
    return None if loc is None else {"file": display_path(loc.file), "line": loc.line}


def step_dict(step: TraceStep) -> dict:
    return {
        "step": step.index,
        "actor": step.actor,
        "device": step.device,
        "core": step.core,
        "event": step.event,
        "text": step.text,
        "location": location(step.location),
        "semaphore": step.semaphore,
        "before": step.before,
        "after": step.after,
        "fed_by": list(step.fed_by),
        "started_by": step.started_by,
    }


def violation_dict(v: Violation) -> dict:
    out = {
        "kind": v.kind,
        "severity": v.severity,
        "message": v.message,
        "device": v.device,
        "core": v.core,
        "location": location(v.location),
        "trace": [step_dict(s) for s in v.trace],
    }
    if v.blocked:
        out["blocked"] = [
            {k: (location(val) if isinstance(val, Loc) else val) for k, val in b.items() if k != "sem"}
            for b in v.blocked
        ]
    if v.cycle:
        out["cycle"] = v.cycle
    if v.inputs:
        out["inputs"] = dict(v.inputs)
    if v.related:
        out["related"] = [location(loc) for loc in v.related]
    if v.semaphore:
        out["semaphore"] = v.semaphore
    if v.loop_from is not None:
        out["loop_from"] = v.loop_from  # the trace's steps from here on repeat for ever
    return out


def result_dict(r: Result) -> dict:
    return {
        "kernel": r.kernel,
        "file": display_path(r.file),
        "line": r.line,
        "backend": r.backend,
        "semantics": r.semantics,
        "devices": r.devices,
        "cores": r.cores,
        "engine": r.engine,
        "verdict": r.verdict.value,
        "violations": [violation_dict(v) for v in r.violations],
        "stats": {
            "states": r.stats.states,
            "transitions": r.stats.transitions,
            "seconds": r.stats.seconds,
            **_solver_stats(r),
        },
        "error": r.error,
        "notes": r.notes,
    }


def _solver_stats(r: Result) -> dict:
    """The z3 engine stores no states (states and transitions are 0); it says instead how
    big its encoding was and how many queries it took."""
    if r.stats.solver_queries is None:
        return {}
    return {"encoded_events": r.stats.encoded_events, "solver_queries": r.stats.solver_queries}


def render(results: list[Result], *, judgements=None, **_options) -> str:
    """With `judgements` (--expectations), each result also says what was declared for it
    and whether it matched: `"expectation": {"expected", "matched", "reason", "declared_at"}`."""
    from semcheck.report.findings import fingerprints_by_violation

    dicts = [result_dict(r) for r in results]
    fingerprints = fingerprints_by_violation(results)  # what --baseline matches findings by
    for d, r in zip(dicts, results):
        for vd, v in zip(d["violations"], r.violations):
            vd["fingerprint"] = fingerprints[id(v)]
    for d, j in zip(dicts, judgements or []):
        d["expectation"] = {
            "expected": j.expected_text,
            "matched": j.matched,
            "reason": j.reason,
            "declared_at": j.expected.where if j.expected else None,
        }
    return json.dumps({"semcheck": __version__, "results": dicts}, indent=2)
