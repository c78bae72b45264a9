"""A root cause (`result.RootCause`, found by `engines/diagnosis.py`) in words: what is wrong,
and the fix, naming the line and the call that is missing."""

from __future__ import annotations

from typing import Iterable

from semcheck.ir import Loc, PipelineCopy
from semcheck.result import CauseKind, RootCause, StepEvent, Violation, WaitCall


def statement(cause: RootCause) -> str:
    """What is wrong, in one sentence."""
    return _STATEMENTS[cause.kind](cause)


def fix(cause: RootCause) -> str:
    """What to change."""
    return _FIXES[cause.kind](cause)


def found_as(violations: Iterable[Violation]) -> str:
    """The violations one root cause was found as, by kind and line: "data_race at lines 57,
    62; semaphore_leftover at line 54"."""
    lines: dict[str, set[int]] = {}
    for v in violations:
        lines.setdefault(v.kind, set()).update([v.location.line] if v.location is not None else [])
    return "; ".join(f"{kind} at line{'s' if len(at) > 1 else ''} {', '.join(map(str, sorted(at)))}" if at else kind
                     for kind, at in lines.items())


def _line(loc: Loc | None) -> str:
    """"line 27", or for a line inside a helper, "line 27 (called from line 42)" with the
    kernel body's call: every copy that a helper starts is on the helper's one line, and
    two copies named by that line alone read as one."""
    return "(unknown line)" if loc is None else loc.line_text()


def _sem(c: RootCause) -> str:
    """The semaphore concerned: its name as the author wrote it, in backquotes, or what it
    stands for where the lowering made it (the reads of a thread's TMA stores)."""
    return c.semaphore_shown_as or f"`{c.semaphore}`"


def offset_text(offset: int | None) -> str:
    """A device relative to another one, d: "device d+1", "device d-2"."""
    if offset is None:
        return "another device"
    return "device d" if offset == 0 else f"device d{offset:+d}"


def _unwaited_copy(c: RootCause) -> str:
    if c.waited_with is WaitCall.TMA_STORE_WAIT and c.sides == ("recv",):
        # its reads are waited for (the send side has its wait): a `wait_read_only=True` wait
        return (f"the writes of the copy started at {_line(c.site)} are never waited for: the wait for it "
                "takes only its reads of the source")
    if c.last_only:
        return (f"the last copy started at {_line(c.site)} is never waited for "
                f"(the wait at {_line(c.wait)} takes each earlier one)")
    return f"the copy started at {_line(c.site)} is never waited for"


def _unconsumed_signal(c: RootCause) -> str:
    return f"no wait on {_sem(c)} exists: its signals at {_line(c.site)} are never consumed"


def _guarded(c: RootCause) -> str:
    """The early action: a copy into the target's memory, or a signal of its semaphore."""
    return (f"whose semaphore the signal at {_line(c.writer)} increments" if c.writer_signals
            else f"whose memory the copy at {_line(c.writer)} writes")


def _wrong_signaller(c: RootCause) -> str:
    return (f"the wait at {_line(c.wait)} on device d was satisfied by the signal at {_line(c.site)} from "
            f"{offset_text(c.by_offset)}, not by {offset_text(c.want_offset)}, {_guarded(c)}")


def _invocation(c: RootCause, k: int) -> str:
    """The waiter's (k=0) or the signaller's (1) kernel and invocation: "`a` (invocation 1)",
    or for one kernel called again, "invocation 2"."""
    said = f"invocation {c.invocations[k]}"
    return f"`{c.kernels[k]}` ({said})" if c.kernels else said


def _other_kernels_signal(c: RootCause) -> str:
    if c.writer is None:  # found at the wait itself: it passed early
        where = (f"another kernel, {_invocation(c, 1)}, which shares {_sem(c)}"
                 if c.kernels and c.kernels[0] != c.kernels[1]
                 else f"a later call of the kernel ({_invocation(c, 1)}) to the same {_sem(c)}")
        return (f"the wait at {_line(c.wait)} in {_invocation(c, 0)} on device d passed on the signal at "
                f"{_line(c.site)} that {offset_text(c.by_offset)} sent from {where}: the signals meant for "
                "this wait had not all arrived, so what follows it runs before its peers are ready for it")
    waiter, signaller = c.kernels
    return (f"the wait at {_line(c.wait)} in `{waiter}` on device d was satisfied by the signal at "
            f"{_line(c.site)} that {offset_text(c.by_offset)} sent from another kernel, `{signaller}`, "
            f"which shares {_sem(c)}; {offset_text(c.want_offset)}, {_guarded(c)}, may not have "
            f"entered `{waiter}` yet")


def _wrong_copy(c: RootCause) -> str:
    does, semaphore = ("reads", "send") if c.sides == ("send",) else ("writes", "receive")
    if c.by == c.writer:  # two runs of one line in flight on one semaphore
        return (f"the wait at {_line(c.site)} was satisfied by another copy from {_line(c.by)} than the one "
                f"that {does} these rows (both were in flight on one {semaphore} semaphore)")
    return (f"the wait at {_line(c.site)} was satisfied by the copy from {_line(c.by)}, not by the copy "
            f"from {_line(c.writer)} that {does} these rows")


