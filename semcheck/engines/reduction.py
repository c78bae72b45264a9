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

from semcheck.semantics import Action, Footprint, State, System, conflict


def stubborn_subset(system: System, state: State, enabled: list[Action]) -> list[Action]:
    """The enabled actions of a smallest stubborn set found from any enabled seed."""
    if len(enabled) <= 1:
        return enabled
    ctx = _Context(system, state, enabled)
    best: list[Action] | None = None
    for seed in enabled:
        members = ctx.closure(seed)
        chosen = [a for a in enabled if a in members]
        if best is None or len(chosen) < len(best):
            best = chosen
            if len(best) == 1:
                break
    return best  # type: ignore[return-value]


def independent(system: System, state: State, a: Action, b: Action) -> bool:
    """Two actions of different actors, both enabled in `state`, that commute and cannot
    disable each other."""
    if a == b or (a[0] == "t" and b[0] == "t" and a[1] == b[1]):
        return False
    return not conflict(system.action_footprint(state, a), system.action_footprint(state, b))


class _Context:
    """What one state's closures share: each actor's future footprint."""

    def __init__(self, system: System, state: State, enabled: list[Action]):
        self.system, self.state = system, state
        self.enabled = set(enabled)
        self.active = [
            t for t, body in enumerate(system.bodies) if 0 <= state.pcs[t] < len(body)
        ]
        self.future = {t: system.future_footprint(state, t) for t in self.active}
        self.events = sorted(set(state.events))

    def closure(self, seed: Action) -> set[Action]:
        members = {seed}
        work = [seed]
        while work:
            action = work.pop()
            for other in self._required_by(action):
                if other not in members:
                    members.add(other)
                    work.append(other)
        return members

    def _required_by(self, action: Action):
        system, state = self.system, self.state
        if action[0] == "e":
            yield from self._conflicting(system.action_footprint(state, action), actor=action)
            return
        t = action[1]
        if action in self.enabled:
            yield from self._conflicting(system.footprints[t][state.pcs[t]], actor=action)
            return
        blocked = system.blocked_wait(state, t)
        if blocked is None:  # not at a wait: cannot happen for an active, disabled thread
            return
        bit = 1 << blocked[0]
        for q in self.active:
            if self.future[q].inc & bit:
                yield ("t", q)
        for e in self.events:
            if e.sem == blocked[0]:
                yield ("e", e)

    def _conflicting(self, fp: Footprint, actor: Action):
        for q in self.active:
            if ("t", q) != actor and conflict(fp, self.future[q]):
                yield ("t", q)
        if fp.read or fp.dec or fp.wait:
            for e in self.events:
                if ("e", e) != actor and conflict(fp, self.system.action_footprint(self.state, ("e", e))):
                    yield ("e", e)
