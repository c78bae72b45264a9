"""Partial-order reduction keyed on semaphore identity: stubborn sets and sleep sets.

Every property semcheck checks is decided in terminal states (faults persist until the end),
so a deadlock-preserving stubborn set suffices: it reaches every terminal state of the full
system (Valmari's theorem; no cycle proviso is needed for terminal states).

A stubborn set is a set of *actors* (threads, pending DMA completions) closed under:

* an enabled action: every actor that may, now or later, do something that does not commute
  with it (`semantics.conflict`: a read against a change of the count, a decrementing wait
  against another wait or a read of the same semaphore);
* a blocked wait on semaphore s: every actor that may, now or later, add to s (without one
  of them moving first, the wait cannot become enabled).

Additions commute with each other and never disable a wait, and on TPU only a semaphore's
owner waits on it, so in a typical collective every enabled action forms a stubborn set of
its own and the search follows one path through each independent stretch.
"""

from __future__ import annotations

from semcheck.engines.explicit.independence import Independence
from semcheck.footprints import X_INC, Channels
from semcheck.semantics import Action, State


def stubborn_subset(ind: Independence, state: State, enabled: list[Action]) -> list[Action]:
    """The enabled actions of a smallest stubborn set found from any enabled seed."""
    if len(enabled) <= 1:
        return enabled
    ctx = _Context(ind, state, enabled)
    for seed in enabled:  # most actions conflict with nothing: a stubborn set of their own
        if ctx.isolated(seed):
            return [seed]
    best: list[Action] = enabled
    # A pending completion usually needs only the thread blocked on it: try those first,
    # so a small set is found early and later closures stop as soon as they grow past it.
    seeds = [a for a in enabled if a[0] == "e"] + [a for a in enabled if a[0] == "t"]
    for seed in seeds:
        members = ctx.closure(seed, limit=len(best))
        if members is not None:
            best = [a for a in enabled if a in members]
            if len(best) == 1:
                break
    return best


class _Context:
    """What one state's closures share. Every query starts from the resources an action
    touches and asks only the threads that may touch them (`Independence.touchers`) and the
    pending completions on them, so its cost does not grow with the threads that cannot
    interfere."""

    def __init__(self, ind: Independence, state: State, enabled: list[Action]):
        self.ind, self.state = ind, state
        self.system = ind.system
        self.enabled = set(enabled)
        self._blocked: dict[int, tuple | None] = {}

    def _active(self, t: int) -> bool:
        return 0 <= self.state.pcs[t] < len(self.system.bodies[t])

    def _clashing(self, action: Action, own: Channels, guard=None, first: bool = False) -> list[Action]:
        """Every other actor whose footprint conflicts with `own`. A thread's footprint is
        its future, cut at the first wait it cannot pass while the stubborn set stands
        still: with `guard` (a completion in the set), a wait only that completion can
        satisfy; for an action of a thread, a wait only a copy that thread has yet to start
        can satisfy (`Independence.cut`). With `first`, stop at the first one."""
        found: dict[Action, None] = {}
        pcs, tables, touchers, ind = self.state.pcs, self.ind.tables, self.ind.touchers, self.ind
        me = action[1] if action[0] == "t" else None
        cuts: dict[int, tuple[int, ...] | None] = {}
        for r, (xa, ya) in own.items():
            for t in touchers.get(r, ()):
                if t == me or ("t", t) in found or not self._active(t):
                    continue
                if t not in cuts:
                    if guard is not None:
                        cuts[t] = ind.guard_stops(t, guard)
                    else:
                        stop = ind.cut(self.state, me, t) if me is not None else None
                        cuts[t] = None if stop is None else (stop,)
                stops = cuts[t]
                if stops is None:
                    xb, yb = tables[t].future(pcs[t], r)
                else:
                    xb, yb = tables[t].future_before(pcs[t], r, stops)
                if xa & yb or xb & ya:
                    found[("t", t)] = None
                    if first:
                        return list(found)
            for other, xb, yb in ind.pending_on(self.state.events, r):
                if other != action and other not in found and (xa & yb or xb & ya):
                    found[other] = None
                    if first:
                        return list(found)
        return list(found)

    def isolated(self, action: Action) -> bool:
        """An enabled action that conflicts with nothing any other actor may do before the
        action itself (for a completion: up to the waits only it can satisfy)."""
        guard = action[1] if action[0] == "e" else None
        return not self._clashing(action, self.ind.own(self.state, action), guard=guard, first=True)

    def closure(self, seed: Action, limit: int) -> set[Action] | None:
        """The actors a stubborn set containing `seed` needs, or None as soon as it holds
        `limit` enabled actions (no better than one already found)."""
        members = {seed}
        work = [seed]
        enabled_count = 1
        while work:
            action = work.pop()
            for other in self._required_by(action):
                if other not in members:
                    members.add(other)
                    work.append(other)
                    if other in self.enabled:
                        enabled_count += 1
                        if enabled_count >= limit:
                            return None
        return members

    def _blocked_wait(self, t: int):
        if t not in self._blocked:
            self._blocked[t] = self.system.blocked_wait(self.state, t)
        return self._blocked[t]

    def _required_by(self, action: Action) -> list[Action]:
        if action in self.enabled:
            own = self.ind.own(self.state, action)
            # a completion is compared with each thread's future up to the waits it alone
            # can satisfy (`Independence.guard_stops`)
            return self._clashing(action, own, guard=action[1] if action[0] == "e" else None)
        blocked = self._blocked_wait(action[1])
        if blocked is None:  # not at a wait: cannot happen for an active, disabled thread
            return []
        # a blocked wait needs every actor that may still add to its semaphore
        return self._clashing(action, {blocked[0]: (0, X_INC)})