def _no_go_ahead(c: RootCause) -> str:
    peer = offset_text(c.want_offset)
    if c.events:  # the first copy into the rows, which the peer uses for itself
        return (f"the copy at {_line(c.site)} writes rows of `{c.buffer}` on {peer} that {peer} "
                f"{_PEERS_USE[c.events[0]]}, with no word from {peer} that it is done with them")
    return (f"the copy at {_line(c.site)} writes rows of `{c.buffer}` on {peer} again with no word from {peer} "
            f"since the last copy into them: that copy may still be landing, or {peer} still reading it")


# NO_GO_AHEAD's first copy into rows its peer uses: what the peer does with them.
_PEERS_USE = {StepEvent.STORE: "fills itself", StepEvent.LOAD: "may still be reading",
              StepEvent.DMA_START: "may still be copying from"}


_ACTIONS = {StepEvent.LOAD: "read", StepEvent.STORE: "write", StepEvent.DMA_START: "copy",
            StepEvent.SIGNAL: "signal"}


# The Pallas pipeline's own copy of a block, as the early action of a LATE_WAIT: its line is
# the pallas_call's, so the statement says what it is.
_PIPELINE_COPIES = {
    PipelineCopy.COPY_IN: "the pipeline refills the input block `{buffer}` at the start of a grid step",
    PipelineCopy.COPY_OUT: "the pipeline writes the output block `{buffer}` back at the end of each grid step",
    PipelineCopy.WRITE_BACK: "the pipeline writes an output block into `{buffer}` at the end of each grid step",
}


def _late_pipeline_copy(c: RootCause, other: str) -> str:
    assert c.pipeline is not None
    return (f"{_PIPELINE_COPIES[c.pipeline].format(buffer=c.buffer)} ({_line(c.before)}, its pallas_call), ahead of "
            f"the wait at {_line(c.site)} on {_sem(c)} that orders it after the {other} from {_line(c.by)}: "
            "that wait comes only in a later grid step")


def _late_wait(c: RootCause) -> str:
    early, other = (_ACTIONS.get(e, "access") for e in c.events[:2])
    if c.pipeline is not None:
        return _late_pipeline_copy(c, other)
    copy = c.events[1] is StepEvent.DMA_START
    through = "" if c.writer == c.by else f" (through the signal at {_line(c.writer)})"
    lets_go = ""
    if c.lets_go is not None:  # the early action is a signal that lets the racing access go
        access = _ACTIONS.get(c.events[2], "access") if len(c.events) > 2 else "access"
        lets_go = f", which lets the {access} at {_line(c.lets_go)} go,"
    return (f"the {early} at {_line(c.before)}{lets_go} comes before the wait at {_line(c.site)} on "
            f"{_sem(c)} that orders it after the {other} {'from' if copy else 'at'} {_line(c.by)}{through}: "
            "until that wait, nothing keeps the two apart")


def _competing_waits(c: RootCause) -> str:
    return (f"the waits at {_line(c.site)} compete for one count of {_sem(c)}: each takes what it waited "
            "for, so the first threads through consume the signals the others wait for")


_STATEMENTS = {
    CauseKind.UNWAITED_COPY: _unwaited_copy,
    CauseKind.UNCONSUMED_SIGNAL: _unconsumed_signal,
    CauseKind.WRONG_SIGNALLER: _wrong_signaller,
    CauseKind.WRONG_COPY: _wrong_copy,
    CauseKind.OTHER_KERNELS_SIGNAL: _other_kernels_signal,
    CauseKind.NO_GO_AHEAD: _no_go_ahead,
    CauseKind.LATE_WAIT: _late_wait,
    CauseKind.COMPETING_WAITS: _competing_waits,
}


def _call(sides: tuple[str, ...], local: bool = False) -> str:
    if local:  # pltpu.make_async_copy: its one semaphore is the receive side, awaited by `.wait()`
        return "`.wait()`"
    if sides == ("send",):
        return "`.wait_send()`"
    if sides == ("recv",):
        return "`.wait_recv()` (on the receiving device)"
    return "`.wait()` (or `.wait_send()` / `.wait_recv()`)"


def _fix_unwaited_copy(c: RootCause) -> str:
    if c.waited_with is WaitCall.TMA_STORE_WAIT:
        call = "`plgpu.wait_smem_to_gmem(0)`" + (" (not `wait_read_only=True`)" if c.sides == ("recv",) else "")
    elif c.waited_with is WaitCall.BARRIER_WAIT:
        call = "`plgpu.barrier_wait` on the barrier it arrives on"
    else:
        call = _call(c.sides, c.local)
    if c.waited_with is not None:
        after = f"after the last run of {_line(c.site)} (after the loop)" if c.last_only else f"after {_line(c.site)}"
        return f"wait for it with {call} {after}"
    if c.last_only:
        return f"call its {_call(c.sides, c.local)} once more after the last run of {_line(c.site)} (after the loop)"
    return f"call its {_call(c.sides, c.local)} after {_line(c.site)}"


