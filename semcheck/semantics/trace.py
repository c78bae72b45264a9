"""Turn a path of actions into the steps a person reads (and the graph draws).

A counterexample is stored as its initial state and action sequence, and rebuilt by
replaying the semantics, so every engine produces the same kind of trace.
"""

from __future__ import annotations

from semcheck import ir
from semcheck.result import Completion, RegionRef, StepEvent, TraceStep
from semcheck.semantics.state import FAULTED, RECV, SEND, Action, EventFires, Fault, State, ThreadStep
from semcheck.semantics.system import System


def replay(system: System, initial: State, actions: list[Action]) -> list[State]:
    """The states along a path, starting with `initial`; raises if an action is not enabled,
    which would mean the engine and the semantics disagree."""
    states = [initial]
    for action in actions:
        if action not in system.enabled(states[-1]):
            raise AssertionError(f"replay diverged: {action!r} is not enabled at step {len(states)}")
        states.append(system.step(states[-1], action))
    return states


def build(system: System, initial: State, actions: list[Action]) -> list[TraceStep]:
    states = replay(system, initial, actions)
    additions: dict[int, list[int]] = {}  # semaphore -> steps that added since the last take
    # (issuer, start pc, side) -> dma_start steps whose completion on that side is pending.
    # Copies from one start site are interchangeable to the semantics; first in, first out.
    in_flight: dict[tuple[int, int, ir.DmaSide], list[int]] = {}
    steps = []
    for i, action in enumerate(actions):
        before, after = states[i], states[i + 1]
        step = _describe(system, before, after, action, i + 1)
        _link_copy(system, before, action, step, in_flight)
        changed = [s for s, (a, b) in enumerate(zip(before.sems, after.sems)) if a != b]
        for sid in changed:
            if after.sems[sid] > before.sems[sid]:
                additions.setdefault(sid, []).append(step.index)
            elif step.event is StepEvent.ENTRY:  # a fresh allocation wipes what was there
                step.wiped += (system.instances[sid].short,)
                step.wiped_additions += tuple(additions.pop(sid, []))
            else:
                step.fed_by = tuple(additions.pop(sid, []))
        if step.event == "wait" and not changed and step.semaphore is not None:
            waited = _sem_of_wait(system, before, action)
            if waited is not None:
                step.fed_by = tuple(additions.get(waited, []))
        steps.append(step)
    return steps


def _link_copy(system: System, before: State, action: Action, step: TraceStep, in_flight: dict) -> None:
    if isinstance(action, EventFires):
        event = action.event
        pending = in_flight.get((event.issuer, event.start_pc, event.side))
        if pending:
            step.started_by = pending.pop(0)
        return
    t = action.thread
    instr = system.bodies[t][before.pcs[t]]
    if isinstance(instr, ir.DmaStart) and step.fault is None:
        pc = before.pcs[t]
        sides = (RECV, SEND) if instr.send_sem is not None else (RECV,)
        for side in sides:
            in_flight.setdefault((t, pc, side), []).append(step.index)


def _sem_of_wait(system: System, state: State, action: Action) -> int | None:
    if not isinstance(action, ThreadStep):
        return None
    t = action.thread
    instr = system.current(state, t)
    if not isinstance(instr, (ir.Wait, ir.DmaWait)):
        return None
    try:
        return system.resolve(t, instr.sem, state)
    except Exception:
        return None


def _describe(system: System, before: State, after: State, action: Action, index: int) -> TraceStep:
    if isinstance(action, EventFires):
        return _describe_event(system, before, after, action.event, index)
    t = action.thread
    thread = system.threads[t]
    instr = system.bodies[t][before.pcs[t]]
    step = TraceStep(
        index=index,
        actor=system.thread_name(t),
        device=thread.device,
        core=thread.core,
        sub=thread.sub,
        event=_EVENT_NAMES[type(instr)],
        text="",
        location=instr.loc,
    )
    step.kernel = _kernel_at(system, t, before.pcs[t])
    step.invocation = _invocation_at(system, t, before.pcs[t])
    if after.pcs[t] == FAULTED:
        step.fault = next(f[3] for f in after.faults if f[0] == t)
        step.text = f"FAULT in {step.event.value}: {step.fault}"
        return step
    describe = _TEXT_RULES.get(type(instr), _text_plain)
    step.text = describe(system, before, after, t, instr, step) + _hazard_note(before, after)
    return step


def _kernel_at(system: System, t: int, pc: int) -> str | None:
    """The kernel of a program that instruction `pc` of thread `t` belongs to."""
    return system.kernel_of(_entered(system, t, pc))


def _invocation_at(system: System, t: int, pc: int) -> int | None:
    """The invocation of thread t that instruction `pc` belongs to, where threads run more
    than one; None where each runs one."""
    return None if system.most_invocations <= 1 else _entered(system, t, pc)


