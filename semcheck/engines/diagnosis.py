"""Name the root cause of a violation, where the IR and the counterexample show one.

A kernel with one line dropped can break in several places at once: a copy that is never
waited for leaves its send and receive semaphores non-zero on every device and lets the
reads after it race with it; a capacity semaphore nobody waits on is left non-zero and lets
each sender run ahead of its receiver. Each of those is one problem, and its fix names the
missing line. This module reads the violation's counterexample (its trace steps: what each
did, what fed each wait, which start each completion belongs to) and the protocol's
programs, and returns a `RootCause` (result.py) or None; reports render it, and group the
violations that share one.

The causes, each from facts that can be checked against the IR:

* `UNWAITED_COPY`: a copy start whose send or receive semaphore no wait in its thread's
  program takes after it (the line's last run, at least). Found from a leftover whose
  unconsumed additions all come from that line, and from a race that involves a copy
  from it.
* `UNCONSUMED_SIGNAL`: a semaphore that is signalled and never waited on anywhere in the
  protocol. Found from a leftover of it, from a race whose writing copy could have been
  held back by it (its target signals it to the copy's issuer), and from an early arrival
  whose barrier semaphore is never waited on.
* `WRONG_SIGNALLER`: a race whose writing copy was let go by a wait that another device's
  signal satisfied, not the signal of the device the copy writes to.
* `WRONG_COPY`: a race whose reading wait was satisfied by another copy than the one
  that writes the rows it reads: the writer still in flight at the read, or started after
  a reading copy whose wait had passed on the other copy's bytes.
* `OTHER_KERNELS_SIGNAL`: an early arrival (or a race) whose copy or signal was let go by a
  barrier wait that a signal from another kernel of the program satisfied: two kernels that
  share a barrier semaphore (one collective_id), one a step ahead on the signalling device.
  Also an early pass itself: a barrier wait that passed on a signal a peer sent from a later
  invocation (another kernel of the program, or the same kernel called again).

* `NO_GO_AHEAD`: a race on rows of a peer's buffer that a copy writes, where the copy's
  device heard nothing from that peer since its previous copy into those rows (no wait of
  its thread took a signal from the peer): the earlier copy may still be landing, or the peer
  still reading what it brought. Or the first copy into rows that the peer uses for itself
  (the race's other side: it fills them, or reads what was there before), from a device that
  never took a signal from the peer. The missing piece is a capacity handshake.

* `LATE_WAIT`: a race where one side's thread has the wait that would order it after the
  other side, but after its action in its own program: a read before the wait on the copy's
  barrier, a copy started before the wait for the signal its source's owner sends after
  writing it, a refill before the wait for the TMA store still reading the tile; or a copy's
  thread that waits for it only after a signal that lets the racing thread go. An early
  action that is the Pallas pipeline's own copy of a block between grid steps (flagged on
  the access, `ir.PipelineCopy`) is named as that copy, not as a read or write of its line.
* `COMPETING_WAITS`: an unsatisfied decrementing wait whose units other threads' waits at
  the same line took (a grid barrier whose waits decrement).

A race whose other side signals, right after its access, a semaphore nobody waits on (an
mbarrier arrival with no wait; a consumer's release of a slot the producer never waits for)
is `UNCONSUMED_SIGNAL` too. An early arrival whose copy or signal was let go by a wait that
another device's signal satisfied, in the same kernel, is `WRONG_SIGNALLER` too.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from semcheck import ir
from semcheck.kinds import Kind
from semcheck.records import record
from semcheck.result import CauseKind, RegionRef, RootCause, StepEvent, TraceStep, WaitCall
from semcheck.semantics import System

_COMPLETIONS = (StepEvent.DMA_SEND_DONE, StepEvent.DMA_RECV_DONE)


@record(frozen=True)
class Path:
    """A counterexample as the diagnosis reads it: the protocol's system and the trace steps."""

    system: System
    steps: list
    racing_step: int | None  # a race's copy in flight: the step that started it

    def step(self, index: int) -> TraceStep:
        return self.steps[index - 1]


def diagnose(system: System, finding, steps: list, racing_step: int | None) -> RootCause | None:
    """The root cause of `finding`, from the trace `steps` of its counterexample and the
    protocol's programs, or None where none of the known shapes fits."""
    rule = _RULES.get(finding.kind)
    if rule is None or not steps:
        return None
    cause = rule(Path(system, steps, racing_step), finding)
    if cause is not None and cause.semaphore in system.allocs:
        shown_as = system.allocs[cause.semaphore][0].shown_as
        if shown_as:
            cause = replace(cause, semaphore_shown_as=shown_as)
    return cause


# --- leftovers -----------------------------------------------------------------------------------


def _leftover(path: Path, finding) -> RootCause | None:
    if finding.sem is None:
        return None
    system = path.system
    inst = system.instances[finding.sem]
    pending = _unconsumed_additions(path.steps, inst.short)
    starts = [path.step(i).started_by for i in pending if path.step(i).event in _COMPLETIONS]
    if pending and len(starts) == len(pending) and None not in starts:
        lines = {path.step(s).location for s in starts if s is not None}
        cause = unwaited_copy(system, lines.pop()) if len(lines) == 1 else None
        shown = [i for pair in zip(starts[-2:], pending[-2:]) for i in pair if i is not None]
        return replace(cause, steps=tuple(sorted(shown))) if cause is not None else None
    if not _waited_anywhere(system, inst.decl.name):
        return _unconsumed_signal(path, inst.decl.name, finding.sem)
    return None


def _unconsumed_additions(steps: list, short: str) -> list[int]:
    """The trace steps whose additions to semaphore `short` no later take consumed."""
    pending: list[int] = []
    for s in steps:
        if s.semaphore != short or s.before is None or s.after is None:
            continue
        if s.after > s.before and s.event is not StepEvent.ENTRY:
            pending.append(s.index)
        elif s.after < s.before:
            pending = []
    return pending


