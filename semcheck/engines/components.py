"""Independent parts: check threads that can never affect each other one group at a time.

Two threads belong to one part when their footprints from the start (every semaphore
instance and memory cell either may ever touch, through its own instructions or the copies
it starts, `System.futures`) share an instance or a cell, or when both read one protocol
input. Threads of different parts then act on disjoint state, so every schedule of the
whole protocol is an interleaving of one schedule of each part, and back:

* a fault or hazard happens in a part exactly as it does in the whole;
* the whole is stuck or finished exactly when every part is, and whether a blocked wait is
  a deadlock or an unsatisfied wait depends only on the threads that may add to its
  semaphore, which are in its part; a leftover count sits on an instance only its part
  touches.

So the whole's findings are the union of the parts' findings (one per key, as in a single
run), and the whole is safe exactly when every part is. The search pays the sum of the parts'
states instead of their product: eight devices each running a grid barrier of their own are
eight small searches, not one search over every mix of their schedules.

Findings judged in an end state need more: the whole judges its end states as one (after a
fault it reports the fault, not what the fault left stuck; a leftover at exit only when no
wait is stuck), so a part's end-state finding is kept only when every other part can end
in a way that lets the whole see it (`merge`). Each engine says how the end states it found
ended (`Result.ends`); a part that never ends (a polling loop that spins forever) has no
end state, so, as in a single search, no other part's end-state finding is reported. When
a part's search stops early, its ends are the ones it found.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

from semcheck import ir
from semcheck.engines.merge import causes_first, merge_runs
from semcheck.engines.budget import Budget, ProgressFn, ProgressInfo
from semcheck.engines.common import describing
from semcheck.semantics.properties import CLEAN_END, STUCK_END, Kind
from semcheck.result import Result, Stats, StoppedBy, Verdict, Violation, verdict_of
from semcheck.semantics import System

# Run one engine on one System with one budget.
RunFn = Callable[[System, Budget, ProgressFn | None], Result]


def parts(system: System) -> list[tuple[int, ...]]:
    """The threads of each independent part, in thread order, parts ordered by first thread."""
    # Union-find over thread indices (a dozen lines; networkx's costs 0.2 s of start-up).
    leader = list(range(len(system.threads)))

    def find(t: int) -> int:
        while leader[t] != t:
            leader[t] = leader[leader[t]]
            t = leader[t]
        return t

    def join(owner: dict, resources, t: int) -> None:
        for resource in resources:
            a, b = find(owner.setdefault(resource, t)), find(t)
            if a != b:
                leader[max(a, b)] = min(a, b)

    # threads that share a semaphore instance or memory cell (`System.touchers`: resource ->
    # its threads, two arrays; a dict of every resource cost 200 MB for the ring at 1024)
    for _resource, threads in system.touchers:
        first = find(threads[0])
        for t in threads[1:]:
            a, b = first, find(t)
            if a != b:
                leader[max(a, b)] = min(a, b)
                first = min(a, b)
    by_input: dict[str, int] = {}
    for t in range(len(system.threads)):
        join(by_input, system.inputs_read(t), t)
    groups: dict[int, list[int]] = {}
    for t in range(len(system.threads)):
        groups.setdefault(find(t), []).append(t)
    return sorted(tuple(g) for g in groups.values())


def subprotocol(system: System, threads: tuple[int, ...]) -> ir.Protocol:
    """The protocol restricted to `threads`, with only the inputs they read."""
    read = {name for t in threads for name in system.inputs_read(t)}
    protocol = system.protocol
    return replace(
        protocol,
        threads=tuple(protocol.threads[t] for t in threads),
        inputs=tuple(i for i in protocol.inputs if i.name in read),
    )


def check_parts(
    system: System,
    groups: list[tuple[int, ...]],
    run: RunFn,
    budget: Budget,
    progress: ProgressFn | None,
    *,
    stop_at_first: bool = False,
) -> Result:
    """Check each part with `run` under what is left of one shared budget; merge the Results."""
    protocol = system.protocol
    started = time.monotonic()
    results: list[Result] = []
    states_before = 0
    stopped = None
    stopped_by: StoppedBy | None = None  # a budget that ran out between parts
    for number, threads in enumerate(groups, 1):
        elapsed = time.monotonic() - started
        if states_before >= budget.max_states or elapsed >= budget.timeout:
            stopped_by = StoppedBy.STATES if states_before >= budget.max_states else StoppedBy.TIME
            stopped = (
                f"state budget of {budget.max_states:,} states" if stopped_by is StoppedBy.STATES
                else f"time budget of {budget.timeout:g} s"
            ) + f" ran out after {number - 1} of {len(groups)} independent parts"
            break
        left = replace(budget, max_states=budget.max_states - states_before, timeout=budget.timeout - elapsed)
        part_progress = _labelled(progress, number, len(groups), states_before, elapsed)
        result = run(System(subprotocol(system, threads)), left, part_progress)
        _renumber(result, threads)
        results.append(result)
        states_before += result.stats.states
        if stop_at_first and any(not v.at_end for v in result.errors):
            stopped = f"stopped at the first violation, after {number} of {len(groups)} independent parts"
            break
    merged = merge(protocol, results, time.monotonic() - started, unchecked=len(groups) - len(results))
    merged.first_only = stop_at_first and merged.verdict is Verdict.VIOLATION
    if len(results) < len(groups):  # the parts not checked still have their static warnings
        merged.violations += _static_warnings(system, merged.violations)
    if stopped:
        merged.notes.append(f"{stopped}; no verdict for the parts not checked")
    if stopped_by is not None and merged.exhausted is None:
        merged.exhausted, merged.stopped_by = stopped, stopped_by
    devices = sorted({protocol.threads[t].device for threads in groups for t in threads})
    merged.notes.append(
        f"its {len(protocol.threads)} threads on {len(devices)} devices form {len(groups)} independent "
        "parts that share no semaphore, buffer or input; each part was checked on its own "
        "(a schedule of the kernel interleaves one schedule of each), so a counterexample "
        "shows only its own part's steps"
    )
    return merged


def merge(protocol: ir.Protocol, results: list[Result], seconds: float, unchecked: int = 0) -> Result:
    """One Result for the whole protocol: the union of the parts' findings, one per key.

    A finding judged in an end state is the whole's only if every other part can end in a
    way that lets the whole judge it: a stuck wait needs the others to end without a fault
    (after a fault, a single search reports the fault, not what it left stuck), a leftover
    at exit needs them to end with every thread finished (a stuck kernel never exits). Of the
    `unchecked` parts nothing is known, so no end-state finding is kept beside them."""
    chosen: dict[object, Violation] = {}
    for number, result in enumerate(results):
        others = [r.ends for k, r in enumerate(results) if k != number] + [frozenset()] * unchecked
        stuck_ok = all(ends & {CLEAN_END, STUCK_END} for ends in others)
        exit_ok = all(CLEAN_END in ends for ends in others)
        for v in result.violations:
            if v.at_end and not (exit_ok if v.kind == Kind.SEMAPHORE_LEFTOVER.value else stuck_ok):
                continue
            key = v.identity if v.identity is not None else id(v)
            if key not in chosen or len(v.trace) < len(chosen[key].trace):
                chosen[key] = v
    violations = causes_first(sorted(chosen.values(), key=lambda v: (v.severity != "error", len(v.trace))))
    # a part whose only errors were end-state findings the whole does not have is safe
    verdict = verdict_of(violations, complete=not unchecked and not any(
        r.exhausted or r.verdict is Verdict.INCONCLUSIVE for r in results))
    notes: list[str] = []
    for result in results:
        notes += [n for n in result.notes if n not in notes]
    stopped_part = next((r for r in results if r.exhausted), None)
    stopped = stopped_part.exhausted if stopped_part else None
    return Result(
        **describing(protocol),
        engine="+".join(sorted({r.engine for r in results})) or "none",
        verdict=verdict,
        violations=violations,
        stats=Stats(
            states=sum(r.stats.states for r in results),
            transitions=sum(r.stats.transitions for r in results),
            seconds=round(seconds, 4),
            peak_memory_mb=max((r.stats.peak_memory_mb or 0.0 for r in results), default=0.0) or None,
            encoded_events=_sum_known(r.stats.encoded_events for r in results),
            solver_queries=_sum_known(r.stats.solver_queries for r in results),
            stored_states=_sum_known(r.stats.stored_states for r in results),
            store_bytes=_sum_known(r.stats.store_bytes for r in results),
            store_fixed_bytes=_sum_known(r.stats.store_fixed_bytes for r in results),
        ),
        notes=notes,
        runs=merge_runs(results),
        exhausted=stopped,
        stopped_by=stopped_part.stopped_by if stopped_part else None,
    )


def _static_warnings(system: System, have: list[Violation]) -> list[Violation]:
    """The whole protocol's static findings (`properties.static_findings`) not in `have`."""
    from semcheck.engines.violations import to_violation
    from semcheck.semantics.properties import static_findings

    known = {v.identity for v in have}
    return [to_violation(system, f, None, []) for f in static_findings(system) if f.key not in known]


def _sum_known(values) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _renumber(result: Result, threads: tuple[int, ...]) -> None:
    """A part's blocked waits name threads by their index in the part; give them the whole's."""
    for v in result.violations:
        v.blocked = [replace(b, thread=threads[b.thread]) for b in v.blocked]


def _labelled(
    progress: ProgressFn | None, number: int, count: int, states_before: int, seconds_before: float
) -> ProgressFn | None:
    """A part's progress as the whole check's: states and seconds so far, and which part."""
    if progress is None:
        return None

    def report(info: ProgressInfo) -> None:
        progress(replace(
            info, states=info.states + states_before, seconds=info.seconds + seconds_before,
            part=f"part {number} of {count}",
        ))

    return report
