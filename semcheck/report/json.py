"""`--format json`: one object, `{"semcheck": version, "results": [...]}` (the JSON contract in docs/formats.md)."""

from __future__ import annotations

import json
from typing import overload

from semcheck.ir import DataUse, Loc, display_path
from semcheck.report import groups
from semcheck.report.text import no_verdict_reason
from semcheck.result import BlockedWait, MissingAction, Result, RootCause, TraceStep, Violation
from semcheck.version import __version__


@overload
def location(loc: Loc) -> dict: ...
@overload
def location(loc: None) -> None: ...
@overload
def location(loc: Loc | None) -> dict | None: ...


def location(loc: Loc | None) -> dict | None:
    """{"file", "line"}, and for a line in a helper the kernel calls, "calls": the calls that
    led there (the helper's caller first, the kernel body's line last; ir.Loc.chain)."""
    if loc is None:
        return None
    out: dict = {"file": display_path(loc.file), "line": loc.line}
    if loc.chain:
        out["calls"] = [{"file": display_path(f.file), "line": f.line, "function": f.function} for f in loc.chain]
    return out


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
        "declaration": step.declaration,
        "before": step.before,
        "after": step.after,
        "fed_by": list(step.fed_by),
        "started_by": step.started_by,
        "relevance": step.relevance,  # distance from the violation in its causal past; null: not in it
        **_step_details(step),
    }


def _region_dict(region) -> dict | None:
    if region is None:
        return None
    return {"buffer": region.buffer, "device": region.device, "starts": list(region.starts),
            "sizes": list(region.sizes)}


def _step_details(step: TraceStep) -> dict:
    """The step's structured fields that apply to it (a wait's need, a copy's regions, ...)."""
    details = {
        "need": step.need,
        "amount": step.amount,
        "side": step.side,
        "target_device": step.target_device,
        "src": _region_dict(step.src),
        "dst": _region_dict(step.dst),
        "fault": step.fault,
        # where the lowering made the semaphore: how `text` names it (`semaphore` keeps the model's name)
        "semaphore_shown_as": step.semaphore_shown_as,
        "kernel": step.kernel,  # in a program of several kernels: the one the step belongs to
        "invocation": step.invocation,  # where threads run several invocations: the step's
    }
    out: dict[str, object] = {key: value for key, value in details.items() if value is not None}
    if step.event in ("wait",) and not step.decrement:
        out["decrement"] = False
    if step.completions:
        out["completions"] = [{"side": c.side, "semaphore": c.semaphore, "amount": c.amount}
                              for c in step.completions]
    if step.wiped:
        out["wiped"] = list(step.wiped)
        out["wiped_additions"] = list(step.wiped_additions)
    return out


def blocked_dict(b: BlockedWait) -> dict:
    """A blocked wait, with the keys the JSON contract has always had (no instance id)."""
    return {
        "thread": b.thread,
        "device": b.device,
        "core": b.core,
        "sub": b.sub,
        "name": b.name,
        "semaphore": b.semaphore,
        "short": b.short,
        "semaphore_shown_as": b.shown or None,
        "needs": b.needs,
        "has": b.has,
        "location": location(b.location),
        "what": b.what,
    }


def missing_dict(m: MissingAction) -> dict:
    return {
        "semaphore": m.semaphore,
        **({"semaphore_shown_as": m.semaphore_shown_as} if m.semaphore_shown_as else {}),
        "needs": m.needs,
        "has": m.has,
        "in_flight": m.in_flight,
        "sites": [
            {"thread": s.thread, "location": location(s.location), "what": s.what, "adds": s.adds,
             "ran": s.ran, "step": s.step, "not_run": s.not_run, "device": s.device, "core": s.core}
            for s in m.sites
        ],
        "absent": [
            {"location": location(a.location), "what": a.what, "missing_on": list(a.missing_on),
             "reaches": list(a.reaches)}
            for a in m.absent
        ],
    }