def _unconsumed_signal(path: Path, decl: str, sid: int | None = None, before: ir.Loc | None = None) -> RootCause | None:
    """UNCONSUMED_SIGNAL for `decl`: its signal line (one the trace ran on semaphore `sid`,
    else any), and where a wait belongs when `before` is not given: before the first copy
    or remote signal that the signalled device sends back to the signaller after running
    the signal's line itself."""
    system = path.system
    signals = [s for s in path.steps if s.event is StepEvent.SIGNAL and s.semaphore is not None
               and (sid is None or s.semaphore == system.instances[sid].short)
               and s.declaration == decl]
    site = signals[0].location if signals else _static_signal(system, decl)
    if site is None:
        return None
    shown = [s.index for s in signals[-3:]]
    if before is None and signals:
        belongs = _where_wait_belongs(path, signals[0])
        if belongs is not None:
            before = belongs.location
            shown.append(belongs.index)
    return RootCause(CauseKind.UNCONSUMED_SIGNAL, site, semaphore=decl, before=before, steps=tuple(sorted(shown)))


def _static_signal(system: System, decl: str) -> ir.Loc | None:
    for body in system.bodies:
        for instr in body:
            if isinstance(instr, ir.Signal) and instr.sem.alloc == decl:
                return instr.loc
    return None


def _where_wait_belongs(path: Path, signal: TraceStep) -> TraceStep | None:
    """The signalled device's first copy into (or remote signal to) the signaller after it
    ran the signal's own line: what the signal tells it it may now do."""
    if signal.target_device is None or signal.device is None:
        return None
    receiver, signaller = signal.target_device, signal.device
    ran_line = False
    for s in path.steps:
        if s.device != receiver or s.actor.startswith("DMA"):
            continue
        if s.location == signal.location and s.event is StepEvent.SIGNAL:
            ran_line = True
        elif ran_line and s.event in (StepEvent.DMA_START, StepEvent.SIGNAL) and s.target_device == signaller:
            return s
    return None


def _waited_anywhere(system: System, decl: str) -> bool:
    """Whether any instruction of the protocol waits on (or reads) an instance of `decl`."""
    ids = _instances_of(system, decl)
    for t, body in enumerate(system.bodies):
        for pc, instr in enumerate(body):
            if isinstance(instr, (ir.Wait, ir.DmaWait, ir.Read)):
                fp = system.footprints[t][pc]
                if (fp.dec | fp.wait | fp.read) & ids:
                    return True
    return False


def _instances_of(system: System, decl: str) -> frozenset[int]:
    return frozenset(i for i, inst in enumerate(system.instances) if inst.decl.name == decl)


# --- copies never waited for ---------------------------------------------------------------------


def unwaited_copy(system: System, loc: ir.Loc | None) -> RootCause | None:
    """UNWAITED_COPY for the copy started at `loc`, when a thread that starts it has no wait
    after its last start there on the copy's send semaphore, or the receiving thread none on
    its receive semaphore (after its own start at `loc`, in a kernel every device runs alike).
    `last_only` when the waits of some earlier start there are found on each side left
    unwaited: a loop's last copy. (A wait on the other side says nothing: a loop that waits
    each send and never a receive leaves every copy's receive unwaited, not the last one's.)
    None where some thread's lowering stopped (`ir.Cut`): its waits after the stop are unknown."""
    if loc is None:
        return None
    if any(isinstance(instr, ir.Cut) for body in system.bodies for instr in body):
        # where a thread's lowering stopped, what it would do next (the wait, say) is not
        # known: a wait missing from the prefix is no evidence that it is missing
        return None
    sides: set[ir.DmaSide] = set()
    waited_earlier: dict[ir.DmaSide, list[ir.Loc]] = {}
    local = system.protocol.backend is ir.Backend.TPU  # a GPU copy is awaited otherwise
    for t, body in enumerate(system.bodies):
        starts = [pc for pc, instr in enumerate(body) if isinstance(instr, ir.DmaStart) and instr.loc == loc]
        local = local and all(_is_local(body[pc]) for pc in starts)
        for k, pc in enumerate(starts):
            for side, ids, owners in _sides(system, t, pc):
                taken = [system.bodies[u][w].loc for u in owners for w in _waits_on(system, u, ids)
                         if w > _nth_start(system, u, loc, k)]
                if k < len(starts) - 1:
                    waited_earlier.setdefault(side, []).extend(taken[:1])
                elif not taken:
                    sides.add(side)
    if not sides:
        return None
    earlier = [waited_earlier.get(side, []) for side in sorted(sides)]
    last_only = all(earlier)
    return RootCause(CauseKind.UNWAITED_COPY, loc, sides=tuple(map(str, sorted(sides))), local=local,
                     last_only=last_only, wait=earlier[0][0] if last_only else None,
                     waited_with=_copy_wait_call(system, loc))


def _copy_wait_call(system: System, loc: ir.Loc) -> WaitCall | None:
    """How Mosaic GPU waits for the copies started at `loc`: a TMA store (a copy whose reads
    and writes complete apart) with `wait_smem_to_gmem`, a copy that arrives on an mbarrier
    (a TMA load) with `barrier_wait`. None on TPU."""
    if system.protocol.backend is not ir.Backend.GPU:
        return None
    starts = [i for body in system.bodies for i in body if isinstance(i, ir.DmaStart) and i.loc == loc]
    if starts and all(i.send_sem is not None for i in starts):
        return WaitCall.TMA_STORE_WAIT
    if starts and all(_wait_call(system, i.recv_sem.alloc) is WaitCall.BARRIER_WAIT for i in starts):
        return WaitCall.BARRIER_WAIT
    return None


def _is_local(instr: ir.Instr) -> bool:
    """A copy within the issuing thread's own memory, counted on one semaphore of its own
    (on TPU, `pltpu.make_async_copy`)."""
    assert isinstance(instr, ir.DmaStart)
    return instr.send_sem is None and instr.device is None and instr.core is None \
        and instr.dst_device is None and instr.src_device is None


