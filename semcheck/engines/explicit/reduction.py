"""Partial-order reduction keyed on semaphore identity: stubborn sets and sleep sets.

Every property semcheck checks is decided in terminal states or seen by a transition and
kept in the state (faults, races, early arrivals), so a deadlock-preserving stubborn set
suffices where every run ends: it reaches every terminal state of the full system
(Valmari's theorem), by runs that are the full system's with non-conflicting actions
swapped. Runs that never end (a spin) need the search's proviso against ignoring, a set
seeded by each actor a cycle leaves standing (`stubborn_containing`; proviso.py).

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

from collections.abc import Iterator

from semcheck.engines.explicit.independence import Independence
from semcheck.semantics.footprints import X_INC, Channels
from semcheck.semantics import Action, EventFires, State, ThreadStep


def isolated_thread(ind: Independence, state: State, ready: tuple[int, ...]) -> list[Action] | None:
    """What `stubborn_subset` returns when it is a thread's action found isolated, without
    listing the pending completions (what costs as much as the number of devices): the
    enabled actions list the threads that can move first, so the first isolated thread is
    what it would choose; a single thread with nothing pending is all there is to choose.
    None: no thread is isolated, so the whole list is needed."""
    if not ready:
        return None
    steps = ind.system.thread_steps
    if len(ready) == 1 and not state.events:
        return [steps[ready[0]]]
    ctx = _Context(ind, state, None)
    for t in ready:
        if ctx.isolated(steps[t]):
            return [steps[t]]
    return None


def isolated_action(ind: Independence, state: State, ready: tuple[int, ...]) -> list[Action] | None:
    """As `isolated_thread`, then the first pending completion found isolated, in the
    order `System.enabled` lists them (threads, then distinct completions): what
    `stubborn_subset` would choose, without listing every completion as an action first
    (a ring has about one in flight per device). None: no enabled action is isolated."""
    chosen = isolated_thread(ind, state, ready)
    if chosen is not None or not state.events:
        return chosen
    ctx = _Context(ind, state, None)
    previous = None
    for event in state.events:  # sorted: identical completions are adjacent, one actor
        if event == previous:
            continue
        previous = event
        action = EventFires(event)
        if ctx.isolated(action):
            return [action]
    return None


def stubborn_subset(ind: Independence, state: State, enabled: list[Action], threads_tried: bool = False,
                    isolated_tried: bool = False) -> list[Action]:
    """The enabled actions of a smallest stubborn set found from any enabled seed. With
    `threads_tried`, the caller has found no thread's action isolated (`isolated_thread`);
    with `isolated_tried`, no action at all (`isolated_action`)."""
    if len(enabled) <= 1:
        return enabled
    ctx = _Context(ind, state, enabled)
    for seed in () if isolated_tried else enabled:  # most actions conflict with nothing: a stubborn set of their own
        if threads_tried and isinstance(seed, ThreadStep):
            continue
        if ctx.isolated(seed):
            return [seed]
    best: list[Action] = enabled
    # A pending completion usually needs only the thread blocked on it: try those first,
    # so a small set is found early and later closures stop as soon as they grow past it.
    seeds = [a for a in enabled if isinstance(a, EventFires)] + [a for a in enabled if isinstance(a, ThreadStep)]
    for seed in seeds:
        # with the blocked waiters it feeds joining first, and without: either can be smaller
        for waiters_first in (True, False):
            members, waiters_joined = ctx.closure(seed, limit=len(best), waiters_first=waiters_first)
            if members is not None:
                best = [a for a in enabled if a in members]
                if len(best) == 1:
                    return best
            if not waiters_joined:
                break  # no waiter joined: the closure without them is this one, step for step
    return best


def stubborn_containing(ind: Independence, state: State, enabled: list[Action], seed: Action) -> list[Action]:
    """The enabled actions of a smallest stubborn set found that contains `seed` (enabled):
    its closure built with the blocked waiters it feeds joining first, and without. The
    search's proviso against ignoring asks for one (search.py, `Proviso`)."""
    ctx = _Context(ind, state, enabled)
    best: list[Action] | None = None
    for waiters_first in (True, False):
        members, waiters_joined = ctx.closure(seed, limit=len(enabled) + 1, waiters_first=waiters_first)
        assert members is not None, "a closure stops only past a limit it cannot reach"
        found = [a for a in enabled if a in members]
        if best is None or len(found) < len(best):
            best = found
        if not waiters_joined:
            break  # no waiter joined: the closure without them is this one, step for step
    assert best is not None
    return best


