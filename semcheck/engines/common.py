"""What every engine hands back before it becomes a Result: findings with the paths that
reach them, counts, and whether a budget ran out."""

from __future__ import annotations

from dataclasses import field

from semcheck.records import record
from semcheck.semantics.properties import SEVERITY, Finding, static_findings
from semcheck.result import Result, Stats, StoppedBy, Verdict, Violation, verdict_of
from semcheck.semantics import Action, State, System


@record
class Exploration:
    system: System
    findings: dict[tuple, tuple[Finding, State, list[Action]]] = field(default_factory=dict)
    states: int = 0
    transitions: int = 0
    seconds: float = 0.0
    peak_memory_mb: float | None = None
    exhausted: str | None = None  # why the search stopped early, if it did
    stopped_by: StoppedBy | None = None  # which limit that was
    encoded_events: int | None = None  # z3: instruction occurrences and DMA completions
    solver_queries: int | None = None  # z3: how many satisfiability checks it took
    stored_states: int | None = None  # explicit: the states it stored (a one-path stretch stores none)
    store_bytes: int | None = None  # explicit: what its store held for them
    store_fixed_bytes: int | None = None  # explicit: of those, what grows with the protocol, not the states
    ends: set[str] = field(default_factory=set)  # how the end states found ended (properties.end_kind)
    notes: list[str] = field(default_factory=list)  # what the engine's search rested on (e.g. symmetry)

    def add(self, finding: Finding, initial: State, actions: list[Action]) -> None:
        self.findings.setdefault(finding.key, (finding, initial, actions))

    @property
    def has_errors(self) -> bool:
        return any(SEVERITY[f.kind] == "error" for f, _, _ in self.findings.values())


def to_result(exploration: Exploration, engine: str, *, first_only: bool = False,
              shorten_paths: bool = False) -> Result:
    """The Result of one engine's run. `first_only`: the run stopped at its first
    counterexample, which alone is reported (with its root cause, `causes.py`).
    `shorten_paths`: the paths are not a breadth-first search's, so each is cut down to the
    steps its finding depends on (`causes.shorten`); `violations.py` makes the violations."""
    system = exploration.system
    protocol = system.protocol
    entries = list(exploration.findings.values())
    if first_only:
        entries = first_counterexample(entries)
    static = static_findings(system)
    violations: list[Violation] = []
    if entries or static:  # the violation path (traces, root causes) is imported only when taken
        from semcheck.engines.violations import violations_of

        violations = violations_of(system, entries, static, engine, shorten_paths=shorten_paths)
    verdict = verdict_of(violations, complete=not exploration.exhausted)
    notes = list(protocol.notes) + exploration.notes
    if exploration.exhausted:
        notes.append(stopped_early(exploration.exhausted, exploration.states, exploration.solver_queries))
    return Result(
        **describing(protocol),
        engine=engine,
        verdict=verdict,
        violations=violations,
        stats=Stats(
            states=exploration.states,
            transitions=exploration.transitions,
            seconds=round(exploration.seconds, 4),
            peak_memory_mb=exploration.peak_memory_mb,
            encoded_events=exploration.encoded_events,
            solver_queries=exploration.solver_queries,
            stored_states=exploration.stored_states,
            store_bytes=exploration.store_bytes,
            store_fixed_bytes=exploration.store_fixed_bytes,
        ),
        notes=notes,
        ends=frozenset(exploration.ends),
        exhausted=exploration.exhausted,
        stopped_by=exploration.stopped_by if exploration.exhausted else None,
        first_only=first_only and verdict is Verdict.VIOLATION,
    )


def stopped_early(reason: str, states: int, solver_queries: int | None) -> str:
    """The note of a run that stopped before it explored everything."""
    work = f"{solver_queries:,} solver queries" if solver_queries is not None else f"{states:,} states"
    return f"search stopped early: {reason} after {work}; no verdict for what was not explored"


Entry = tuple[Finding, State, list[Action]]


def first_counterexample(entries: list[Entry]) -> list[Entry]:
    """The first error found: what a check that stops at its first counterexample reports
    (one state can hold several, e.g. a leftover on every device at exit: the first stands
    for them, and `--exhaustive` lists each). Without an error, every finding."""
    first = next((e for e in entries if SEVERITY[e[0].kind] == "error"), None)
    return entries if first is None else [first]


def describing(protocol) -> dict:
    """The Result fields that say which kernel was checked, and how."""
    return dict(
        kernel=protocol.name,
        file=protocol.loc.file,
        line=protocol.loc.line,
        frontend=protocol.frontend,
        backend=protocol.backend.value,
        devices=protocol.devices,
        cores=protocol.cores,
    )