def _entered(system: System, t: int, pc: int) -> int:
    """The invocation (from 1) that instruction `pc` of thread `t` belongs to: an entry, the
    one it enters."""
    entering = isinstance(system.bodies[t][pc], ir.KernelEntry) if pc < len(system.bodies[t]) else False
    return max(system.invocation_at[t][pc] + (1 if entering else 0), 1)


def _hazard_note(before: State, after: State) -> str:
    new = [h for h in after.hazards if h not in before.hazards]
    # two hazards can read alike (one access against two copies in flight over the same rows)
    said = dict.fromkeys(f"  -- {h.kind.upper().replace('_', ' ')}: {h.detail}" for h in new)
    return "".join(said)


def _called(system: System, sid: int, step: TraceStep) -> str:
    """Semaphore instance `sid` as the step's kernel calls it: in a program, a scratch
    semaphore carried from the kernel before goes by the later kernel's own name there
    (`ir.SemAlias`), and a counter the lowering made by what it stands for
    (`SemInstance.shown_to`); `step.semaphore` keeps the one name the model has."""
    inst = system.instances[sid]
    for alias in system.protocol.aliases:
        if alias.kernel == step.kernel and alias.decl == inst.decl.name:
            return inst.short_as(alias.name)
    return inst.shown_to(step.device, step.core)


def _touches(system: System, step: TraceStep, sid: int) -> None:
    """Record on `step` the semaphore it changes or looks at: the model's name of it, and
    where the lowering made it, the name the step's text gives it."""
    inst = system.instances[sid]
    step.semaphore, step.declaration = inst.short, inst.decl.name
    if inst.decl.shown_as:
        step.semaphore_shown_as = _called(system, sid, step)


def _note_sem(system: System, step: TraceStep, sid: int, before: State, after: State) -> str:
    _touches(system, step, sid)
    step.before, step.after = before.sems[sid], after.sems[sid]
    # a phrase for a name can end in a number ("... at line 27"), which the count would run on from
    said = f"{step.semaphore_shown_as}:" if step.semaphore_shown_as else _called(system, sid, step)
    return f"{said} {step.before} -> {step.after}"


def _note_change(system: System, step: TraceStep, sid: int, before: State, after: State) -> str:
    _note_sem(system, step, sid, before, after)
    return f"{step.before} -> {step.after}"


def _text_signal(system, before, after, t, instr: ir.Signal, step) -> str:
    sid = system.resolve(t, instr.sem, before)
    step.amount = system.eval(instr.inc, t, before)
    if instr.sem.device is not None:
        step.target_device = system.instances[sid].device
    return f"signal {_called(system, sid, step)} += {step.amount} ({_note_change(system, step, sid, before, after)})"


def _text_wait(system, before, after, t, instr, step) -> str:
    sid = system.resolve(t, instr.sem, before)
    need = system.eval(instr.nbytes if isinstance(instr, ir.DmaWait) else instr.value, t, before)
    _touches(system, step, sid)
    step.before, step.after = before.sems[sid], after.sems[sid]
    step.need = need
    if isinstance(instr, ir.DmaWait):
        step.side = str(instr.side)
    step.decrement = not isinstance(instr, ir.Wait) or instr.decrement
    called = _called(system, sid, step)
    if isinstance(instr, ir.Wait) and not instr.decrement:
        return f"wait {called} >= {need} without decrement (holds {step.before})"
    what = f"wait {called} >= {need}" if isinstance(instr, ir.Wait) else (
        f"dma_wait ({instr.side}) {called} for {_amount(system, need)}"
    )
    return f"{what} ({step.before} -> {step.after})"


def _amount(system, units: int) -> str:
    """A DMA semaphore amount in the protocol's units (TPU: 32-byte units)."""
    unit = system.protocol.dma_unit
    return f"{units} bytes" if unit == 1 else f"{units} units of {unit} bytes"


def _text_read(system, before, after, t, instr: ir.Read, step) -> str:
    sid = system.resolve(t, instr.sem, before)
    _touches(system, step, sid)
    step.before = step.after = before.sems[sid]
    return f"read {_called(system, sid, step)} = {before.sems[sid]} into {instr.dst}"


