"""The one result type every engine returns, and every report renders."""

from __future__ import annotations

import enum
from dataclasses import field
from typing import Callable, Iterable

from semcheck.ir import DataUse, FedOperand, Input, Loc, PipelineCopy
from semcheck.kinds import Kind, StoppedBy
from semcheck.records import record


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


def verdict_of(violations: Iterable["Violation"], *, complete: bool) -> Verdict:
    """The one rule every engine and every merge of results decides by: a violation when
    some finding is an error (it happens, whatever else was or was not explored); else safe
    when every schedule was covered (`complete`), and inconclusive when not."""
    if any(v.severity == "error" for v in violations):
        return Verdict.VIOLATION
    return Verdict.SAFE if complete else Verdict.INCONCLUSIVE


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


class NoVerdictKind(str, enum.Enum):
    """Why a check is inconclusive, as a type (the JSON's `inconclusive_reason.kind`); the
    words for it are `report.text.no_verdict_reason`'s."""

    NOT_LOADED = "not_loaded"  # it stopped before a protocol was built (a budget ran out while loading)
    SEARCH_STOPPED = "search_stopped"  # the search stopped early: a budget, or a construct the engine does not model
    UNJUSTIFIED = "unjustified"  # a finding semcheck cannot justify (Result.unjustified)
    INCOMPLETE = "incomplete"  # not every schedule was covered, with no other reason recorded


@record(frozen=True)
class NoVerdict:
    """Why a check is inconclusive (`Result.no_verdict`, the JSON's `inconclusive_reason`):
    its kind, what the result records for it (`detail`: the finding it cannot justify, or
    the budget or construct that stopped the search; None for INCOMPLETE) and the limit
    that stopped it where one did."""

    kind: NoVerdictKind
    detail: str | None
    stopped_by: StoppedBy | None


@record(frozen=True)
class RegionRef:
    """A rectangle of one buffer, as a step touched it: `out[2:3, 0:8, 0:128]@d1`."""

    buffer: str
    device: int | None  # whose memory (None: the step's own device)
    starts: tuple[int, ...]
    sizes: tuple[int, ...]

    def __str__(self) -> str:
        dims = ", ".join(f"{a}:{a + n}" for a, n in zip(self.starts, self.sizes))
        return f"{self.buffer}[{dims}]" + (f"@d{self.device}" if self.device is not None else "")


@record(frozen=True)
class Completion:
    """What a DMA start schedules: on `side`, `amount` is added to `semaphore`."""

    side: str  # "send" or "recv" (str of an ir.DmaSide: the JSON report's word)
    semaphore: str  # short label, e.g. "recv_sem@d1"
    amount: int


@record
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
    declaration: str | None = None  # that semaphore's declared name, e.g. "recv"
    # How `text` names that semaphore where the lowering made it (`ir.SemDecl.shown_as`),
    # e.g. "the fork into warps of a warp-level core_map (warp 1)"; None where the kernel
    # names it (`semaphore` is then what the text says).
    semaphore_shown_as: str | None = None
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
    side: str | None = None  # a dma_wait or a completion: "send" or "recv" (str of an ir.DmaSide)
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
    # Where threads run several kernel invocations (`--invocations`, a program): the
    # invocation of its thread the step belongs to (a completion: the one that started the
    # copy), counted from 1. None where every thread runs one.
    invocation: int | None = None


@record(frozen=True)
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
    # `short` as the thread's own trace steps say it where the lowering made the semaphore
    # (`ir.SemDecl.shown_as`: "the release from XLA's device barrier before the kernel");
    # empty where `short` is the author's name. `short` stays the key steps are matched by.
    shown: str = ""


@record(frozen=True)
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
    # The thread's device, and its core where a device has more than one thread (None:
    # the device's only thread): what lets a report fold "device 0, device 1, ..." lists.
    device: int | None = None
    core: int | None = None


@record(frozen=True)
class AbsentSite:
    """A source line that adds to the same semaphore array on other devices, but that some
    threads do not have at all: the usual shape of a forgotten or mis-guarded signal."""

    location: Loc
    what: str
    missing_on: tuple[str, ...]  # threads with no such instruction, e.g. ("device 0",)
    reaches: tuple[str, ...]  # the semaphores the line adds to on the threads that have it
    missing_devices: tuple[int, ...] = ()  # the devices of `missing_on`, where each is a device's only thread


@record(frozen=True)
class MissingAction:
    """For a stuck wait or a leftover: what could change its semaphore, what ran, what did not."""

    semaphore: str  # as trace steps name it, e.g. "barrier@d7"
    needs: int | None  # what the wait needs (None for a leftover)
    has: int  # what it holds in the final state (a leftover found at a later entry: just before it)
    sites: tuple[Site, ...]
    absent: tuple[AbsentSite, ...] = ()
    in_flight: int = 0  # what copies still landing will add to it (a leftover found at a later entry)
    # How the report names it where the lowering made it (`ir.SemDecl.shown_as`, with its
    # device): "the DMA semaphore of `pltpu.sync_copy` at line 27 on device 0"; None where
    # the kernel names it (`semaphore`).
    semaphore_shown_as: str | None = None


