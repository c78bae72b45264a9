"""The reduced search's proviso against ignoring, for protocols with loops.

With loops, the stubborn sets can close a cycle that some enabled actor never moves in: a
thread polling a count nothing else changes is a stubborn set of its own in every state of
its loop, and the search goes round it while a fault, race or early arrival another thread
still had to come is never reached. The stubborn sets keep every end state; what only
runs that never end can reach needs more (docs/search.md, "Runs that never end").

The condition kept (Valmari's, for safety properties): in every bottom strongly connected
component of the explored graph, each actor enabled in some state of the component is
taken in some state of it. Where one is not, that state is expanded again with a stubborn
set SEEDED by the ignored actor (`stubborn_containing`) besides the set it had, and the
search goes on; this repeats until every bottom component keeps the condition. The seed's
closure is what a stubborn set needs, so only the actors it conflicts with join it, not
every other thread's interleaving (expanding the state whole took a ring of 8 spinning
devices past two million states).
"""

from __future__ import annotations

from typing import Protocol

from semcheck import ir
from semcheck.engines.explicit.bottoms import bottom_components, stuck_graph
from semcheck.engines.explicit.independence import Independence
from semcheck.engines.explicit.reduction import isolated_for_good, stubborn_containing, stubborn_subset
from semcheck.engines.explicit.store import SearchTree
from semcheck.semantics import Action, State, System, ThreadStep
from semcheck.semantics.footprints import successors


# The states the proviso may add, at least (and as many as the search had found before it):
# past them the search stops following the threads beside a spin and says so.
PROVISO_FLOOR = 1000


class Visited(Protocol):
    """The search's visited states by position (the packed store)."""

    def __getitem__(self, position: int) -> State: ...


class Proviso:
    """The states expanded with seeded stubborn sets (the seeds each one's expansion must
    include), and how many states the proviso may add."""

    def __init__(self) -> None:
        self.seeds: dict[int, list[Action]] = {}
        self._quiet: dict[tuple[int, int], bool] = {}
        self.started_at: int | None = None
        self.cut = False

    def choose(self, ind: Independence, state: State, enabled: list[Action], i: int) -> list[Action]:
        """The actions seeded state i expands: a stubborn set for each of its seeds (each
        enabled there: a seed is an action the state had enabled) and the default choice
        (the union of stubborn sets is one), the seeds' first."""
        chosen: list[Action] = []
        for seed in self.seeds[i]:
            if seed not in chosen:
                chosen.extend(a for a in stubborn_containing(ind, state, enabled, seed) if a not in chosen)
        chosen.extend(a for a in stubborn_subset(ind, state, enabled) if a not in chosen)
        return chosen

    def leaves_nothing_asleep(self, i: int) -> bool:
        """Whether state i's successors inherit no sleep set: so for every state the
        proviso expands. A sleeping action is left for the sibling that took it, and with
        loops that sibling can be the very cycle that ignored it (a spin that took its
        step first, asleep after the seeded thread's step, which the spin's cycle never
        took: neither order went on)."""
        return i in self.seeds

    def harmless(self, ind: Independence, state: State, actor: Action) -> bool:
        """Whether `actor` can be left standing for ever in this state without losing a
        finding: a thread whose future is only register work, jumps, the kernel's exit and
        reads and waits of semaphores named by constants inside their arrays (nothing it can
        fault on, race or arrive early with), and conflicts with nothing any other actor may
        still do (`isolated_for_good`): every run of the others is a run with it standing,
        and its own steps see nothing. Its own endless loop is a hang like the one found."""
        if not isinstance(actor, ThreadStep):
            return False
        t = actor.thread
        key = (t, state.pcs[t])
        quiet = self._quiet.get(key)
        if quiet is None:
            quiet = self._quiet[key] = _quiet_from(ind.system, t, state.pcs[t])
        return quiet and isolated_for_good(ind, state, t)

    def ignored(self, ind: Independence, states: Visited, edges: list[list[tuple[int, Action]]]
                ) -> list[tuple[int, Action]]:
        """(state, actor) for each bottom component of the explored graph with a cycle in
        which an enabled actor is never taken: the first state (in the search's order) in
        which one is enabled, and the first such actor there (threads, then completions)."""
        graph = stuck_graph(edges)
        if graph is None:
            return []
        system = ind.system
        found = []
        for component in bottom_components(graph):
            members = sorted(component)
            taken = {action for m in members for _j, action in edges[m]}
            for m in members:
                state = states[m]
                actor = next((a for a in system.enabled(state, system.movable_threads(state))
                              if a not in taken and not self.harmless(ind, state, a)), None)
                if actor is not None:
                    found.append((m, actor))
                    break
        return found

    def seed(self, i: int, actor: Action, tree: SearchTree) -> None:
        """State i is to be expanded again with a set seeded by `actor`, which must be taken
        there: no longer asleep."""
        self.seeds.setdefault(i, []).append(actor)
        tree.set_sleep(i, tree.sleep(i) - {actor})

    def start(self, states: int) -> None:
        """The first round, with `states` found so far: the proviso may find as many again,
        and at least `PROVISO_FLOOR`."""
        self.started_at = states

    def allowance(self) -> int:
        """How many states the proviso may add."""
        assert self.started_at is not None
        return max(PROVISO_FLOOR, self.started_at)

    def spent(self, states: int) -> bool:
        """Whether the proviso has found all the states it may (then `cut` says so)."""
        if self.started_at is None or states - self.started_at <= self.allowance():
            return False
        self.cut = True
        return True


def _quiet_from(system: System, t: int, pc: int) -> bool:
    """Whether every instruction reachable from thread t's pc is one that sees no finding
    (`Proviso.harmless`)."""
    body = system.bodies[t]
    seen, work = {pc}, [pc]
    while work:
        k = work.pop()
        if not 0 <= k < len(body):
            continue
        instr = body[k]
        if isinstance(instr, ir.Read):
            if _constant_instance(system, t, instr.sem) is None:
                return False
        elif isinstance(instr, ir.Wait):
            # a wait records a hazard on a barrier semaphore that keeps a ledger (an early
            # pass) or on an mbarrier (a phase overrun)
            sid = _constant_instance(system, t, instr.sem)
            if sid is None or sid in system.ledger_floor or system.instances[sid].decl.arrivals_per_phase:
                return False
        elif not isinstance(instr, (ir.Assign, ir.Branch, ir.Jump, ir.KernelExit)):
            return False
        for j in successors(k, instr):
            if j not in seen:
                seen.add(j)
                work.append(j)
    return True


def _constant_instance(system: System, t: int, ref: ir.SemRef) -> int | None:
    """The semaphore instance `ref` names for thread t where it names one by constants that
    resolve without a fault; else None."""
    decl, base = system.allocs[ref.alloc]
    p, thread = system.protocol, system.threads[t]
    device = thread.device if ref.device is None else ref.device
    core = thread.core if ref.core is None else ref.core
    if not (isinstance(ref.index, int) and 0 <= ref.index < decl.size and isinstance(device, int)
            and 0 <= device < p.devices and isinstance(core, int) and 0 <= core < p.cores):
        return None
    return system.instance_id(decl, base, device, core, ref.index)