def _sides(system: System, t: int, pc: int) -> list[tuple[ir.DmaSide, frozenset[int], list[int]]]:
    """(side, the semaphore instances the copy started at (t, pc) adds to on that side, the
    threads that can wait on them) for its send and receive sides."""
    instr = system.bodies[t][pc]
    assert isinstance(instr, ir.DmaStart)
    fp = system.footprints[t][pc].inc
    device = system.threads[t].device
    send = frozenset(i for i in fp if instr.send_sem is not None
                     and system.instances[i].decl.name == instr.send_sem.alloc
                     and system.instances[i].device == device)
    recv = frozenset(i for i in fp if system.instances[i].decl.name == instr.recv_sem.alloc) - send
    sides = ((ir.DmaSide.SEND, send, [t]), (ir.DmaSide.RECV, recv, _owners(system, recv)))
    return [(side, ids, owners) for side, ids, owners in sides if ids and owners]


def _nth_start(system: System, t: int, loc: ir.Loc, k: int) -> int:
    """The pc of thread `t`'s `k`-th start at `loc` (its last if it has fewer; -1 if none)."""
    own = [pc for pc, i in enumerate(system.bodies[t]) if isinstance(i, ir.DmaStart) and i.loc == loc]
    return own[min(k, len(own) - 1)] if own else -1


def _owners(system: System, ids: frozenset[int]) -> list[int]:
    """The threads that own (can wait on) semaphore instances `ids`."""
    places = {(system.instances[i].device, system.instances[i].core) for i in ids}
    return [t for t, th in enumerate(system.threads)
            if (th.device, th.core) in places or (th.device, None) in places]


def _waits_on(system: System, t: int, ids: frozenset[int]) -> list[int]:
    return [pc for pc, instr in enumerate(system.bodies[t]) if isinstance(instr, (ir.Wait, ir.DmaWait))
            and (system.footprints[t][pc].dec | system.footprints[t][pc].wait) & ids]


def feeders_of(steps: list, wait: TraceStep) -> list[TraceStep]:
    """The additions a wait took, first in first out: a take consumes the oldest units
    still on its semaphore (a trace step's `fed_by` lists every addition since the last
    take, which says nothing about the rest a partial take leaves). A wait that takes
    nothing (non-decrementing) is fed by every addition it saw."""
    queue: deque[list] = deque()  # [step, units not yet taken]
    for s in steps[: wait.index]:
        if s.semaphore != wait.semaphore or s.before is None or s.after is None:
            continue
        if s.event is StepEvent.ENTRY:
            queue.clear()
            continue
        delta = s.after - s.before
        if delta > 0:
            queue.append([s, delta])
        if s is wait:
            if delta >= 0:
                return [entry[0] for entry in queue]
            taken, need = [], -delta
            while need > 0 and queue:
                entry = queue[0]
                use = min(need, entry[1])
                entry[1] -= use
                need -= use
                taken.append(entry[0])
                if entry[1] == 0:
                    queue.popleft()
            return taken
        if delta < 0:
            need = -delta
            while need > 0 and queue:
                use = min(need, queue[0][1])
                queue[0][1] -= use
                need -= use
                if queue[0][1] == 0:
                    queue.popleft()
    return []


# --- data races ----------------------------------------------------------------------------------


def _race(path: Path, finding) -> RootCause | None:
    cause = _copy_race(path, finding)
    if cause is not None:
        return cause
    # a wait fed straight by the other side first, then a release nobody waits for, and only
    # then a wait fed through a third thread (a relay is a longer guess at what was meant)
    return _late_wait(path, finding, relayed=False) or _release_never_waited(path, finding) \
        or _issuer_waits_late(path, finding) or _late_wait(path, finding, relayed=True)


def _copy_race(path: Path, finding) -> RootCause | None:
    if path.racing_step is None:
        return None
    access, copy = path.steps[-1], path.step(path.racing_step)
    involved = [copy.location] + ([access.location] if access.event is StepEvent.DMA_START else [])
    wrong_copy, writer, side = None, None, ir.DmaSide.RECV
    conflict = _conflict_side(copy, access)
    if conflict is ir.DmaSide.RECV:
        # the copy in flight writes what the access touches: the access's thread may have
        # waited for it and been satisfied by another copy
        writer, wrong_copy = copy, _wait_met_by_other_copies(path, access, copy, after=copy.index, side=side)
    elif access.event is StepEvent.DMA_START and _overlaps(access.dst, access, _regions(copy)):
        # a copy starts writing what a copy in flight reads: the reading copy's thread may
        # have passed its wait for this writer on other copies' bytes, before it even started
        writer, wrong_copy = access, _wait_met_by_other_copies(path, copy, access, after=0, side=side)
    elif conflict is ir.DmaSide.SEND:
        # the access overwrites what a copy in flight still reads: its thread may have waited
        # for that copy's send side and been satisfied by other copies' sends
        side = ir.DmaSide.SEND
        wrong_copy = _wait_met_by_other_copies(path, access, copy, after=copy.index, side=side)
        if wrong_copy is not None:
            writer = copy
    # the copy that moved first: the writer, or the copy whose bytes met the wait in its stead
    early = writer if wrong_copy is None else path.step(wrong_copy[1])
    if wrong_copy is not None:
        involved.append(path.step(wrong_copy[1]).location)
    for loc in dict.fromkeys(involved):
        cause = unwaited_copy(path.system, loc)
        if cause is not None:
            shown = {copy.index, access.index} | ({early.index} if early is not None else set())
            return replace(cause, steps=tuple(sorted(shown)))
    if side is ir.DmaSide.RECV and early is not None and early.target_device is not None \
            and early.device is not None:
        # what let it go before its target was ready (a capacity wait met by another device)
        cause = _held_back_by(path, early)
        if cause is not None:
            return cause
    if wrong_copy is None and writer is not None:
        # the later of two copies into one peer buffer is the one that needed the go-ahead
        later = access if access.event is StepEvent.DMA_START and _overlaps(access.dst, access, _regions(copy)) \
            else writer
        cause = _no_go_ahead(path, later, other=copy if later is access else access)
        if cause is not None:
            return cause
    if wrong_copy is not None and writer is not None and writer.location is not None:
        wait, by = wrong_copy
        waited_at = path.step(wait).location
        if waited_at is not None:
            fed = [f.index for f in feeders_of(path.steps, path.step(wait))]
            return RootCause(CauseKind.WRONG_COPY, waited_at, by=path.step(by).location,
                             writer=writer.location, sides=(str(side),),
                             steps=tuple(sorted({wait, by, copy.index, access.index, *fed[-1:]})))
    return None


