"""The findings and work of several engine runs of one check, as one Result's.

`--engine auto` runs several engines on one check (`auto.py`); each hands back its own
Result. The check's Result holds the findings of every one of them: one violation per
identity (the finding's key), with the shortest trace any engine found for it and the
names of every engine that found it (`Violation.found_by`, the shown trace's engine first),
each consequence linked to its root cause again (`relink`) and placed after it (`causes_first`).
"""

from __future__ import annotations

from dataclasses import replace

from semcheck.result import EngineRun, Result, Stats, Violation, worst


def merge_violations(results: list[Result]) -> list[Violation]:
    """Every violation of `results`, one per identity (violations without one, such as the
    static warnings, once per message), errors first."""
    chosen: dict[object, Violation] = {}
    found_by: dict[object, list[str]] = {}
    for result in results:
        for v in result.violations:
            key: object = v.identity if v.identity is not None else (v.kind, v.message, v.location)
            engines = found_by.setdefault(key, [])
            engines += [e for e in v.found_by if e not in engines]  # none for a static finding
            if key not in chosen or len(v.trace) < len(chosen[key].trace):
                chosen[key] = v
    merged = []
    for key, v in chosen.items():
        shown = v.found_by[:1]
        merged.append(replace(v, found_by=shown + tuple(e for e in found_by[key] if e not in shown)))
    relink(merged)
    merged.sort(key=lambda v: (v.severity != "error", v.identity is None, len(v.trace)))
    return causes_first(merged)


def combine_stats(stats: list[Stats], seconds: float) -> Stats:
    """The work of several engine runs of one check: states and queries add up, memory is
    the peak of any, seconds are the check's own (the runs overlap)."""
    def known(values):
        values = [v for v in values if v is not None]
        return sum(values) if values else None

    peaks = [s.peak_memory_mb for s in stats if s.peak_memory_mb is not None]
    return Stats(
        states=sum(s.states for s in stats),
        transitions=sum(s.transitions for s in stats),
        seconds=round(seconds, 4),
        peak_memory_mb=max(peaks) if peaks else None,
        encoded_events=known(s.encoded_events for s in stats),
        solver_queries=known(s.solver_queries for s in stats),
        stored_states=known(s.stored_states for s in stats),
        store_bytes=known(s.store_bytes for s in stats),
        store_fixed_bytes=known(s.store_fixed_bytes for s in stats),
    )


def merge_runs(results: list[Result]) -> list[EngineRun]:
    """The engine runs of a check made of independent parts: one per engine, adding up the
    parts' work (empty when no part ran two engines)."""
    if not any(r.runs for r in results):
        return []
    by_engine: dict[str, list[EngineRun]] = {}
    for r in results:
        for run in r.runs or [EngineRun(r.engine, r.verdict, r.stats, decided=True, stopped=r.exhausted)]:
            by_engine.setdefault(run.engine, []).append(run)
    return [
        EngineRun(
            engine, worst(run.verdict for run in runs),
            combine_stats([run.stats for run in runs], sum(run.stats.seconds for run in runs)),
            decided=any(run.decided for run in runs),
            stopped=next((run.stopped for run in runs if run.stopped), None),
        )
        for engine, runs in by_engine.items()
    ]


def causes_first(violations: list[Violation]) -> list[Violation]:
    """`violations` in their order, except that each consequence comes right after its
    cause (and a cause no later than its first consequence)."""
    consequences: dict[int, list[Violation]] = {}
    present = {id(v) for v in violations}
    for v in violations:
        if v.caused_by is not None and id(v.caused_by) in present:
            consequences.setdefault(id(v.caused_by), []).append(v)
    out: list[Violation] = []
    placed: set[int] = set()

    def place(v: Violation) -> None:
        if id(v) in placed:
            return
        placed.add(id(v))
        out.append(v)
        for c in consequences.get(id(v), ()):
            place(c)

    for v in violations:
        root, seen = v, {id(v)}
        while (root.caused_by is not None and id(root.caused_by) in present and id(root.caused_by) not in placed
               and id(root.caused_by) not in seen):
            root = root.caused_by
            seen.add(id(root))
        place(root)
        place(v)
    return out


def relink(violations: list[Violation]) -> None:
    """After merging the violations of several runs (one per identity kept): point each
    consequence at the kept violation of its cause's identity."""
    kept = {v.identity: v for v in violations if v.identity is not None}
    for v in violations:
        cause = v.caused_by
        if cause is not None and cause.identity in kept:
            v.caused_by = kept[cause.identity]
