"""Schedule a cut: run the semantics so that each thread takes exactly its share of steps.

The z3 engine's counting relaxation proposes a cut (how far each thread got, with which
input values) without saying in which order things happened. Finding that order with the
solver is the expensive part of a satisfiable query; for most protocols a greedy schedule
finds it at once: DMA completions and signals as early as possible (more in a count never
hurts a wait), semaphore reads next, waits as late as possible, decrementing ones last (so
they take only what nothing else needed first). Competition between waiters is settled by
the cut itself: a thread whose share stops before a wait never takes from it.

The result is an execution of the semantics, so it is valid whatever it reaches; the caller
checks that it reaches what was asked, and asks the solver for the order when it does not.
"""

from __future__ import annotations

from semcheck import ir
from semcheck.semantics import Action, EventFires, State, System, ThreadStep


def _rank(instr: ir.Instr) -> int:
    if isinstance(instr, (ir.Wait, ir.DmaWait)):
        return 4 if getattr(instr, "decrement", True) else 3
    if isinstance(instr, ir.Read):
        return 2
    return 1


def schedule(
    system: System, initial: State, steps: list[int], lazy_completions: bool = False
) -> tuple[list[Action], list[State]]:
    """Actions and states of a greedy run in which thread t takes at most `steps[t]` steps
    and every DMA completion happens as soon as it can (with `lazy_completions`: only when
    no thread can take a step, which is how a copy stays in flight across an access)."""
    ranks = [[_rank(instr) for instr in body] for body in system.bodies]
    left = list(steps)
    state, states = initial, [initial]
    actions: list[Action] = []
    while True:
        choice: Action | None = None
        best = None
        completion: Action | None = None
        for action in system.enabled(state):
            if isinstance(action, EventFires):
                completion = completion or action
                if lazy_completions:
                    continue
                choice = action
                break
            t = action.thread
            if left[t] <= 0:
                continue
            rank = ranks[t][state.pcs[t]]
            if best is None or rank < best:
                choice, best = action, rank
        choice = choice or completion
        if choice is None:
            return actions, states
        if isinstance(choice, ThreadStep):
            left[choice.thread] -= 1
        state = system.step(state, choice)
        actions.append(choice)
        states.append(state)