def _regions(step: TraceStep) -> list[tuple[RegionRef, TraceStep]]:
    return [(r, step) for r in (step.src, step.dst) if r is not None]


def _overlaps(region: RegionRef | None, owner: TraceStep, others: list[tuple[RegionRef, TraceStep]]) -> bool:
    if region is None:
        return False
    return any(_same_cells(region, owner, other, other_owner) for other, other_owner in others)


def _same_cells(a: RegionRef, a_step: TraceStep, b: RegionRef, b_step: TraceStep) -> bool:
    da = a.device if a.device is not None else a_step.device
    db = b.device if b.device is not None else b_step.device
    if a.buffer != b.buffer or da != db:
        return False
    return all(x < y + n and y < x + m for x, m, y, n in zip(a.starts, a.sizes, b.starts, b.sizes))


def _wait_met_by_other_copies(path: Path, waiter: TraceStep, awaited: TraceStep, *, after: int,
                              side: ir.DmaSide) -> tuple[int, int] | None:
    """(the wait, the start of the copy that satisfied it) when the waiting thread's last
    wait on the `side` semaphore of the copy `awaited` (its receive side: the rows it
    writes; its send side: the rows it reads), after step `after` and before `waiter`, was
    met by the completions of copies whose rows on that side are none of what the waiter
    touches: another line's, or another run of the awaited copy's own line (two of them in
    flight on one semaphore). A wait before an in-flight copy started cannot have been
    meant for it (it took an earlier copy's, rightly): then the waiter simply never waited.
    A copy that starts after a reading copy did is awaited by the wait before the reader."""
    sems = [c.semaphore for c in awaited.completions if c.side == str(side)]
    if not sems:
        return None

    def rows(step: TraceStep) -> RegionRef | None:
        return step.dst if side is ir.DmaSide.RECV else step.src

    for s in reversed(path.steps[after : waiter.index - 1]):
        if s.actor != waiter.actor or s.event is not StepEvent.DMA_WAIT or s.semaphore != sems[0]:
            continue
        started = [f.started_by for f in feeders_of(path.steps, s) if f.event in _COMPLETIONS]
        feeders = [path.step(f) for f in started if f is not None]
        if awaited.index in started or len(feeders) != len(started) or not feeders:
            return None
        # A taken copy on the awaited copy's own rows is the one the wait was for: the
        # awaited copy is a later one that came too early (a sender ahead), not one the
        # wait mistook.
        awaited_rows = rows(awaited)
        if awaited_rows is not None and any(_overlaps(rows(f), f, [(awaited_rows, awaited)]) for f in feeders):
            return None
        # A taken copy whose rows are none of what the waiter touches was counted in the
        # awaited copy's stead: another line's, or another run of the awaited line (the next
        # generation's rows, the other slot). Copies of other rows of the same read were
        # waited for rightly; with only those taken the wait was simply short.
        elsewhere = [f for f in feeders if not _overlaps(rows(f), f, _regions(waiter))]
        other_line = [f for f in elsewhere if f.location != awaited.location]
        chosen = other_line or elsewhere
        return (s.index, chosen[-1].index) if chosen else None
    return None


# The default device barrier semcheck models before a kernel with no collective_id
# (lower/tpu_kernel.py): XLA's, not a signal the kernel sends.
_DEVICE_BARRIER = frozenset({ir.DEVICE_BARRIER_ARRIVE, ir.DEVICE_BARRIER_RELEASE})


def _held_back_by(path: Path, writer: TraceStep) -> RootCause | None:
    """Why the copy `writer` could start while its target was not ready: the target signals
    a semaphore to the writer's device that nothing waits on, or the writer's last wait
    before it was satisfied by another device than the target."""
    system = path.system
    issuer, target = writer.device, writer.target_device
    assert issuer is not None and target is not None
    for decl, loc in _signals_between(system, target, issuer):
        if not _waited_anywhere(system, decl):
            sent = [s.index for s in path.steps[: writer.index - 1] if s.event is StepEvent.SIGNAL
                    and s.declaration == decl and s.device == target and s.target_device == issuer]
            return RootCause(CauseKind.UNCONSUMED_SIGNAL, loc, semaphore=decl, before=writer.location,
                             steps=tuple(sent[-2:]) + (writer.index,))
    for s in reversed(path.steps[: writer.index - 1]):
        if s.actor != writer.actor or s.event is not StepEvent.WAIT:
            continue
        if s.declaration in _DEVICE_BARRIER:  # says only that every device entered: no
            return None                       # handshake of the kernel's own to redirect
        early = early_pass(path, s)
        if early is not None:
            return replace(early, steps=tuple(sorted({*early.steps, writer.index})))
        feeders = [f for f in feeders_of(path.steps, s) if f.event is StepEvent.SIGNAL]
        remote = [f for f in feeders if f.device is not None and f.device != issuer]
        if not remote or any(f.device == target for f in remote):
            return None
        signal, n = remote[-1], system.protocol.devices
        if signal.location is None or signal.device is None:
            return None
        kind, kernels = CauseKind.WRONG_SIGNALLER, tuple[str, ...]()
        if signal.kernel is not None and s.kernel is not None and signal.kernel != s.kernel \
                and _is_barrier(system, s.declaration):  # what collective_ids make kernels share
            kind, kernels = CauseKind.OTHER_KERNELS_SIGNAL, (s.kernel, signal.kernel)
        return RootCause(kind, signal.location, semaphore=s.declaration,
                         wait=s.location, writer=writer.location,
                         by_offset=_offset(signal.device - issuer, n), want_offset=_offset(target - issuer, n),
                         writer_signals=writer.event is StepEvent.SIGNAL, kernels=kernels,
                         steps=(signal.index, s.index, writer.index))
    return None