def cause_dict(c: RootCause) -> dict:
    """A root cause: its kind, lines and offsets, and the same in words (`statement`, `fix`)."""
    from semcheck.report import causes

    return {
        "kind": c.kind.value,
        "site": location(c.site),
        "semaphore": c.semaphore,
        "semaphore_shown_as": c.semaphore_shown_as,
        "sides": list(c.sides),
        "last_only": c.last_only,
        "local": c.local,
        "wait": location(c.wait),
        "by": location(c.by),
        "writer": location(c.writer),
        "buffer": c.buffer,
        "by_offset": c.by_offset,
        "want_offset": c.want_offset,
        "before": location(c.before),
        "writer_signals": c.writer_signals,
        "kernels": list(c.kernels),
        "invocations": list(c.invocations),
        "events": [e.value for e in c.events],
        "needs": [location(n) for n in c.needs],
        "lets_go": location(c.lets_go),
        "pipeline": c.pipeline.value if c.pipeline is not None else None,
        "waited_with": c.waited_with.value if c.waited_with is not None else None,
        "steps": list(c.steps),
        "statement": causes.statement(c),
        "fix": causes.fix(c),
    }


def violation_dict(v: Violation) -> dict:
    out: dict[str, object] = {
        "kind": v.kind,
        "severity": v.severity,
        "message": v.message,
        "device": v.device,
        "core": v.core,
        "location": location(v.location),
        "trace": [step_dict(s) for s in v.trace],
    }
    if v.blocked:
        out["blocked"] = [blocked_dict(b) for b in v.blocked]
    if v.cycle:
        out["cycle"] = v.cycle
    if v.inputs:
        out["inputs"] = dict(v.inputs)
    if v.related:
        out["related"] = [location(loc) for loc in v.related]
    if v.semaphore:
        out["semaphore"] = v.semaphore
    if v.missing:
        out["missing"] = [missing_dict(m) for m in v.missing]
    if v.hint:
        out["hint"] = v.hint
    if v.cause is not None:
        out["cause"] = cause_dict(v.cause)
    if v.loop_from is not None:
        out["loop_from"] = v.loop_from  # the trace's steps from here on repeat for ever
    if v.found_by:
        out["found_by"] = list(v.found_by)  # the engines that found it; the trace is the first one's
    if v.rests_on:
        out["rests_on"] = [{"rule": r.rule, "switch": r.switch} for r in v.rests_on]
    return out


def _caused_by(r: Result, v: Violation) -> dict | None:
    """The root cause of a consequence: its index in the result's violations (null when a
    filter such as --baseline left it out), kind and location."""
    cause = v.caused_by
    if cause is None:
        return None
    index = next((i for i, w in enumerate(r.violations) if w is cause), None)
    return {"index": index, "kind": cause.kind, "location": location(cause.location)}


def result_dict(r: Result) -> dict:
    return {
        "kernel": r.kernel,
        "file": display_path(r.file),
        "line": r.line,
        # The contract's names (DESIGN.md): "backend" is who produced the protocol.
        "backend": r.frontend,
        "semantics": r.backend,
        "devices": r.devices,
        "cores": r.cores,
        "engine": r.engine,
        "verdict": r.verdict.value,
        "violations": [{**violation_dict(v), **({"caused_by": _caused_by(r, v)} if v.caused_by else {})}
                       for v in r.violations],
        "first_only": r.first_only,  # stopped at the first counterexample (--exhaustive: every finding)
        "stats": {
            "states": r.stats.states,
            "transitions": r.stats.transitions,
            "seconds": r.stats.seconds,
            **_solver_stats(r),
            **_store_stats(r),
            **_engine_runs(r),
        },
        "error": r.error,
        "inconclusive_reason": inconclusive_reason(r),
        "notes": r.notes,
        "data_uses": [data_use_dict(u) for u in r.data_uses],
        "values": values_dict(r),
    }