@record(frozen=True)
class Reading:
    """A disputed modelling rule a finding rests on, and the switch that takes the other one."""

    rule: str  # what the check assumed, in words
    switch: str | None  # the command-line switch that checks the other reading (None: none yet)


class CauseKind(str, enum.Enum):
    """The shapes of root cause semcheck names (`engines/diagnosis.py` finds them)."""

    UNWAITED_COPY = "unwaited_copy"  # a copy that no wait ever takes: `site` is its start
    UNCONSUMED_SIGNAL = "unconsumed_signal"  # a semaphore signalled and never waited on: `site` signals it
    WRONG_SIGNALLER = "wrong_signaller"  # a wait before a copy fed by another device than the one the copy writes
    WRONG_COPY = "wrong_copy"  # a reading wait satisfied by another copy than the one that writes the rows
    # a wait before an early copy or signal fed by a signal from another kernel of the program
    # that shares the semaphore (two kernels with one collective_id): `site` is that signal
    OTHER_KERNELS_SIGNAL = "other_kernels_signal"
    # a copy into rows of a peer's buffer started again with no word from that peer since the
    # last one into them (no capacity handshake): `site` is the copy's start, `buffer` what it writes
    NO_GO_AHEAD = "no_go_ahead"
    # an access (or a copy's start, or a signal that lets one go) that comes before the wait of
    # its own thread that would order it after the racing access: `site` is the wait, `before`
    # the early action, `by` the other access, `writer` the copy or signal the wait takes
    LATE_WAIT = "late_wait"
    # a decrementing wait left unsatisfied because other threads' waits at the same line took
    # the units it waited for (a barrier whose waits compete): `site` is the wait
    COMPETING_WAITS = "competing_waits"


class WaitCall(str, enum.Enum):
    """How the missing or misplaced wait is written in the kernel's API (a fix names it)."""

    SEMAPHORE_WAIT = "semaphore_wait"  # pl.semaphore_wait, or a TPU copy's .wait()
    BARRIER_WAIT = "barrier_wait"  # Mosaic GPU mbarrier: plgpu.barrier_wait
    TMA_STORE_WAIT = "tma_store_wait"  # Mosaic GPU TMA store: plgpu.wait_smem_to_gmem


@record(frozen=True)
class RootCause:
    """What one or more violations come from, and what to change: the same cause found on
    every device, at every device count, and behind several violations (a leftover and the
    races it lets happen) is one problem. Every field is a source line, a semaphore
    declaration or a device offset, so it is the same whatever device it was seen on."""

    kind: CauseKind
    site: Loc  # the copy's start (UNWAITED_COPY), the signal (UNCONSUMED_SIGNAL, WRONG_SIGNALLER), the wait (WRONG_COPY)
    semaphore: str | None = None  # the declaration concerned
    # How a statement names it where its name is not the author's (its `SemDecl.shown_as`):
    # empty where `semaphore` is shown as written
    semaphore_shown_as: str = ""
    # UNWAITED_COPY: the sides no wait takes ("send", "recv"), and whether only the copy's
    # last run is left (the wait at `wait` takes each earlier one: a loop's last copy).
    # WRONG_COPY: the side of the mistaken wait ("send": `writer` is a copy reading the rows).
    sides: tuple[str, ...] = ()
    last_only: bool = False
    # UNWAITED_COPY: every copy started at `site` is a local one (`pltpu.make_async_copy`:
    # one semaphore, awaited with `.wait()` by the thread that started it)
    local: bool = False
    wait: Loc | None = None  # the wait concerned (WRONG_SIGNALLER, WRONG_COPY; UNWAITED_COPY with last_only)
    by: Loc | None = None  # WRONG_COPY: the start of the copy that satisfied the wait
    writer: Loc | None = None  # WRONG_COPY: the copy that writes the rows; WRONG_SIGNALLER: the copy the wait guards
    buffer: str | None = None  # NO_GO_AHEAD: the peer's buffer the copy writes; LATE_WAIT: `pipeline`'s block
    # WRONG_SIGNALLER: whose signal fed the wait, and whose it needed (the device the copy
    # writes to), as offsets from the waiting device (+1: the next device); NO_GO_AHEAD:
    # `want_offset` is the peer the copy writes to
    by_offset: int | None = None
    want_offset: int | None = None
    before: Loc | None = None  # UNCONSUMED_SIGNAL: where a wait belongs (before this line)
    # WRONG_SIGNALLER, OTHER_KERNELS_SIGNAL: the early action is a signal, not a copy
    # (remote_before_entry of a signal); OTHER_KERNELS_SIGNAL: the two kernels
    writer_signals: bool = False
    kernels: tuple[str, ...] = ()  # (the waiter's kernel, the signaller's)
    # OTHER_KERNELS_SIGNAL found at the barrier wait itself (it passed on a later
    # invocation's signal): (the waiter's invocation, the signaller's), counted from 1
    invocations: tuple[int, ...] = ()
    # LATE_WAIT: what the early action and the other access do (LOAD, STORE, DMA_START, SIGNAL),
    # and the early thread's own signals after the early action that the wait needs (a commit
    # the tensor core waits for before it arrives): they move with the wait. NO_GO_AHEAD: the
    # peer's own use of the rows a first copy into them races (empty: a copy into them again)
    events: tuple[StepEvent, ...] = ()
    needs: tuple[Loc, ...] = ()
    lets_go: Loc | None = None  # LATE_WAIT whose early action is a signal: the racing access it lets go
    # LATE_WAIT whose early action is the Pallas pipeline's own copy of a block between grid
    # steps (located at the pallas_call, no line of the kernel's): which copy, and `buffer`
    # the block buffer (or HBM array) it touches
    pipeline: PipelineCopy | None = None
    # Mosaic GPU: how the wait the fix names is written (None: a TPU or plain semaphore wait)
    waited_with: WaitCall | None = None
    # The trace steps of the violation it was found from that show it (not part of `key`).
    steps: tuple[int, ...] = field(default=(), compare=False)

    @property
    def key(self) -> tuple:
        """What makes two violations one problem."""
        return (self.kind, self.site, self.semaphore, self.wait if self.kind is not CauseKind.UNWAITED_COPY else None,
                self.by, self.writer, self.by_offset, self.want_offset, self.kernels, self.invocations,
                self.before if self.kind is CauseKind.LATE_WAIT else None)


