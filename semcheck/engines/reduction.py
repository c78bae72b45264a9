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

from semcheck.semantics import Action, State, System, conflict


def stubborn_subset(system: System, state: State, enabled: list[Action]) -> list[Action]:
    """The enabled actions of a smallest stubborn set found from any enabled seed."""
    if len(enabled) <= 1:
        return enabled
    ctx = _Context(system, state, enabled)
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


def independent(system: System, state: State, a: Action, b: Action) -> bool:
    """Two actions of different actors, both enabled in `state`, that commute and cannot
    disable each other."""
    if a == b or (a[0] == "t" and b[0] == "t" and a[1] == b[1]):
        return False
    return not conflict(system.action_footprint(state, a), system.action_footprint(state, b))


class _Context:
    """What one state's closures share: each actor's future footprint as a signature (see
    `System.signature`), and unions of them that answer most queries at once."""

    def __init__(self, system: System, state: State, enabled: list[Action]):
        self.system, self.state = system, state
        self.enabled = set(enabled)
        pcs = state.pcs
        self.active = [t for t, body in enumerate(system.bodies) if 0 <= pcs[t] < len(body)]
        self.events = sorted(set(state.events))
        self.actor_sig: dict[Action, tuple[int, int]] = {
            ("t", t): system.future_signatures[t][pcs[t]] for t in self.active
        }
        self.actor_sig.update((("e", e), system.event_signature(e)) for e in self.events)
        self._others = _unions_without_each(self.actor_sig)
        self._blocked: dict[int, tuple | None] = {}

    def own_sig(self, action: Action) -> tuple[int, int]:
        if action[0] == "e":
            return self.actor_sig[action]
        t = action[1]
        return self.system.signatures[t][self.state.pcs[t]]

    def isolated(self, action: Action) -> bool:
        """An enabled action that conflicts with nothing any other actor may ever do."""
        return not _clash(self.own_sig(action), self._others[action])

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
            xa, ya = self.own_sig(action)
            xo, yo = self._others[action]
            if not (xa & yo or xo & ya):
                return []
            if action[0] == "e":
                return self._required_by_completion(action, xa, ya)
            # the hot loop of the whole search: kept to plain integer tests
            return [
                other for other, (xb, yb) in self.actor_sig.items()
                if (xa & yb or xb & ya) and other != action
            ]
        blocked = self._blocked_wait(action[1])
        if blocked is None:  # not at a wait: cannot happen for an active, disabled thread
            return []
        bit = 1 << blocked[0]  # additions are channel 0 of x
        return [other for other, (x, _y) in self.actor_sig.items() if x & bit and other != action]


    def _required_by_completion(self, action: Action, xa: int, ya: int) -> list[Action]:
        """As for any action, except that a thread's future counts only up to a wait that
        this completion alone can satisfy (`System.guarded_future_signature`)."""
        event, pcs, guarded = action[1], self.state.pcs, self.system.guarded_future_signature
        required = []
        for other, (xb, yb) in self.actor_sig.items():
            if other == action:
                continue
            if other[0] == "t":
                xb, yb = guarded(other[1], pcs[other[1]], event)
            if xa & yb or xb & ya:
                required.append(other)
        return required


def _clash(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return bool(a[0] & b[1] or b[0] & a[1])


def _unions_without_each(sigs: dict[Action, tuple[int, int]]) -> dict[Action, tuple[int, int]]:
    """For each actor, the union of every other actor's signature (prefix/suffix unions)."""
    keys = list(sigs)
    prefix = [(0, 0)]
    for k in keys:
        x, y = sigs[k]
        prefix.append((prefix[-1][0] | x, prefix[-1][1] | y))
    suffix = [(0, 0)]
    for k in reversed(keys):
        x, y = sigs[k]
        suffix.append((suffix[-1][0] | x, suffix[-1][1] | y))
    suffix.reverse()
    return {
        k: (prefix[i][0] | suffix[i + 1][0], prefix[i][1] | suffix[i + 1][1])
        for i, k in enumerate(keys)
    }