def inconclusive_reason(r: Result) -> dict | None:
    """Why an inconclusive check has no verdict: `kind` (result.NoVerdictKind), the limit
    that stopped it where one did (`stopped_by`, result.StoppedBy: which option to raise)
    and the `message` the text report gives; null for any other verdict."""
    reason = r.no_verdict
    if reason is None:
        return None
    stopped_by = reason.stopped_by.value if reason.stopped_by is not None else None
    return {"kind": reason.kind.value, "stopped_by": stopped_by, "message": no_verdict_reason(reason)}


def values_dict(r: Result) -> dict:
    """What the verdict holds for (result.CheckedValues): the operands whose script values
    decided the protocol, and every input checked over a range."""
    return {
        "script": list(r.values.script),
        "ranges": [{"name": i.name, "lo": i.lo, "hi": i.hi, "assumed": i.assumed} for i in r.values.ranges],
        "withheld": list(r.values.withheld),
        "fed": [{"operand": f.buffer, "producer": f.producer,
                 "through": [{"op": s.op, "location": location(s.loc)} for s in f.through]} for f in r.values.fed],
    }


def data_use_dict(use: DataUse) -> dict:
    """A value deciding the protocol that was computed from buffer contents (ir.DataUse)."""
    return {
        "what": use.what,
        "location": location(use.loc),
        "device": use.device,
        "core": use.core,
        "value": use.value,
        "script_inputs": list(use.script_inputs),
        "buffers": list(use.buffers),
    }


def _solver_stats(r: Result) -> dict:
    """The z3 engine stores no states (states and transitions are 0); it says instead how
    big its encoding was and how many queries it took."""
    if r.stats.solver_queries is None:
        return {}
    return {"encoded_events": r.stats.encoded_events, "solver_queries": r.stats.solver_queries}


def _store_stats(r: Result) -> dict:
    """The explicit engine: how many states it stored and the bytes its store held for
    them (states on a one-path stretch are visited, not stored), and of those bytes the
    ones that do not grow with the states."""
    if r.stats.stored_states is None:
        return {}
    return {"stored_states": r.stats.stored_states, "store_bytes": r.stats.store_bytes,
            "store_fixed_bytes": r.stats.store_fixed_bytes}


def _engine_runs(r: Result) -> dict:
    """With `--engine auto` running two engines side by side, each one's own verdict and
    stats (the check's stats above add them up)."""
    if not r.runs:
        return {}
    return {"engines": [
        {
            "engine": run.engine,
            "verdict": run.verdict.value,
            "decided": run.decided,
            "states": run.stats.states,
            "transitions": run.stats.transitions,
            "seconds": run.stats.seconds,
            **({} if run.stats.solver_queries is None else
               {"encoded_events": run.stats.encoded_events, "solver_queries": run.stats.solver_queries}),
            "stopped": run.stopped,
        }
        for run in r.runs
    ]}


def render(results: list[Result], *, judgements=None) -> str:
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
    return json.dumps({"semcheck": __version__, "results": dicts, "groups": groups_list(results)}, indent=2)


def groups_list(results: list[Result]) -> list[dict]:
    """The `groups` view beside `results`: each distinct problem once, with every check it
    was found in (indices into `results` and its `violations`) and the one the text report
    shows in full (the smallest counterexample)."""
    out = []
    for g in groups.group(results):
        shown = results[g.shown.result].violations[g.shown.violation]
        out.append({
            "kernel": g.key.kernel,
            "file": display_path(g.key.file),
            "kind": g.key.kind,
            "severity": shown.severity,
            "location": location(g.key.location),
            "semaphore": g.key.semaphore,
            "related": sorted((location(loc) for loc in g.key.related), key=lambda d: (d["file"], d["line"])),
            "kinds": groups.violation_kinds(results, g),  # what a root cause's problem was found as
            "cause": cause_dict(shown.cause) if g.key.cause is not None and shown.cause is not None else None,
            "shown": _ref_dict(results, g.shown),
            "checks": [_ref_dict(results, ref) for ref in g.refs],
        })
    return out


def _ref_dict(results: list[Result], ref) -> dict:
    r = results[ref.result]
    return {"result": ref.result, "violation": ref.violation, "devices": r.devices, "cores": r.cores,
            "invocations": r.invocations}
