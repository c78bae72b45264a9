"""The one result type every engine returns, and every report renders."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from semcheck.ir import DataUse, Loc


class Verdict(str, enum.Enum):
    SAFE = "safe"
    VIOLATION = "violation"
    INCONCLUSIVE = "inconclusive"
    ERROR = "error"


# The CLI's exit code for a set of verdicts: the worst one decides.
EXIT_CODES = {Verdict.SAFE: 0, Verdict.VIOLATION: 1, Verdict.ERROR: 2, Verdict.INCONCLUSIVE: 3}
_SEVERITY_ORDER = [Verdict.SAFE, Verdict.INCONCLUSIVE, Verdict.VIOLATION, Verdict.ERROR]


def worst(verdicts) -> Verdict:
    return max(verdicts, key=_SEVERITY_ORDER.index, default=Verdict.SAFE)


class StepEvent(str, enum.Enum):
    """What a trace step did (its JSON `event`)."""

    SIGNAL = "signal"
    WAIT = "wait"
    DMA_WAIT = "dma_wait"
    READ = "read"
    DMA_START = "dma_start"
    DMA_SEND_DONE = "dma_send_done"
    DMA_RECV_DONE = "dma_recv_done"
    LOAD = "load"
    STORE = "store"
    BRANCH = "branch"
    JUMP = "jump"
    ASSIGN = "assign"
    ENTRY = "entry"
    EXIT = "exit"


@dataclass(frozen=True)
class RegionRef:
    """A rectangle of one buffer, as a step touched it: `out[2:3, 0:8, 0:128]@d1`."""

    buffer: str
    device: int | None  # whose memory (None: the step's own device)
    starts: tuple[int, ...]
    sizes: tuple[int, ...]

    def __str__(self) -> str:
        dims = ", ".join(f"{a}:{a + n}" for a, n in zip(self.starts, self.sizes))
        return f"{self.buffer}[{dims}]" + (f"@d{self.device}" if self.device is not None else "")


@dataclass(frozen=True)
class Completion:
    """What a DMA start schedules: on `side`, `amount` is added to `semaphore`."""

    side: str  # "send" or "recv"
    semaphore: str  # short label, e.g. "recv_sem@d1"
    amount: int


@dataclass
class TraceStep:
    """One step of a counterexample: who moved, what it did, where in the user's source."""

    index: int  # 1-based
    actor: str  # "device 1 core 0" or "DMA from device 0 (line 40)"
    device: int | None  # the lane this step belongs to
    core: int | None
    sub: int
    event: StepEvent  # signal, wait, dma_wait, read, dma_start, dma_send_done, dma_recv_done, ...
    text: str  # the step in words
    location: Loc | None
    semaphore: str | None = None  # short label of the semaphore touched, e.g. "recv@d1c0"
    before: int | None = None
    after: int | None = None
    fed_by: tuple[int, ...] = ()  # steps whose additions this wait consumed
    started_by: int | None = None  # for a DMA completion: the step that started the copy
    # How far the step is from the violation in its happens-before past (0: the violating
    # step; 1: the last step of a stuck thread, a change of the semaphore concerned; one
    # more per dependency), or None for a step the violation does not depend on. A trace
    # built without a slice has every step at 0.
    relevance: int | None = 0
    # What the step did, in fields (text, JSON, SARIF and graphs read these, never `text`):
    need: int | None = None  # a wait: the count (or bytes) it needs
    amount: int | None = None  # a signal or a completion: what it adds
    side: str | None = None  # a dma_wait or a completion: "send" or "recv"
    target_device: int | None = None  # a remote signal or copy: the device it goes to
    src: RegionRef | None = None  # a copy's source; a load's or store's region
    dst: RegionRef | None = None  # a copy's destination
    completions: tuple[Completion, ...] = ()  # a copy start: what its completions will add
    decrement: bool = True  # a wait: whether it takes what it waited for
    fault: str | None = None  # the step faulted: why
    # A kernel entry that reset semaphores holding a count: which, and the steps whose
    # additions it wiped (they never reach a wait).
    wiped: tuple[str, ...] = ()
    wiped_additions: tuple[int, ...] = ()
    # In a program of several kernels: the kernel the step belongs to (a completion: the
    # kernel that started the copy). None for a protocol of one kernel.
    kernel: str | None = None


@dataclass(frozen=True)
class BlockedWait:
    """A thread of a stuck state, at a wait it cannot pass."""

    thread: int  # the thread's index in the checked protocol
    device: int
    core: int
    sub: int
    name: str  # the thread as reports name it, e.g. "device 3" or "device 0 block 1"
    semaphore: str  # the semaphore it waits on, e.g. "barrier on device 3"
    short: str  # the same, as trace steps name it, e.g. "barrier@d3"
    sem: int  # the semaphore's instance id (the engine's; not part of any report)
    needs: int
    has: int
    location: Loc | None
    what: str  # the instruction, e.g. "semaphore_wait" or "dma_wait (recv side)"


@dataclass(frozen=True)
class Site:
    """A static site of the kernel that can change the semaphore a violation is about."""

    thread: str  # the thread whose instruction it is, e.g. "device 6"
    location: Loc | None
    what: str  # the instruction: "semaphore_signal", "dma_start", "semaphore_wait", "kernel entry"
    adds: bool  # adds to the semaphore (else takes from it)
    ran: int  # how often the trace runs it
    step: int | None  # the last trace step that ran it
    # Why a site that never ran did not: the thread is stuck before it, finished without
    # reaching it (a branch skipped it), or faulted. None when it ran.
    not_run: str | None = None