def _no_go_ahead(path: Path, writer: TraceStep, other: TraceStep) -> RootCause | None:
    """NO_GO_AHEAD when `writer` is a copy into rows of a peer's buffer, and no wait of its
    thread since its own previous copy into them took a signal from the peer; or, for the
    first copy into them, when `other` is a use of the peer's own (it writes the rows, or
    reads what it or a third device put there: not a read of what this very copy brings,
    which is the reader's race) and no wait of the thread ever took a signal from the peer
    (the default device barrier aside). Nothing said the rows were free."""
    issuer, target = writer.device, writer.target_device
    if writer.event is not StepEvent.DMA_START or writer.dst is None or issuer is None \
            or target is None or target == issuer or writer.location is None:
        return None
    since = next((s.index for s in reversed(path.steps[: writer.index - 1])
                  if s.actor == writer.actor and s.event is StepEvent.DMA_START and s.target_device == target
                  and s.dst is not None and _same_cells(s.dst, s, writer.dst, writer)), None)
    use: tuple[StepEvent, ...] = ()
    heard_since = since
    if since is None:  # the first copy into these rows: held back only by a use of the peer's own
        in_use = _peers_own_use(path, writer, other)
        if in_use is None:
            return None
        # A word from the peer before its use began is a handshake the use comes too late
        # for (a mailbox cleared after the barrier that lets peers push): moving the use
        # before that word is the fix, not a semaphore more. Only a writer that never heard
        # from the peer lacks the handshake.
        since, heard_since, use = in_use, 0, (other.event,)
    unheard = _DEVICE_BARRIER if use else frozenset()  # says only that every device entered
    for s in path.steps[heard_since : writer.index - 1]:
        if s.actor == writer.actor and s.event is StepEvent.WAIT and s.declaration not in unheard \
                and any(f.event is StepEvent.SIGNAL and f.device == target for f in feeders_of(path.steps, s)):
            return None
    return RootCause(CauseKind.NO_GO_AHEAD, writer.location, buffer=writer.dst.buffer,
                     want_offset=_offset(target - issuer, path.system.protocol.devices), events=use,
                     steps=tuple(sorted({since, other.index, writer.index})))


def _peers_own_use(path: Path, writer: TraceStep, other: TraceStep) -> int | None:
    """The step from which the peer that `writer` copies into used the rows for itself, when
    `other`, the race's other side, is that use: a store of the peer's into them, or a read
    (a load, or a copy's source) of what was in them before `writer` started (a store or a
    copy into them earlier in the trace). The use began at the first such write, or at
    `other` itself."""
    assert writer.dst is not None
    target = writer.target_device
    if other.device != target or other.event not in _OWN_USES:
        return None
    rows = [(writer.dst, writer)]
    if not _overlaps(other.src, other, rows):  # a load's or store's region, a copy's source
        return None
    earlier = [s.index for s in path.steps[: writer.index - 1] if s.index != other.index and (
        (s.event is StepEvent.STORE and s.device == target and _overlaps(s.src, s, rows))
        or (s.event is StepEvent.DMA_START and _overlaps(s.dst, s, rows)))]
    if other.event is not StepEvent.STORE and not earlier:
        return None  # nothing was there before this copy: the peer reads what it brings
    return min([other.index, *earlier])


# A peer's own use of its rows that a copy into them must wait for: the peer writes them, or
# reads them (a load, or the source of a copy it starts).
_OWN_USES = frozenset({StepEvent.STORE, StepEvent.LOAD, StepEvent.DMA_START})


def _is_barrier(system: System, decl: str | None) -> bool:
    return any(d.name == decl and d.origin is ir.SemOrigin.BARRIER for d in system.protocol.semaphores)


def _signals_between(system: System, source: int, target: int) -> list[tuple[str, ir.Loc]]:
    """(declaration, line) of each signal a thread of device `source` may send to an
    instance on device `target`."""
    out: dict[str, ir.Loc] = {}
    for t, body in enumerate(system.bodies):
        if system.threads[t].device != source:
            continue
        for pc, instr in enumerate(body):
            if isinstance(instr, ir.Signal) and any(
                    system.instances[i].device == target for i in system.footprints[t][pc].inc):
                out.setdefault(instr.sem.alloc, instr.loc)
    return list(out.items())


def _offset(delta: int, n: int) -> int:
    """`delta` as the nearest offset around a ring of `n` devices (+1: the next device)."""
    delta %= n
    return delta - n if delta > n // 2 else delta


# --- a wait placed after what it guards; a release nobody waits for ------------------------------


@record(frozen=True)
class _Feed:
    """What a wait could take that orders it after an action: the line of the copy or signal
    that adds it, and through which thread's wait it was relayed (None: straight from the
    action's thread or copy)."""

    loc: ir.Loc
    relay: tuple[int, int, int] | None = None  # (thread, its wait's pc, its signal's pc)


