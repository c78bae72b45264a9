"""Fold what a report would otherwise list one by one: device lists ("on every device",
"devices 0-3") and a counterexample's steps (the steps a violation depends on most are
shown; the runs between them fold into one line each, a completed handshake into
"barrier_semaphore handshake", the rest by what they did and where)."""

from __future__ import annotations

from typing import Iterable

from semcheck.records import record
from semcheck.result import StepEvent, TraceStep, Violation

# How many steps of a trace are shown, at most: the rest fold.
SHOWN_STEPS = 10
_SUMMARY_PARTS = 3


def ranges(numbers: Iterable[int]) -> str:
    """ "0-3, 5, 7-8" for [0, 1, 2, 3, 5, 7, 8]."""
    out: list[str] = []
    run: list[int] = []
    for n in sorted(set(numbers)):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(_run_text(run))
        run = [n]
    if run:
        out.append(_run_text(run))
    return ", ".join(out)


def _run_text(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" if len(run) > 2 else f"{run[0]}, {run[1]}"


def devices_text(devices: Iterable[int], total: int = 0) -> str:
    """ "every device", "device 3", "devices 0-3" for the devices `devices` of a mesh of `total`."""
    seen = sorted(set(devices))
    if total > 1 and seen == list(range(total)):
        return "every device"
    if len(seen) == 1:
        return f"device {seen[0]}"
    return f"devices {ranges(seen)}"


@record(frozen=True)
class Fold:
    """A run of steps shown as one line."""

    first: int
    last: int
    count: int
    summary: str


def fold_trace(v: Violation, devices: int, limit: int = SHOWN_STEPS) -> tuple[list[TraceStep | Fold], int]:
    """The steps of `v`'s trace to show (at most `limit`: the ones it depends on most) with
    the runs of its other causal steps between them folded; and how many steps were left
    out for not being in its causal past at all."""
    relevant = [s for s in v.trace if s.relevance is not None]
    key = _key_steps(v, relevant, limit)
    out: list[TraceStep | Fold] = []
    run: list[TraceStep] = []
    for s in relevant:
        if s.index in key:
            if run:
                out.append(_fold(run, devices))
                run = []
            out.append(s)
        else:
            run.append(s)
    if run:
        out.append(_fold(run, devices))
    return out, len(v.trace) - len(relevant)


def _key_steps(v: Violation, relevant: list[TraceStep], limit: int) -> set[int]:
    """The steps that explain the violation: those its root cause names (`RootCause.steps`),
    the violating ones (a race's copy in flight too), what fed the waits among them and
    where the copies that fed them started, then the closest others in its causal past,
    `limit` in all at most."""
    by_index = {s.index: s for s in v.trace}
    key: dict[int, int] = {}
    for index in (v.cause.steps if v.cause is not None else ()):
        key.setdefault(index, 0)
    for s in relevant:
        if s.relevance == 0:
            key.setdefault(s.index, 0)
    if v.racing_step is not None:
        key.setdefault(v.racing_step, 0)
    if v.cause is None:  # no cause to show: what fed the waits closest to the violation
        for index in list(key):
            step = by_index[index]
            for fed in step.fed_by[-2:]:
                key.setdefault(fed, 1)
                started = by_index[fed].started_by
                if started is not None:
                    key.setdefault(started, 2)
    for s in sorted(relevant, key=lambda s: (s.relevance or 0, -s.index)):
        if len(key) >= limit:
            break
        key.setdefault(s.index, 3)
    return set(sorted(key, key=lambda i: (key[i], -i))[:limit])


def _fold(run: list[TraceStep], devices: int) -> Fold:
    return Fold(run[0].index, run[-1].index, len(run), summarize(run, devices))


def summarize(run: list[TraceStep], devices: int) -> str:
    """What a run of steps did, by kind and line: "every device entered; barrier_semaphore
    handshake on every device; copies started at line 59 (devices 0-3)"."""
    parts: list[str] = []
    entered = [s.device for s in run if s.event is StepEvent.ENTRY and s.device is not None]
    if entered:
        parts.append(f"{devices_text(entered, devices)} entered")
    handshakes = _handshakes(run)
    for decl, waiters in handshakes.items():
        parts.append(f"{decl} handshake ({devices_text(waiters, devices)})")
    groups: dict[tuple, list[TraceStep]] = {}
    for s in run:
        if s.event is StepEvent.ENTRY or (s.declaration in handshakes and s.event in (StepEvent.SIGNAL, StepEvent.WAIT)):
            continue
        groups.setdefault((_verb(s), s.location.line if s.location else 0), []).append(s)
    by_verb: dict[str, list[tuple[int, list[TraceStep]]]] = {}
    for (verb, line), steps in sorted(groups.items(), key=lambda item: (min(s.index for s in item[1]), item[0][1])):
        by_verb.setdefault(verb, []).append((line, steps))
    for verb, lines in by_verb.items():
        lines.sort()
        where = ", ".join(str(line) for line, _ in lines[:3]) + (" ..." if len(lines) > 3 else "")
        who = devices_text([s.device for _, steps in lines for s in steps if s.device is not None], devices)
        parts.append(f"{verb} at line{'s' if len(lines) > 1 else ''} {where} ({who})")
    if len(parts) > _SUMMARY_PARTS:
        parts = parts[: _SUMMARY_PARTS - 1] + [f"{len(parts) - _SUMMARY_PARTS + 1} more kinds of step"]
    return "; ".join(parts)


def _handshakes(run: list[TraceStep]) -> dict[str, list[int]]:
    """The semaphore declarations that the run signals and waits on until every instance it
    touched is back where it started: {declaration: the devices that waited}."""
    out: dict[str, list[int]] = {}
    touched: dict[str, dict[str, int]] = {}
    waiters: dict[str, list[int]] = {}
    for s in run:
        if s.declaration is None or s.event not in (StepEvent.SIGNAL, StepEvent.WAIT):
            continue
        if s.before is None or s.after is None or s.semaphore is None:
            continue
        counts = touched.setdefault(s.declaration, {})
        counts[s.semaphore] = counts.get(s.semaphore, 0) + s.after - s.before
        if s.event is StepEvent.WAIT and s.device is not None:
            waiters.setdefault(s.declaration, []).append(s.device)
    for decl, counts in touched.items():
        if decl in waiters and not any(counts.values()):
            out[decl] = waiters[decl]
    return out


_VERBS = {
    StepEvent.SIGNAL: "signals",
    StepEvent.WAIT: "waits",
    StepEvent.DMA_WAIT: "DMA waits",
    StepEvent.READ: "semaphore reads",
    StepEvent.DMA_START: "copies started",
    StepEvent.DMA_SEND_DONE: "copies left",
    StepEvent.DMA_RECV_DONE: "copies landed",
    StepEvent.LOAD: "loads",
    StepEvent.STORE: "stores",
    StepEvent.BRANCH: "branches",
    StepEvent.JUMP: "jumps",
    StepEvent.ASSIGN: "assignments",
    StepEvent.EXIT: "exits",
}


def _verb(s: TraceStep) -> str:
    if s.event in (StepEvent.SIGNAL, StepEvent.WAIT, StepEvent.DMA_WAIT) and s.declaration:
        return f"{_VERBS[s.event]} on {s.declaration}"
    return _VERBS.get(s.event, s.event.value)