@dataclass(frozen=True)
class AbsentSite:
    """A source line that adds to the same semaphore array on other devices, but that some
    threads do not have at all: the usual shape of a forgotten or mis-guarded signal."""

    location: Loc
    what: str
    missing_on: tuple[str, ...]  # threads with no such instruction, e.g. ("device 0",)
    reaches: tuple[str, ...]  # the semaphores the line adds to on the threads that have it


@dataclass(frozen=True)
class MissingAction:
    """For a stuck wait or a leftover: what could change its semaphore, what ran, what did not."""

    semaphore: str  # as trace steps name it, e.g. "barrier@d7"
    needs: int | None  # what the wait needs (None for a leftover)
    has: int  # what it holds in the final state (a leftover found at a later entry: just before it)
    sites: tuple[Site, ...]
    absent: tuple[AbsentSite, ...] = ()
    in_flight: int = 0  # what copies still landing will add to it (a leftover found at a later entry)


@dataclass(repr=False)
class Violation:
    kind: str
    severity: str  # "error" or "warning"
    message: str
    device: int | None
    core: int | None
    location: Loc | None
    trace: list[TraceStep] = field(default_factory=list)
    # For stuck states: every blocked wait, and the wait-for cycle when there is one.
    blocked: list[BlockedWait] = field(default_factory=list)
    cycle: list[int] = field(default_factory=list)  # indices into `blocked`
    # The value of every protocol input in the counterexample (its initial state).
    inputs: dict[str, int] = field(default_factory=dict)
    related: list[Loc] = field(default_factory=list)  # e.g. the other access of a data race
    semaphore: str | None = None  # short label of the semaphore concerned, as steps name it
    # The semaphore's declared name (no index, no device): the same at every device count,
    # so one problem found at 2, 4 and 8 devices groups into one report.
    semaphore_name: str | None = None
    # The trace step that started the copy in flight: a data race's, or a leftover's still landing.
    racing_step: int | None = None
    loop_from: int | None = None  # for a loop that spins for ever: the trace repeats from this step on
    # For a stuck wait (each root wait) or a leftover: the sites that could change its semaphore.
    missing: list[MissingAction] = field(default_factory=list)
    hint: str | None = None  # how such a bug is usually fixed
    # What makes two findings one violation (the finding's key): merging the Results of
    # independent parts keeps one per identity. Not part of any report.
    identity: tuple | None = field(default=None, repr=False, compare=False)
    at_end: bool = field(default=False, repr=False, compare=False)  # judged where nothing can move

    def __repr__(self) -> str:
        where = f" at {self.location}" if self.location else ""
        who = f" (device {self.device})" if self.device is not None else ""
        return f"<Violation {self.kind}{who}{where}: {len(self.trace)} trace steps>"


@dataclass
class Stats:
    states: int = 0
    transitions: int = 0
    seconds: float = 0.0
    peak_memory_mb: float | None = None
    # The z3 engine stores no states; it reports the size of its encoding and its queries.
    encoded_events: int | None = None
    solver_queries: int | None = None
    # The explicit engine: the states it stored (none of a one-path stretch) and the bytes its
    # store held for them (engines/explicit/store.py), the search's own per-state records included.
    stored_states: int | None = None
    store_bytes: int | None = None


@dataclass
class EngineRun:
    """One engine's run within a check (`--engine auto` can run two side by side): its own
    verdict and stats, whether its verdict is the check's, and why it stopped early."""

    engine: str
    verdict: Verdict
    stats: Stats
    decided: bool = False
    stopped: str | None = None


@dataclass(repr=False)
class Result:
    kernel: str
    file: str
    line: int
    # Named as on the Protocol: the JSON and SARIF keep their older names for these
    # (`backend` holds the frontend, `semantics` the backend; report/json.py).
    frontend: str  # tpu, gpu or model (who produced the protocol: Protocol.frontend)
    backend: str  # tpu or gpu: whose rules were applied (Protocol.backend)
    devices: int
    cores: int
    engine: str
    verdict: Verdict
    violations: list[Violation] = field(default_factory=list)
    stats: Stats = field(default_factory=Stats)
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    invocations: int = 1  # back-to-back runs of the kernel on every device (--invocations)
    # How the end states the engine found ended ("clean", "stuck", "fault"): what merging
    # independent parts needs to know which end-state findings the whole protocol has.
    ends: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    exhausted: str | None = field(default=None, repr=False, compare=False)  # why the search stopped early
    runs: list[EngineRun] = field(default_factory=list)  # every engine that ran, when more than one did
    # Why the verdict is inconclusive when no budget ran out (a finding semcheck cannot justify).
    unjustified: str | None = None
    # The values deciding the protocol that were taken from the script's data (lower/data.py):
    # what the result holds for, beside the notes that say it in words.
    data_uses: tuple[DataUse, ...] = ()

    def __repr__(self) -> str:
        """One line: what was checked, the verdict, what was found and where."""
        cores = f" x {self.cores} cores" if self.cores > 1 else ""
        found = ", ".join(dict.fromkeys(
            f"{v.kind} at {v.location}" if v.location else v.kind for v in self.errors))
        detail = found or (self.error or "") if self.verdict is not Verdict.SAFE else ""
        work = f"{self.stats.states:,} states" if self.stats.solver_queries is None else (
            f"{self.stats.solver_queries:,} solver queries")
        return (f"<Result {self.kernel} [{self.devices} devices{cores}, {self.backend}]: "
                f"{self.verdict.value.upper()}{': ' + detail if detail else ''} ({work}, {self.engine})>")

    def _repr_html_(self) -> str:
        """A notebook shows the text report with each counterexample drawn inline (SVG)."""
        from semcheck.report import html as html_report

        return html_report.render(self)

    @property
    def errors(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == "error"]

    @property
    def warnings(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == "warning"]