def _late_wait(path: Path, finding, *, relayed: bool) -> RootCause | None:
    """LATE_WAIT: one side of the race has, after its action in its own program, a wait on a
    semaphore the other side adds to once its access is done (the copy's completion, or a
    signal its thread sends next; `relayed`: through one thread that waits for it and signals
    right after): the wait is there, just too late. Either side may be the late one, except
    that of two actions of one thread, the earlier cannot wait for the later."""
    sides = _race_sides(path, finding)
    if sides is None:
        return None
    system = path.system
    found = None
    for (late, late_step), (other, other_step) in (sides, sides[::-1]):
        if late[0] == other[0] and other[1] > late[1]:
            continue
        made = _made_after(system, other, other_step, late_step, relayed=relayed)
        found = _first_wait_on(system, late, made)
        if found is not None and not _no_late_wait_here(system, late, late_step, other, other_step, *found):
            break
        found = None
    if found is None:
        return None
    wait_pc, feed = found
    wait = system.bodies[late[0]][wait_pc]
    assert isinstance(wait, (ir.Wait, ir.DmaWait))
    needs: tuple[ir.Loc, ...] = ()
    if feed.relay is not None:
        needs = _signals_relay_needs(system, feed.relay, late)
    early_instr, other_instr = system.bodies[late[0]][late[1]], system.bodies[other[0]][other[1]]
    shown = [path.steps[-1].index] + ([path.racing_step] if path.racing_step is not None else [])
    # The pipeline's own copy of a block (its line is the pallas_call's): said as what it is
    block_copy = early_instr if isinstance(early_instr, (ir.Load, ir.Store)) and early_instr.pipeline else None
    return RootCause(CauseKind.LATE_WAIT, wait.loc, semaphore=_sem_decl(wait), before=early_instr.loc,
                     by=other_instr.loc, writer=feed.loc, events=(_event(early_instr), _event(other_instr)),
                     needs=needs, pipeline=block_copy.pipeline if block_copy else None,
                     buffer=block_copy.region.buffer if block_copy else None, steps=tuple(sorted(set(shown))))


def _issuer_waits_late(path: Path, finding) -> RootCause | None:
    """LATE_WAIT for a copy whose own thread waits for it, but only after a signal that let
    the racing access's thread go: in the trace, a wait of the access's thread since the copy
    started took that signal (one the copy's thread sent between the start and its wait)."""
    sides = _race_sides(path, finding)
    if sides is None or path.racing_step is None:
        return None
    (access, access_step), (start, start_step) = sides
    system = path.system
    copy = system.bodies[start[0]][start[1]]
    if start_step is None or access_step is None or access[0] == start[0] or not isinstance(copy, ir.DmaStart):
        return None
    found = _first_wait_on(system, start, _made_after(system, start, start_step, access_step, relayed=False))
    if found is None:
        return None
    wait_pc, _ = found
    body = system.bodies[start[0]]
    between = {body[q].loc for q in range(start[1] + 1, wait_pc) if isinstance(body[q], ir.Signal)}
    for s in path.steps[start_step.index : access_step.index - 1]:
        if s.actor != access_step.actor or s.event is not StepEvent.WAIT:
            continue
        for f in feeders_of(path.steps, s):
            if f.event is StepEvent.SIGNAL and f.actor == start_step.actor and f.index > start_step.index \
                    and f.location in between:
                wait = body[wait_pc]
                access_instr = system.bodies[access[0]][access[1]]
                return RootCause(CauseKind.LATE_WAIT, wait.loc, semaphore=_sem_decl(wait), before=f.location,
                                 by=copy.loc, writer=copy.loc, events=(StepEvent.SIGNAL, StepEvent.DMA_START, _event(access_instr)),
                                 lets_go=access_instr.loc,
                                 steps=tuple(sorted({start_step.index, f.index, s.index, access_step.index})))
    return None


def _no_late_wait_here(system: System, late: tuple[int, int], late_step: TraceStep | None,
                       other: tuple[int, int], other_step: TraceStep | None, wait_pc: int, feed: _Feed) -> bool:
    """Where moving the wait is no fix: the late thread already ran the wait's line before its
    action (a loop whose action belongs to a later turn, or touches the wrong slot: the wait
    found is the next turn's), what the wait takes (`feed`) comes from the very line it would
    move before (a ring's copy at line 17 whose wait at line 18 takes the neighbour's copy
    from line 17: every device would wait for another's line 17 before its own, a circle that
    deadlocks; the fix is a capacity handshake or a slot of its own), or both sides write the
    rows (which should go first is not said by where the wait is: a store meant to come
    before a peer's copy, two copies into one row)."""
    t, pc = late
    if feed.loc == system.bodies[t][pc].loc:
        return True
    loc = system.bodies[t][wait_pc].loc
    if any(isinstance(i, (ir.Wait, ir.DmaWait)) and i.loc == loc for i in system.bodies[t][:pc]):
        return True
    if late_step is not None and other_step is not None:
        mine, theirs = _written(late_step), _written(other_step)
        return mine is not None and theirs is not None and _same_cells(mine, late_step, theirs, other_step)
    # a plain race's other access has not run: two stores (atomic or not) both write
    return all(isinstance(system.bodies[u][q], ir.Store) for u, q in (late, other))


def _race_sides(path: Path, finding) -> tuple[tuple[tuple[int, int], TraceStep | None], ...] | None:
    """((thread, pc), trace step) of the race's access and of the other side (the copy in
    flight, with the step that started it; a plain race's other access, not yet run)."""
    if finding.thread is None or finding.pc is None or finding.other_start is None:
        return None
    other_step = path.step(path.racing_step) if path.racing_step is not None else None
    return ((finding.thread, finding.pc), path.steps[-1]), (finding.other_start, other_step)