@record(repr=False)
class Violation:
    kind: Kind  # a kind's name (as JSON gives it) is taken too, and made the Kind
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
    cause: RootCause | None = None  # the root cause, where semcheck can name it (engines/diagnosis.py)
    # What makes two findings one violation (the finding's key): merging the Results of
    # independent parts keeps one per identity. Not part of any report.
    identity: tuple | None = field(default=None, repr=False, compare=False)
    at_end: bool = field(default=False, repr=False, compare=False)  # judged where nothing can move
    # The engines that found it (`--engine auto` runs several): the first one's trace is shown.
    found_by: tuple[str, ...] = ()
    # The violation its trace passes through first, which is its root cause (engines/causes.py):
    # a copy or signal that reached a peer before it entered, a fault, ... None: it is a cause
    # itself. The text report shows the cause first with this one folded under it; the JSON
    # names the cause's index in the result's violations.
    caused_by: "Violation | None" = field(default=None, repr=False, compare=False)
    # The disputed modelling readings this finding rests on, each with the switch that takes
    # the other reading (e.g. --no-assume-cores-enter-together): a user who accepts the
    # other reading reruns with it to see what else the kernel has.
    rests_on: tuple["Reading", ...] = ()

    def __post_init__(self) -> None:
        self.kind = Kind(self.kind)

    def __repr__(self) -> str:
        where = f" at {self.location}" if self.location else ""
        who = f" (device {self.device})" if self.device is not None else ""
        return f"<Violation {self.kind}{who}{where}: {len(self.trace)} trace steps>"


@record
class Stats:
    states: int = 0
    transitions: int = 0
    seconds: float = 0.0
    peak_memory_mb: float | None = None
    # The z3 engine stores no states; it reports the size of its encoding and its queries.
    encoded_events: int | None = None
    solver_queries: int | None = None
    # The explicit engine: the states it stored (none of a one-path stretch) and the bytes its
    # store held for them (engines/explicit/store.py), the search's own per-state records included;
    # of those, the tables that grow with the protocol and not with the states (the numbered completions).
    stored_states: int | None = None
    store_bytes: int | None = None
    store_fixed_bytes: int | None = None


@record
class EngineRun:
    """One engine's run within a check (`--engine auto` can run two side by side): its own
    verdict and stats, whether its verdict is the check's, and why it stopped early."""

    engine: str
    verdict: Verdict
    stats: Stats
    decided: bool = False
    stopped: str | None = None


@record(frozen=True)
class CheckedValues:
    """What the verdict holds for: the values the script passed for the operands in
    `script` (concrete, per device and per call, as the capture saw them: they decided the
    protocol), and every value of each input in `ranges` (one the user assumed, or every
    value of its type where semcheck had no value: docs/data-evaluation.md)."""

    script: tuple[str, ...] = ()
    ranges: tuple[Input, ...] = ()
    # Operands whose script values were not used: an earlier kernel's output may reach them
    # (the capture's zeros; the notes say on which devices and why).
    withheld: tuple[str, ...] = ()
    # Operands that start with an earlier kernel's outputs as semcheck's lowering of that
    # kernel computed them (lower/produced.py), not as the script passed them.
    fed: tuple[FedOperand, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.script or self.ranges or self.withheld or self.fed)