def isolated_for_good(ind: Independence, state: State, t: int) -> bool:
    """Whether thread t's whole future (every instruction reachable from its pc) conflicts
    with nothing any other actor may still do: then its steps commute with every run of
    the others, and none of them reads anything t writes."""
    table, pc = ind.tables[t], state.pcs[t]
    own = {r: channels for r in table.resources() if any(channels := table.future(pc, r))}
    return not any(True for _ in _Context(ind, state, None)._find_candidates(ind.system.thread_steps[t], own))


class _Context:
    """What one state's closures share. Every query starts from the resources an action
    touches and asks only the threads that may touch them (`Independence.touchers`) and the
    pending completions on them, so its cost does not grow with the threads that cannot
    interfere."""

    def __init__(self, ind: Independence, state: State, enabled: list[Action] | None):
        self.ind, self.state = ind, state
        self.system = ind.system
        self._enabled_list = enabled
        self._enabled: set[Action] | None = None
        self._blocked: dict[int, tuple | None] = {}

    @property
    def enabled(self) -> set[Action]:
        """The enabled actions as a set, built on first use: the isolation test, which
        decides most states, never asks (hashing every pending completion costs what the
        number of devices does)."""
        if self._enabled is None:
            assert self._enabled_list is not None, "isolation alone needs no enabled set"
            self._enabled = set(self._enabled_list)
        return self._enabled

    def _active(self, t: int) -> bool:
        return 0 <= self.state.pcs[t] < len(self.system.bodies[t])

    def _clashing(self, action: Action, own: Channels, members: set[Action], standing: _Standing,
                  guard=None, first: bool = False, blocked: bool = False) -> list[Action]:
        """Every actor outside `members` (the stubborn set so far, `standing` its parts)
        whose footprint conflicts with `own`. A thread's footprint is its future, cut at the
        first wait it cannot pass while the set stands still: with `guard` (a completion in
        the set), a wait only that completion can satisfy; and the first wait the set's
        members keep closed by counting (`Independence.cut`). With `first`, stop at the
        first one. `blocked`: `own` is what a blocked wait needs, not the action's own
        channels (one state asks both of a thread in different roles)."""
        found: dict[Action, None] = {}
        pcs, tables, ind = self.state.pcs, self.ind.tables, self.ind
        cuts: dict[int, tuple[int, ...] | None] = {}
        counted = ind.state_cache(self.state).cuts
        for t, actor, r, xa, ya in self._candidates(action, own, blocked):
            if actor in found or actor in members:
                continue
            if t >= 0:
                if t not in cuts:
                    stops = set(ind.guard_stops(t, guard) or ()) if guard is not None else set()
                    # one state's closures stand the same few members still again and again
                    key = (t, standing.key())
                    if key in counted:
                        stop = counted[key]
                    else:
                        stop = counted[key] = ind.cut(self.state, standing.threads, standing.events, t,
                                                      still_sems=standing.sems)
                    if stop is not None:
                        stops.add(stop)
                    cuts[t] = tuple(sorted(stops)) if stops else None
                cut_at = cuts[t]
                if cut_at is not None:
                    xb, yb = tables[t].future_before(pcs[t], r, cut_at)
                    if not (xa & yb or xb & ya):
                        continue
            found[actor] = None
            if first:
                break
        return list(found)

    def _candidates(self, action: Action, own: Channels, blocked: bool) -> list[tuple]:
        """(thread or -1, actor, resource, x, y) of every actor whose whole footprint in this
        state conflicts with `own` (x, y) on a resource, in the order `_clashing` asks them:
        per resource, the threads that may touch it, then its pending completions. What
        depends only on the state and the action is found once per state
        (`Independence.state_cache`): a state's closures ask about the same actions again
        and again, with different members; the members and the cuts are applied per query."""
        cache = self.ind.state_cache(self.state).candidates
        key = (action, blocked)
        found = cache.get(key)
        if found is None:
            # all of them, even for an isolation test that stops at the first clash: the
            # closures that follow (a state none of whose actions is isolated) reuse them
            found = cache[key] = list(self._find_candidates(action, own))
        return found

    def _find_candidates(self, action: Action, own: Channels) -> Iterator[tuple]:
        pcs, tables, touchers, ind = self.state.pcs, self.ind.tables, self.ind.touchers, self.ind
        steps, bodies = self.system.thread_steps, self.system.bodies
        me = action.thread if isinstance(action, ThreadStep) else None
        for r, (xa, ya) in own.items():
            for t in touchers.get(r, ()):
                if t == me or not 0 <= pcs[t] < len(bodies[t]):
                    continue
                xb, yb = tables[t].future(pcs[t], r)
                if xa & yb or xb & ya:
                    yield t, steps[t], r, xa, ya
            if not ind.completions_may_clash(r, xa, ya):
                continue
            for other, xb, yb in ind.pending_on(self.state.events, r):
                if other != action and (xa & yb or xb & ya):
                    yield -1, other, r, xa, ya

    def isolated(self, action: Action) -> bool:
        """An enabled action that conflicts with nothing any other actor may do before the
        action itself (for a completion: up to the waits only it can satisfy)."""
        guard = action.event if isinstance(action, EventFires) else None
        standing = _Standing()
        standing.add(action)
        return not self._clashing(action, self.ind.own(self.state, action), {action}, standing, guard=guard, first=True)

    def closure(self, seed: Action, limit: int, waiters_first: bool = True) -> tuple[set[Action] | None, bool]:
        """The actors a stubborn set containing `seed` needs, or None as soon as it holds
        `limit` enabled actions (no better than one already found); and whether a blocked
        waiter joined (if none did, the closure without `waiters_first` is the same).

        With `waiters_first`, before an enabled action's needs are looked up, the threads
        blocked at a wait on a semaphore it adds to join the set (`_waiting_for`): a
        disabled member costs no enabled action by itself, and standing still it keeps
        closed the waits of other threads that only it would open (a ring neighbour's
        capacity wait), which cuts their futures. Its own needs (every actor that may add
        to its semaphore) can also make the set larger, so both ways are tried."""
        members = {seed}
        standing = _Standing()
        standing.add(seed)
        work = [seed]
        enabled_count = 1
        waiters_joined = False
        while work:
            action = work.pop()
            for waiting in self._waiting_for(action, members) if waiters_first else ():  # disabled: they cost no enabled action
                members.add(waiting)
                standing.add(waiting)
                work.append(waiting)
                waiters_joined = True
            for other in self._required_by(action, members, standing):
                if other not in members:
                    members.add(other)
                    standing.add(other)
                    work.append(other)
                    if other in self.enabled:
                        enabled_count += 1
                        if enabled_count >= limit:
                            return None, waiters_joined
        return members, waiters_joined

    def _waiting_for(self, action: Action, members: set[Action]) -> list[Action]:
        """The threads outside `members` blocked at a wait on a semaphore `action` (enabled)
        may add to."""
        if action not in self.enabled:
            return []
        cache = self.ind.state_cache(self.state).waiters
        waiting = cache.get(action)
        if waiting is None:  # the same in each of the state's closures, but for the members
            waiting = cache[action] = []
            steps = self.system.thread_steps
            for r, (x, _y) in self.ind.own(self.state, action).items():
                if not x & X_INC:
                    continue
                for t in self.ind.touchers.get(r, ()):
                    if steps[t] in self.enabled or not self._active(t):
                        continue
                    blocked = self._blocked_wait(t)
                    if blocked is not None and blocked[0] == r:
                        waiting.append(steps[t])
        return [step for step in waiting if step not in members]

    def _blocked_wait(self, t: int):
        if t not in self._blocked:
            self._blocked[t] = self.system.blocked_wait(self.state, t)
        return self._blocked[t]

    def _required_by(self, action: Action, members: set[Action], standing: _Standing) -> list[Action]:
        if action in self.enabled:
            own = self.ind.own(self.state, action)
            # a completion is compared with each thread's future up to the waits it alone
            # can satisfy (`Independence.guard_stops`)
            guard = action.event if isinstance(action, EventFires) else None
            return self._clashing(action, own, members, standing, guard=guard)
        assert isinstance(action, ThreadStep), "a completion in flight is always enabled"
        blocked = self._blocked_wait(action.thread)
        if blocked is None:  # not at a wait: cannot happen for an active, disabled thread
            return []
        # a blocked wait needs every actor that may still add to its semaphore
        return self._clashing(action, {blocked[0]: (0, X_INC)}, members, standing, blocked=True)


class _Standing:
    """The members of a stubborn set being built, as `Independence.cut` reads them: its
    threads, its pending completions and the semaphores those add to. Kept as the set
    grows, not rebuilt from the members for every query."""

    __slots__ = ("threads", "events", "sems", "_key")

    def __init__(self) -> None:
        self.threads: set[int] = set()
        self.events: set[EventFires] = set()
        self.sems: set[int] = set()
        self._key: frozenset | None = None

    def key(self) -> frozenset:
        """The members standing still, hashable (a thread by its number, a completion by
        its action: never equal to each other)."""
        if self._key is None:
            self._key = frozenset(self.threads).union(self.events)
        return self._key

    def add(self, member: Action) -> None:
        self._key = None
        if isinstance(member, ThreadStep):
            self.threads.add(member.thread)
        else:
            self.events.add(member)
            self.sems.add(member.event.sem)