def _made_after(system: System, at: tuple[int, int], step: TraceStep | None,
                against: TraceStep | None, *, relayed: bool) -> dict[int, _Feed]:
    """The semaphore instances that are added to once the action at `at` is done, each with
    what adds it: a copy's completion on the side whose rows `against` touches (its receive
    side for the rows it writes, its send side, or without one its receive side, for those it
    reads); for a load or store, the signals its thread sends next (before its next wait);
    or, `relayed`, one step on: the first signal a thread sends after a wait on one of those."""
    t, pc = at
    instr = system.bodies[t][pc]
    made: dict[int, _Feed] = {}
    if isinstance(instr, ir.DmaStart):
        wanted = _conflict_side(step, against) if step is not None and against is not None else None
        by_side = {side: ids for side, ids, _ in _sides(system, t, pc)}
        ids = by_side.get(wanted) if wanted is not None else None
        if ids is None and wanted is ir.DmaSide.SEND and instr.send_sem is None:
            ids = by_side.get(ir.DmaSide.RECV)  # a read that only its completion ends
        for i in ids if ids is not None else frozenset().union(*by_side.values()):
            made[i] = _Feed(instr.loc)
    else:
        for q in _released_after(system, t, pc):
            for i in system.footprints[t][q].inc:
                made.setdefault(i, _Feed(system.bodies[t][q].loc))
    if not relayed:
        return made
    straight, made = frozenset(made), {}
    for u, body in enumerate(system.bodies):
        for w in _waits_on(system, u, straight):
            for q in _released_after(system, u, w)[:1]:
                for i in system.footprints[u][q].inc:
                    made.setdefault(i, _Feed(body[q].loc, relay=(u, w, q)))
    return made


def _conflict_side(copy: TraceStep, other: TraceStep) -> ir.DmaSide | None:
    if _overlaps(copy.dst, copy, _regions(other)):
        return ir.DmaSide.RECV
    if _overlaps(copy.src, copy, _regions(other)):
        return ir.DmaSide.SEND
    return None


def _released_after(system: System, t: int, pc: int) -> list[int]:
    """The pcs of the signals thread `t` sends after `pc` and before its next wait: what it
    tells others once it is past `pc`."""
    out = []
    for q in range(pc + 1, len(system.bodies[t])):
        instr = system.bodies[t][q]
        if isinstance(instr, (ir.Wait, ir.DmaWait)):
            break
        if isinstance(instr, ir.Signal):
            out.append(q)
    return out


def _first_wait_on(system: System, at: tuple[int, int], made: dict[int, _Feed]) -> tuple[int, _Feed] | None:
    """The first wait of thread `at[0]` after `at[1]` that takes one of `made`, and its feed."""
    t, pc = at
    for w in _waits_on(system, t, frozenset(made)):
        if w > pc:
            fp = system.footprints[t][w]
            return w, made[min((fp.dec | fp.wait) & frozenset(made))]
    return None


def _signals_relay_needs(system: System, relay: tuple[int, int, int], late: tuple[int, int]) -> tuple[ir.Loc, ...]:
    """The late thread's own signals after its early action that the relaying thread waits
    for before it signals on (besides the wait that took the action's completion): they
    must move with the wait, or the moved wait hangs."""
    u, w, q = relay
    t, pc = late
    needs: dict[ir.Loc, None] = {}
    for v in range(q):
        instr = system.bodies[u][v]
        if v == w or not isinstance(instr, (ir.Wait, ir.DmaWait)):
            continue
        fp = system.footprints[u][v]
        for s in range(pc + 1, len(system.bodies[t])):
            if isinstance(system.bodies[t][s], ir.Signal) and system.footprints[t][s].inc & (fp.dec | fp.wait):
                needs[system.bodies[t][s].loc] = None
    return tuple(needs)


def _sem_decl(instr: ir.Instr) -> str | None:
    sem = getattr(instr, "sem", None)
    return sem.alloc if isinstance(sem, ir.SemRef) else None


_EVENTS = {ir.Load: StepEvent.LOAD, ir.Store: StepEvent.STORE, ir.DmaStart: StepEvent.DMA_START,
           ir.Signal: StepEvent.SIGNAL}


def _event(instr: ir.Instr) -> StepEvent:
    return _EVENTS.get(type(instr), StepEvent.STORE)


def _release_never_waited(path: Path, finding) -> RootCause | None:
    """UNCONSUMED_SIGNAL for a race that a semaphore nobody waits on was meant to order: the
    other side's thread signals it once its access is done (before its next wait), or, for a
    copy written over while it is in flight, a thread that waits for that copy signals it
    once it has used the rows; and the racing access's thread could wait on it."""
    sides = _race_sides(path, finding)
    if sides is None:
        return None
    system = path.system
    for (late, late_step), (other, other_step) in (sides, sides[::-1]):
        releases = list(_released_after(system, other[0], other[1])) \
            if not isinstance(system.bodies[other[0]][other[1]], ir.DmaStart) else []
        sources = [(other[0], q) for q in releases]
        if path.racing_step is not None and other_step is not None and other_step.index == path.racing_step \
                and late_step is not None and other_step.dst is not None \
                and _overlaps(_written(late_step), late_step, [(other_step.dst, other_step)]):
            # the copy in flight is the first into these rows: who consumes it releases them
            recv = frozenset(i for side, ids, _ in _sides(system, *other) if side is ir.DmaSide.RECV for i in ids)
            sources += [(u, q) for u in range(len(system.bodies)) for w in _waits_on(system, u, recv)
                        for q in _released_after(system, u, w)]
        for u, q in sources:
            signal = system.bodies[u][q]
            assert isinstance(signal, ir.Signal)
            ids = system.footprints[u][q].inc
            if late[0] in _owners(system, ids) and not _waited_anywhere(system, signal.sem.alloc):
                early = system.bodies[late[0]][late[1]]
                shown = [path.steps[-1].index] + ([path.racing_step] if path.racing_step is not None else [])
                return RootCause(CauseKind.UNCONSUMED_SIGNAL, signal.loc, semaphore=signal.sem.alloc,
                                 before=early.loc, waited_with=_wait_call(system, signal.sem.alloc),
                                 steps=tuple(sorted(set(shown))))
    return None