def _fix_unconsumed_signal(c: RootCause) -> str:
    call = ("`plgpu.barrier_wait`" if c.waited_with is WaitCall.BARRIER_WAIT
            else "`pl.semaphore_wait`" if c.semaphore_shown_as else f"`pl.semaphore_wait({c.semaphore}, ...)`")
    if c.before is not None:
        return (f"wait on {_sem(c)} ({call}) before {_line(c.before)}, which the signal at "
                f"{_line(c.site)} is meant to let go")
    return f"wait on {_sem(c)} ({call}) for every signal at {_line(c.site)} before the kernel exits, or do not signal it"


def _fix_wrong_signaller(c: RootCause) -> str:
    sent = -c.by_offset if c.by_offset is not None else None
    wanted = -c.want_offset if c.want_offset is not None else None
    needs = (f"the signal at {_line(c.writer)} needs it from the device it signals" if c.writer_signals
             else f"the copy at {_line(c.writer)} needs it from the device it writes into")
    return (f"the signal at {_line(c.site)} goes from each device d to {offset_text(sent)}; {needs}: "
            f"send it to {offset_text(wanted)} instead")


def _fix_other_kernels_signal(c: RootCause) -> str:
    if not c.kernels or c.kernels[0] == c.kernels[1]:  # one kernel called again: one collective_id
        return (f"add a second barrier round after the wait at {_line(c.wait)}, as the double barrier of JAX's "
                "distributed Pallas guide does, so that no device can finish this call and signal "
                f"{_sem(c)} for the next one before every peer has passed this wait")
    waiter, signaller = c.kernels
    return (f"give `{waiter}` and `{signaller}` different collective_ids, or have the wait at "
            f"{_line(c.wait)} count only signals of this kernel (a second barrier round, as the double "
            "barrier of JAX's distributed Pallas guide does)")


def _fix_wrong_copy(c: RootCause) -> str:
    if c.sides == ("send",):
        if c.by == c.writer:
            return (f"give each copy from {_line(c.by)} in flight a send semaphore (or source slot) of its own, "
                    f"or wait for each one's send side before its rows are reused")
        return (f"give the copies from {_line(c.writer)} and {_line(c.by)} send semaphores of their own, so "
                f"that the wait at {_line(c.site)} counts only the copy from {_line(c.writer)}")
    if c.by == c.writer:
        return (f"give each copy from {_line(c.by)} in flight a receive semaphore (or slot) of its own, or "
                f"do not start the next one before the wait at {_line(c.site)} has taken the last")
    return (f"give the copies from {_line(c.writer)} and {_line(c.by)} receive semaphores (or slots) of their "
            f"own, or hold the copy from {_line(c.by)} back until the wait at {_line(c.site)} has taken the one "
            f"from {_line(c.writer)}")


def _fix_no_go_ahead(c: RootCause) -> str:
    peer = offset_text(c.want_offset)
    done = "" if c.events else " (after it has read what landed)"
    return (f"have {peer} signal device d once it is done with `{c.buffer}`{done}, "
            f"and wait for that signal before the copy at {_line(c.site)}: a capacity semaphore")


def _fix_late_wait(c: RootCause) -> str:
    moved = [f"the signal at {_line(n)}" for n in c.needs] + [f"the wait at {_line(c.site)}"]
    what = moved[0] if len(moved) == 1 else ", ".join(moved[:-1]) + " and " + moved[-1]
    if c.pipeline is not None:
        other = _ACTIONS.get(c.events[1], "access") if len(c.events) > 1 else "access"
        when = "the next step starts" if c.pipeline is PipelineCopy.COPY_IN else "it ends"
        return (f"wait for the {other} from {_line(c.by)} within the grid step that starts it: move {what} "
                f"into that step, before {when}")
    return f"move {what} before {_line(c.before)}"


def _fix_competing_waits(c: RootCause) -> str:
    return (f"let the wait at {_line(c.site)} leave the count (`decrement=False`), so that every thread sees the "
            "same total, or signal once for each thread that waits")


_FIXES = {
    CauseKind.UNWAITED_COPY: _fix_unwaited_copy,
    CauseKind.UNCONSUMED_SIGNAL: _fix_unconsumed_signal,
    CauseKind.WRONG_SIGNALLER: _fix_wrong_signaller,
    CauseKind.WRONG_COPY: _fix_wrong_copy,
    CauseKind.OTHER_KERNELS_SIGNAL: _fix_other_kernels_signal,
    CauseKind.NO_GO_AHEAD: _fix_no_go_ahead,
    CauseKind.LATE_WAIT: _fix_late_wait,
    CauseKind.COMPETING_WAITS: _fix_competing_waits,
}
