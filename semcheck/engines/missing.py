"""Name the missing action: for a wait nothing can satisfy (or a semaphore left non-zero),
the static sites of the kernel that could add to (or take from) its semaphore, which of them
ran in the counterexample and why the others did not; and source lines that add to the same
semaphore array on the other devices but that some thread does not have at all (a forgotten
or mis-guarded signal: "device 0 has no signal at line 28").

Sites are read off the semantics' own footprints (`System.footprints`: every semaphore an
instruction may add to or take from, over every value its registers may hold), so a site is
named only where the semantics says it can act on that semaphore.
"""

from __future__ import annotations

from semcheck import ir
from semcheck.result import AbsentSite, MissingAction, Site
from semcheck.semantics import FAULTED, Action, State, System, ThreadStep

_SHOWN_SITES = 8  # a semaphore any thread may reach (a register target) lists this many


def _what(instr: ir.Instr) -> str:
    return _WHAT.get(type(instr), type(instr).__name__)


_WHAT = {
    ir.Signal: "semaphore_signal",
    ir.DmaStart: "dma_start",
    ir.Wait: "semaphore_wait",
    ir.DmaWait: "dma_wait",
    ir.KernelEntry: "kernel entry",
}


def missing_action(
    system: System, states: list[State], actions: list[Action], sid: int, needs: int | None, *, adds: bool,
    judged: State | None = None,
) -> MissingAction:
    """The sites that could add to (`adds`) or take from semaphore `sid`, with what the
    path `actions` (through `states`) did with them, and what `sid` holds in `judged` (the
    path's last state unless given)."""
    runs: dict[tuple[int, int], list[int]] = {}
    for j, action in enumerate(actions):
        if isinstance(action, ThreadStep):
            t = action.thread
            runs.setdefault((t, states[j].pcs[t]), []).append(j + 1)
    final = states[-1]
    judged = judged or final
    sites = []
    for t, body in enumerate(system.bodies):
        for pc, instr in enumerate(body):
            fp = system.footprints[t][pc]
            if sid not in (fp.inc if adds else fp.dec):
                continue
            steps = runs.get((t, pc), [])
            device, core = _place(system, t)
            sites.append(Site(
                thread=system.thread_name(t), location=instr.loc, what=_what(instr), adds=adds,
                ran=len(steps), step=steps[-1] if steps else None,
                not_run=None if steps else _why_not_run(system, final, t, pc), device=device, core=core,
            ))
    # Sites that did not run first: they are the likely culprits.
    sites.sort(key=lambda s: (s.ran > 0, s.location.line if s.location else 0, s.thread))
    inst = system.instances[sid]
    return MissingAction(
        semaphore=inst.short,
        semaphore_shown_as=inst.label if inst.decl.shown_as else None,
        needs=needs,
        has=judged.sems[sid],
        sites=tuple(sites[:_SHOWN_SITES]),
        absent=_absent_sites(system, sid) if adds else (),
        in_flight=sum(e.inc for e in judged.events if e.sem == sid),
    )


def _place(system: System, t: int) -> tuple[int, int | None]:
    """(device, core) of thread `t`; the core None where each device has one thread."""
    thread = system.threads[t]
    alone = system.protocol.cores == 1 and thread.sub == 0 and not any(
        u.sub for u in system.threads if u.device == thread.device)
    return thread.device, None if alone else thread.core


def _why_not_run(system: System, state: State, t: int, pc: int) -> str:
    at = state.pcs[t]
    name = system.thread_name(t)
    if at == FAULTED:
        return f"{name} faulted before it"
    if at == len(system.bodies[t]) or at > pc:
        return f"{name} went past it without running it (a branch skips it)"
    here = system.bodies[t][at]
    return f"{name} is stuck at line {here.loc.line}, before it" if here.loc else f"{name} is stuck before it"


def _absent_sites(system: System, sid: int) -> tuple[AbsentSite, ...]:
    """Lines that add to other instances of `sid`'s declaration but not to `sid`, where some
    threads that add to that declaration elsewhere have no instruction at that line."""
    decl = system.instances[sid].decl
    same_decl = frozenset(system.instances.of_decl(decl))
    by_line: dict[ir.Loc, tuple[set[int], frozenset[int], str]] = {}  # line -> (threads, instances reached, what)
    touching: set[int] = set()  # threads that add to the declaration somewhere
    for t, body in enumerate(system.bodies):
        for pc, instr in enumerate(body):
            reached = system.footprints[t][pc].inc & same_decl
            if not reached or instr.loc is None:
                continue
            touching.add(t)
            threads, mask, what = by_line.get(instr.loc, (set(), frozenset(), _what(instr)))
            threads.add(t)
            by_line[instr.loc] = (threads, mask | reached, what)
    out = []
    for loc, (threads, mask, what) in sorted(by_line.items(), key=lambda item: item[0].line):
        if sid in mask:
            continue  # this line does reach the stuck semaphore
        missing = sorted(touching - threads)
        if not missing:
            continue
        reaches = tuple(system.instances[i].short for i in sorted(mask))
        places = [_place(system, t) for t in missing]
        devices = tuple(d for d, _ in places) if all(core is None for _, core in places) else ()
        out.append(AbsentSite(loc, what, tuple(system.thread_name(t) for t in missing), reaches, devices))
    return tuple(out)