def _written(step: TraceStep) -> RegionRef | None:
    """The rows a store or a copy's start writes (None for anything else)."""
    return {StepEvent.STORE: step.src, StepEvent.DMA_START: step.dst}.get(step.event)


def _wait_call(system: System, decl: str) -> WaitCall | None:
    """How a wait on `decl` is written: None outside Mosaic GPU (the fix says the TPU call)."""
    if system.protocol.backend is not ir.Backend.GPU:
        return None
    kind = next((d.kind for d in system.protocol.semaphores if d.name == decl), None)
    return WaitCall.BARRIER_WAIT if kind is ir.SemKind.MBARRIER else WaitCall.SEMAPHORE_WAIT


# --- waits that compete for one count ------------------------------------------------------------


def _competing_waits(path: Path, finding) -> RootCause | None:
    """COMPETING_WAITS: a stuck decrementing wait that would pass had the waits of other
    threads at its own line, on its own semaphore, not taken what they took: in the trace
    they decremented it by at least what it lacks."""
    if not finding.blocked:
        return None
    stuck = finding.blocked[0]
    instrs = [i for i in path.system.bodies[stuck.thread] if isinstance(i, ir.Wait) and i.loc == stuck.location]
    if stuck.location is None or not instrs or not all(i.decrement for i in instrs):
        return None
    takers = [s for s in path.steps if s.event is StepEvent.WAIT and s.semaphore == stuck.short and s.decrement
              and s.location == stuck.location and s.before is not None and s.after is not None
              and s.actor != stuck.name]
    taken = sum(s.before - s.after for s in takers)  # type: ignore[operator]
    if not takers or stuck.has + taken < stuck.needs:
        return None
    fed = [f.index for f in feeders_of(path.steps, takers[-1])]
    return RootCause(CauseKind.COMPETING_WAITS, stuck.location, semaphore=instrs[0].sem.alloc,
                     waited_with=_wait_call(path.system, instrs[0].sem.alloc),
                     steps=tuple(sorted({*fed, *(s.index for s in takers)})))


# --- early arrivals ------------------------------------------------------------------------------


def _early_arrival(path: Path, finding) -> RootCause | None:
    """A handshake whose wait is missing: the barrier semaphore is signalled but nothing
    waits on it, so nothing holds a device back until its peers have entered."""
    if path.steps[-1].event in (StepEvent.WAIT, StepEvent.DMA_WAIT):
        return early_pass(path, path.steps[-1])
    for decl in path.system.protocol.semaphores:
        if decl.origin is ir.SemOrigin.BARRIER and not _waited_anywhere(path.system, decl.name):
            return _unconsumed_signal(path, decl.name, before=finding.loc)
    # The early signal itself, or the start of the copy whose landing is early: the wait
    # that let it go may have been fed by another device than its target.
    last = path.steps[-1]
    writer = path.step(last.started_by) if last.event in _COMPLETIONS and last.started_by else last
    if writer.target_device is None or writer.device is None or writer.location is None:
        return None
    cause = _held_back_by(path, writer)
    if cause is None or cause.kind is not CauseKind.WRONG_SIGNALLER:
        return cause
    # Sending the signal to the writer's target instead mends only a line that writes to one
    # peer; a line that writes to several (a loop over peers) needs every one to signal.
    return cause if len(_peers_of_line(path.system, writer.device, writer.location)) == 1 else None


def early_pass(path: Path, wait: TraceStep) -> RootCause | None:
    """OTHER_KERNELS_SIGNAL when the barrier wait `wait` passed in invocation i on units a
    later invocation added (`semantics.rules._early_pass`: its count less those units was
    below its value), naming the last signal (or landing copy) from a later invocation that
    added to its semaphore before it: the one it should not have counted. The same cause
    whether found at the wait itself or behind what the wait let go (`_held_back_by`), so
    they group as one problem. None when the wait did not pass early."""
    if wait.invocation is None or wait.location is None or wait.device is None or wait.before is None \
            or wait.need is None:
        return None
    later = [s for s in path.steps[: wait.index - 1]
             if s.semaphore == wait.semaphore and s.event in (StepEvent.SIGNAL, *_COMPLETIONS)
             and s.invocation is not None and s.invocation > wait.invocation
             and s.before is not None and s.after is not None and s.after != s.before]
    if not later or wait.before - sum(s.after - s.before for s in later) >= wait.need:
        return None
    signal = next((s for s in reversed(later) if s.after > s.before), None)
    if signal is None:
        return None
    origin = path.step(signal.started_by) if signal.event in _COMPLETIONS and signal.started_by else signal
    if origin.location is None or origin.device is None:
        return None
    kernels = (wait.kernel, origin.kernel) if wait.kernel is not None and origin.kernel is not None else ()
    return RootCause(CauseKind.OTHER_KERNELS_SIGNAL, origin.location, semaphore=wait.declaration, wait=wait.location,
                     by_offset=_offset(origin.device - wait.device, path.system.protocol.devices), kernels=kernels,
                     invocations=(wait.invocation, signal.invocation),
                     steps=tuple(sorted({origin.index, signal.index, wait.index})))


def _peers_of_line(system: System, device: int, loc: ir.Loc) -> set[int]:
    """The other devices whose semaphores the signals and copies at `loc` of a thread of
    `device` may add to."""
    peers: set[int] = set()
    for t, body in enumerate(system.bodies):
        if system.threads[t].device != device:
            continue
        for pc, instr in enumerate(body):
            if isinstance(instr, (ir.Signal, ir.DmaStart)) and instr.loc == loc:
                peers.update(system.instances[i].device for i in system.footprints[t][pc].inc)
    peers.discard(device)
    return peers


_RULES = {
    Kind.SEMAPHORE_LEFTOVER: _leftover,
    Kind.DATA_RACE: _race,
    Kind.REMOTE_BEFORE_ENTRY: _early_arrival,
    Kind.UNSATISFIED_WAIT: _competing_waits,
}