def _text_dma_start(system, before, after, t, instr: ir.DmaStart, step) -> str:
    new = list(after.events)
    for e in before.events:
        new.remove(e)
    step.completions = tuple(
        Completion(str(e.side), system.instances[e.sem].short, e.inc) for e in new
    )
    parts = [f"{e.side} {_called(system, e.sem, step)} +{e.inc}" for e in new]
    device, core = instr.dst_place()
    if device is not None:
        step.target_device = system.eval(device, t, before)
    core = None if core is None else system.eval(core, t, before)
    src_device = None if instr.src_device is None else system.eval(instr.src_device, t, before)
    step.src = _region(system, t, instr.src, before, write=False, device=src_device)
    step.dst = _region(system, t, instr.dst, before, write=True, device=step.target_device, core=core)
    # A resolved destination names its device (out[0:8]@d1); a bare buffer name needs it said.
    target = "" if step.target_device is None or step.dst is not None else f" to device {step.target_device}"
    src = step.src if step.src is not None else instr.src.buffer
    dst = step.dst if step.dst is not None else instr.dst.buffer
    if not parts:  # a zero-byte copy: complete at its start (rules.py)
        was, now = dict(before.sems.items), dict(after.sems.items)
        added = [f"{_called(system, sid, step)} +{now.get(sid, 0) - was.get(sid, 0)}"
                 for sid in sorted(set(was) | set(now)) if now.get(sid, 0) != was.get(sid, 0)]
        done = f"adds {', '.join(added)}" if added else "signals nothing"
        return f"start DMA {src} -> {dst}{target} (zero bytes: complete at once, {done})"
    return f"start DMA {src} -> {dst}{target} (on completion: {', '.join(parts)})"


def _region(system: System, t: int, region: ir.Region, state: State, *, write: bool,
            device: int | None = None, core: int | None = None) -> RegionRef | None:
    try:
        access = system.resolve_region(t, region, state, write, device, core)
    except (Fault, AssertionError, KeyError):  # a target that does not exist: the step faults
        return None
    return RegionRef(region.buffer, device, access.starts, access.sizes)


def _text_branch(system, before, after, t, instr: ir.Branch, step) -> str:
    taken = after.pcs[t] == instr.target and instr.target != before.pcs[t] + 1
    return f"branch on {instr.cond}: {'taken' if taken else 'not taken'}"


def _text_assign(system, before, after, t, instr: ir.Assign, step) -> str:
    return f"{instr.dst} := {instr.value} = {system.eval(ir.Reg(instr.dst), t, after)}"


def _text_plain(system, before, after, t, instr, step) -> str:
    region = getattr(instr, "region", None)
    if region is None:
        return f"{step.event.value}"
    device = getattr(instr, "device", None)
    peer = None if device is None else system.eval(device, t, before)
    step.src = _region(system, t, region, before, write=isinstance(instr, ir.Store), device=peer)
    what = "atomic update" if isinstance(instr, ir.Store) and instr.atomic else step.event.value
    pipeline = getattr(instr, "pipeline", None)
    if pipeline is not None:  # located at the pallas_call: say which of the pipeline's copies
        what = _PIPELINE_COPIES[pipeline]
    return f"{what} {region.buffer}" + ("" if peer is None else f" on device {peer}")


_PIPELINE_COPIES = {
    ir.PipelineCopy.COPY_IN: "pipeline copy-in (before the grid step) of",
    ir.PipelineCopy.COPY_OUT: "pipeline copy-out (after the grid step) of",
    ir.PipelineCopy.WRITE_BACK: "pipeline write-back (after the grid step) into",
}


def _describe_event(system: System, before: State, after: State, event, index: int) -> TraceStep:
    inst = system.instances[event.sem]
    start = system.bodies[event.issuer][event.start_pc]
    side = "lands (receive side)" if event.side == RECV else "has left (send side)"
    step = TraceStep(
        index=index,
        actor=f"DMA from {system.thread_name(event.issuer)}",
        device=inst.device,
        core=inst.core if inst.core is not None else 0,
        sub=0,
        event=StepEvent.DMA_RECV_DONE if event.side == RECV else StepEvent.DMA_SEND_DONE,
        text="",
        location=start.loc,
        side=str(event.side),
        amount=event.inc,
        kernel=_kernel_at(system, event.issuer, event.start_pc),
        invocation=_invocation_at(system, event.issuer, event.start_pc),
    )
    step.text = (
        f"copy started at line {start.loc.line} {side}: {_note_sem(system, step, event.sem, before, after)}"
        + _hazard_note(before, after)
    )
    return step


_EVENT_NAMES = {
    ir.Signal: StepEvent.SIGNAL,
    ir.Wait: StepEvent.WAIT,
    ir.DmaWait: StepEvent.DMA_WAIT,
    ir.Read: StepEvent.READ,
    ir.DmaStart: StepEvent.DMA_START,
    ir.Load: StepEvent.LOAD,
    ir.Store: StepEvent.STORE,
    ir.Branch: StepEvent.BRANCH,
    ir.Jump: StepEvent.JUMP,
    ir.Assign: StepEvent.ASSIGN,
    ir.KernelEntry: StepEvent.ENTRY,
    ir.KernelExit: StepEvent.EXIT,
}

_TEXT_RULES = {
    ir.Signal: _text_signal,
    ir.Wait: _text_wait,
    ir.DmaWait: _text_wait,
    ir.Read: _text_read,
    ir.DmaStart: _text_dma_start,
    ir.Branch: _text_branch,
    ir.Assign: _text_assign,
}
