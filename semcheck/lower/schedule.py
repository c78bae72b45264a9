"""When data that arrives by remote DMA is visible: one canonical run of the protocol.

A thread's lowering follows its own stores in program order (data.py), but what a remote
copy writes lands on another thread, at a time only synchronization decides. That is
`semantics/`'s business, so this module asks it, and nothing else: it runs the lowered
protocol once, in a canonical schedule (a thread that can enter the kernel enters first,
else the lowest-numbered thread that can move moves; copies complete only when no thread can
move, or just before a thread reads the buffer they land in on its device), and records, for every point where a thread
reads data (a load, a store's old value, a copy's source), which copies had landed on that
thread since its previous such point. The next lowering applies exactly those payloads
there (`KernelContext.arrivals`); tpu_kernel.py repeats until the protocol and the payloads no
longer change, which is the fixpoint the values of this schedule define.

For a kernel without data races every schedule computes the same values (a load that could
see another copy's data in another schedule races with it), so the verdict holds for the
script's inputs; a race on a buffer that fed such a value is said in the result.

Entries come first because a kernel may be wrong about entry (`remote_before_entry`: a
handshake on a semaphore that is allocated at entry, a remote signal with no handshake). In
a schedule where one device runs on before its peers enter, such a signal is lost, the run
stops in the handshake and no copy lands, so nothing after the handshake could be lowered;
with every thread entered first the handshake completes, as it does whenever the devices
happen to enter together, and the checks find the entry fault and what follows it.
"""

from __future__ import annotations

from semcheck import ir

# A canonical run longer than this many steps is cut (a loop polling forever): the
# payloads seen so far are kept, and tpu_kernel.py reports if they did not settle.
MAX_STEPS = 1_000_000


def canonical_arrivals(protocol: ir.Protocol, read_points: dict, payloads: dict) -> dict:
    """((device, core), read point) -> payloads landed on that thread just before it.

    `read_points` maps id(instr) -> ((device, core), seq); `payloads` id(DmaStart) -> Payload.
    """
    from semcheck.semantics import RECV, EventFires, System, ThreadStep

    system = System(protocol)
    state = system.initial_state(tuple(inp.lo for inp in protocol.inputs))
    landed: dict[tuple[int, int], list] = {}
    arrivals: dict = {}
    seen: set = set()
    for _ in range(MAX_STEPS):
        actions = system.enabled(state)
        threads = [a for a in actions if isinstance(a, ThreadStep)]
        entering = [a for a in threads if isinstance(system.current(state, a.thread), ir.KernelEntry)]
        threads = entering or threads
        action: ThreadStep | EventFires
        if threads:
            action = threads[0]
            instr = system.current(state, action.thread)
            point = read_points.get(id(instr))
            early = None if point is None or point in seen else _landing_before(
                system, actions, point[0], _read_buffer(instr), payloads)
            if early is not None:
                action, point = early, None  # the read comes back here once the copy has landed
                payload = payloads[id(system.bodies[early.event.issuer][early.event.start_pc])]
                landed.setdefault((payload.device, payload.core), []).append(payload)
            elif point is not None and point not in seen:
                seen.add(point)
                thread, _seq = point
                if landed.get(thread):
                    arrivals[point] = tuple(landed.pop(thread))
        elif actions:
            action = actions[0]
            assert isinstance(action, EventFires), "no thread can move: only completions are enabled"
            event = action.event
            if event.side == RECV:
                start = system.bodies[event.issuer][event.start_pc]
                payload = payloads.get(id(start))
                if payload is not None:
                    landed.setdefault((payload.device, payload.core), []).append(payload)
        else:
            break
        state = system.step(state, action)
    return arrivals


def _read_buffer(instr: ir.Instr | None) -> str | None:
    if isinstance(instr, ir.Load):
        return instr.region.buffer
    if isinstance(instr, ir.DmaStart):
        return instr.src.buffer
    return None


def _landing_before(system, actions, thread: tuple[int, int], buffer: str | None, payloads: dict):
    """A pending receive completion of a copy whose payload lands on `thread` in `buffer`,
    which the thread is about to read, or None. Landing it first is one more schedule the
    semantics allows. In a race-free kernel the read touches no part the copy writes, so no
    value changes; when the read races with the copy, the landed data is what the kernel
    means to read, so the protocol can still be built and the race is reported (with the
    note that values may differ between schedules) instead of an unknown value."""
    from semcheck.semantics import RECV, EventFires

    for action in actions:
        if not isinstance(action, EventFires) or action.event.side != RECV:
            continue
        payload = payloads.get(id(system.bodies[action.event.issuer][action.event.start_pc]))
        if payload is not None and (payload.device, payload.core) == thread and payload.ref.alloc == buffer:
            return action
    return None


def same_arrivals(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    return all([p.key() for p in a[k]] == [q.key() for q in b[k]] for k in a)