# The frontend and backend of a check that never built a protocol (its file failed to load,
# or the budget ran out while it loaded).
NO_PROTOCOL = "unknown"


@record(repr=False)
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
    stopped_by: StoppedBy | None = field(default=None, repr=False, compare=False)  # and which limit that was
    runs: list[EngineRun] = field(default_factory=list)  # every engine that ran, when more than one did
    # The check stopped at its first counterexample (the default; --exhaustive lists every
    # finding): other violations may exist beside the one reported.
    first_only: bool = False
    # Why the verdict is inconclusive when no budget ran out (a finding semcheck cannot justify).
    unjustified: str | None = None
    # The values deciding the protocol that were taken from the script's data (lower/data.py):
    # what the result holds for, beside the notes that say it in words.
    data_uses: tuple[DataUse, ...] = ()
    # Findings a --baseline knew and that were taken out of `violations`: a check left with
    # none is `safe` for the gate, but its report says it has known findings.
    known_findings: int = 0
    values: CheckedValues = field(default_factory=CheckedValues)
    # The kernel calls its protocol checks (`Protocol.calls`): what a later kernel fed one of
    # their outputs names (`FedOperand.producer_call`, run/checks.py `resting_on_producers`).
    calls: tuple[int, ...] = field(default=(), repr=False, compare=False)

    def __repr__(self) -> str:
        """One line: what was checked, the verdict, what was found and where."""
        cores = f" x {self.cores} cores" if self.cores > 1 else ""
        found = ", ".join(dict.fromkeys(
            f"{v.kind} at {v.location}" if v.location else v.kind for v in self.errors))
        detail = found or (self.error or "") if self.verdict is not Verdict.SAFE else ""
        work = f"{self.stats.states:,} states" if self.stats.solver_queries is None else (
            f"{self.stats.solver_queries:,} solver queries")
        # devices is 0 in the Result of a proof for every device count (--devices all)
        size = f"{self.devices} device{'s' if self.devices != 1 else ''}" if self.devices else "every device count"
        return (f"<Result {self.kernel} [{size}{cores}, {self.backend}]: "
                f"{self.verdict.value.upper()}{': ' + detail if detail else ''} ({work}, {self.engine})>")

    def report(self, **options) -> str:
        """The text report of this check, as `semcheck verify` prints it (options as
        `report.text.render`'s: `verbose=True` for every trace step and the notes)."""
        return _installed().text(self, **options)

    def __str__(self) -> str:
        """The text report: `assert result.verdict.value == "safe", result` shows what was found."""
        return self.report().rstrip("\n")

    def _repr_html_(self) -> str:
        """A notebook shows the text report with each counterexample drawn inline (SVG)."""
        return _installed().html(self)

    @property
    def no_verdict(self) -> NoVerdict | None:
        """Why the check is inconclusive (None when it is not), from the fields that record
        it: the one place that decides which reason a result has."""
        if self.verdict is not Verdict.INCONCLUSIVE:
            return None
        if self.unjustified:
            kind, detail = NoVerdictKind.UNJUSTIFIED, self.unjustified
        elif self.exhausted and not self.built:  # it ran out while the file loaded: there was no search
            kind, detail = NoVerdictKind.NOT_LOADED, self.exhausted
        elif self.exhausted:
            kind, detail = NoVerdictKind.SEARCH_STOPPED, self.exhausted
        else:
            kind, detail = NoVerdictKind.INCOMPLETE, None
        return NoVerdict(kind, detail, self.stopped_by)

    @property
    def errors(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == "error"]

    @property
    def built(self) -> bool:
        """Whether the check got as far as a protocol: one that failed or ran out of time
        while its file loaded has no frontend, rules or search to speak of."""
        return self.frontend != NO_PROTOCOL

    @property
    def warnings(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == "warning"]


@record(frozen=True)
class Renderers:
    """How a Result shows itself: its text report (`str(result)`, `result.report()`) and its
    notebook display (`_repr_html_`). The report layer renders; it sits above this module, so
    the package installs these (semcheck/__init__.py, which Python runs before any module of
    the package, importing the reports only when a Result is first shown)."""

    text: Callable[..., str]  # (result, **options) -> the text report
    html: Callable[[Result], str]


_renderers: Renderers | None = None


def install_renderers(renderers: Renderers) -> None:
    global _renderers
    _renderers = renderers


def _installed() -> Renderers:
    if _renderers is None:
        raise RuntimeError("no renderers installed for Result: semcheck/__init__.py installs them")
    return _renderers

