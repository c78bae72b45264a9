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


def render(results: list[Result], **_options) -> str:
    return json.dumps({"semcheck": __version__, "results": [result_dict(r) for r in results]}, indent=2)
