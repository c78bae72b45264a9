"""Which actions commute: the explicit engine's independence bookkeeping over a `System`.

The System is immutable; what changes during a search lives here: the pairs of source
lines whose race is reported (`report`), after which the accesses of those two lines no
longer order each other (`_MemoryView`). Everything is indexed by resource (semaphore
instance or memory cell, `footprints.channels`), so a query costs what the few threads and
completions touching that resource cost, however many devices the protocol has:

* `touchers[r]`: the threads whose code may touch resource r (`System.touchers`);
* per thread, a `ThreadTable` (what it may still do to r from a pc on);
* the copy starts behind each resource, and guards: a pending completion that is the only
  possible adder of a semaphore cannot be overtaken by the waits on it, so a thread's
  future counts only up to such a wait when it is compared with that completion
  (`copies.CopyIndex`);
* what the counting cut reads: each thread's counted waits, what it takes from and adds to
  each semaphore (`counting.CountingTables`).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import field

from semcheck import ir
from semcheck.engines.explicit.copies import CopyIndex
from semcheck.engines.explicit.counting import CountedWaits, CountingTables
from semcheck.records import record
from semcheck.semantics.footprints import (
    X_DEC, X_INC, X_WRITE, Y_CHANGE, Y_NEAR, Y_WAITER, Channels, Footprint, ThreadFootprints, ThreadTable, channels,
    clash,
)
from semcheck.semantics import DATA_RACE, PLAIN_RACE, Action, Event, EventFires, State, System, event_footprint

_KEPT = 8_192  # answers kept per kind before the cache starts again
_JOINT = 16  # threads given a candidate wait together by one joint cut (`Independence._joint_cuts`)


class Independence:
    def __init__(self, system: System):
        self.system = system
        self.reported_pairs: set[frozenset[ir.Loc]] = set()
        self.memory = _MemoryView(system)
        self.tables: list[ThreadTable] = list(system.tables)
        # who may touch r: a pair resource (`_MemoryView`) is given its cell's touchers
        # when it is made, a superset of the threads that name it
        self.touchers = _Touchers(system.touchers)
        self._event_channels: dict[Event, Channels] = {}
        self.copies = CopyIndex(system, self.tables)
        self._pending_events: tuple[Event, ...] | None = None
        self._pending: dict[int, list[tuple[Action, int, int]]] = {}
        self._sums_state: State | None = None
        self._sums: dict[int, _ReachableSums] = {}
        self._additions_events: tuple[Event, ...] | None = None
        self._additions_by_sem: dict[int, list[tuple[Action, int]]] = {}
        self._feeds_cache: dict[tuple[int, int], tuple[list[float], bool]] = {}
        self.counting = CountingTables(system, self.tables)
        self._cache_state: State | None = None
        self._cache = StateCache()

    def state_cache(self, state: State) -> StateCache:
        """What the stubborn-set closures of `state` find once and ask again
        (`reduction.py`), empty for each new state and after a report."""
        if state is not self._cache_state:
            self._cache_state, self._cache = state, StateCache()
        return self._cache

    # -- what an actor may touch --

    def own(self, state: State, action: Action) -> Channels:
        """The channels of the action itself (a thread's next instruction, or a completion)."""
        if isinstance(action, EventFires):
            return self.event_channels(action.event)
        t = action.thread
        return self.tables[t].own[state.pcs[t]]

    def event_channels(self, event: Event) -> Channels:
        found = self._event_channels.get(event)
        if found is None:
            if len(self._event_channels) >= _KEPT:
                self._event_channels.clear()  # a ring of N devices starts N^2 copies
            fp = event_footprint(self.system, event)
            loc = self.system.bodies[event.issuer][event.start_pc].loc
            found = self._event_channels[event] = channels(self.memory.view(fp, loc), self.system.cell_base)
        return found

    def pending_on(self, events: tuple[Event, ...], r: int):
        """(completion action, x, y) of each distinct pending completion touching resource
        r. Events are sorted by (side, issuer, start pc, ...), and `copies.copies_on` knows which
        copy starts may touch r, so they are found by bisection: a few starts one by one,
        many (a send semaphore every step's copy adds to) by scanning that issuer's
        pending completions, never every pending completion. The answers for the last
        `events` seen are kept: one state's closures ask about the same resources again and
        again."""
        if events is not self._pending_events:  # a new state: forget the last one's answers
            self._pending_events, self._pending = events, {}
        found = self._pending.get(r)
        if found is None:
            copies = self.copies.copies_on(self.memory.plain(r)) if events else None
            found = self._pending[r] = list(self._scan_pending(events, r, copies)) if copies else []
        return found

    def pending_additions(self, events: tuple[Event, ...], sid: int) -> list[tuple[Action, int]]:
        """(completion action, what it adds) of each distinct pending completion adding a
        positive amount to semaphore `sid` (identical completions are one actor: their
        amounts add up). They are found as `pending_on` finds completions, by bisection
        for the copy starts that may add to `sid`, so a query costs what those few
        completions cost, not what every pending completion does; the answers for the
        last `events` seen are kept."""
        if events is not self._additions_events:
            self._additions_events, self._additions_by_sem = events, {}
        found = self._additions_by_sem.get(sid)
        if found is None:
            copies = self.copies.copies_on(sid) if events else None
            found = self._additions_by_sem[sid] = _additions_to(events, sid, copies) if copies else []
        return found

    def _scan_pending(self, events: tuple[Event, ...], r: int, copies):
        for starts, ranges in copies:
            for prefix in ranges:
                width = len(prefix)
                k = bisect_left(events, prefix)
                previous = None
                while k < len(events):
                    e = events[k]
                    if e[:width] != prefix:
                        break
                    k += 1
                    if e == previous or e.start_pc not in starts:
                        continue
                    previous = e
                    found = self.event_channels(e).get(r)
                    if found is not None:
                        yield EventFires(e), found[0], found[1]

    def completions_may_clash(self, r: int, x: int, y: int) -> bool:
        """Whether some pending completion could conflict with (x, y) on resource r, by
        what any completion can do there (`semantics.event_footprint`): on a semaphore add
        (or, by a negative size, take); on a buffer cell write it only if some copy's
        destination may be that cell, else read or overlap it; on a lifecycle cell only
        read, so only an entry's or exit's write conflicts there. The pending
        completions need not be looked up when none could."""
        base = self.system.cell_base
        r = self.memory.plain(r)
        if r < base:
            cx, cy = X_INC | X_DEC, Y_CHANGE | Y_WAITER
        elif self.system.is_buffer_cell(r - base):
            cx, cy = (X_WRITE if self.copies.written(r) else 0), Y_NEAR
        else:
            cx, cy = 0, Y_NEAR
        return bool(x & cy or cx & y)

    def guard_stops(self, t: int, event: Event) -> tuple[int, ...] | None:
        """Sorted pcs of thread t's waits that only `event`'s completion can satisfy."""
        return self.copies.guard_stops(t, event)

    def cut(self, state: State, still: frozenset[int] | set[int], still_events, t: int, limit: int = 8,
            still_sems: frozenset[int] | set[int] | None = None) -> int | None:
        """Where thread t's future stops while the members of a stubborn set stand still:
        the earlier of the counting cut of t alone (`plain_cut`) and the joint cut
        (`_joint_cuts`), which is tried only when the plain cut is not already at t's first
        candidate wait (nothing can stop t earlier). The candidates are found once, for both."""
        entries = self.counting.counted(t)
        if not entries:
            return None
        if still_sems is None:
            still_sems = {action.event.sem for action in still_events}
        stopped = self._guard_stopped(state, still_events)
        tried = self._candidates(entries, state.pcs[t], still, still_sems, stopped, limit)
        plain = self._plain_cut(state, still, still_events, t, entries, tried, limit, stopped)
        if not tried or (plain is not None and plain <= entries.entry(tried[0])[0]):
            return plain
        joint = self._joint_cuts(state, still, still_events, still_sems, stopped, t).get(t)
        if joint is not None and (plain is None or joint < plain):
            return joint
        return plain

    def plain_cut(self, state: State, still: frozenset[int] | set[int], still_events, t: int, limit: int = 8,
                  still_sems: frozenset[int] | set[int] | None = None) -> int | None:
        """The first wait of straight-line thread t, from its pc on, that it cannot pass
        while the threads `still` and the pending completions `still_events` stand still
        (the members of a stubborn set being built: none of them moves in a schedule made of
        actions outside the set), by counting: the most its semaphore can hold then is its
        count, plus what the other pending completions on it add, plus what every thread
        not in `still` can still add to it (each a constant, or no cut), minus what t's own
        earlier waits on it take first. When that is less than the wait's amount, t's
        future counts only up to the wait. Standing still more only lowers that most, so a
        cut found for part of a set holds for the whole set. (At most `limit` candidate
        waits are tried: giving up only means no cut.) `still_sems`: the semaphores the
        completions in `still_events` add to, when the caller has them at hand.

        A straight-line thread outside the set that has a wait only a completion in
        `still_events` can satisfy (a guard stop) cannot pass that wait either: only what
        it adds before its first such wait counts (`_guard_stopped`), and the waits on the
        semaphores it adds to are tried as candidates as a member's are."""
        entries = self.counting.counted(t)
        if not entries:
            return None
        if still_sems is None:
            still_sems = {action.event.sem for action in still_events}
        stopped = self._guard_stopped(state, still_events)
        tried = self._candidates(entries, state.pcs[t], still, still_sems, stopped, limit)
        return self._plain_cut(state, still, still_events, t, entries, tried, limit, stopped)

    def _plain_cut(self, state: State, still, still_events, t: int, entries: CountedWaits, tried: list[int],
                   limit: int, stopped: dict[int, int]) -> int | None:
        """`plain_cut`, given t's candidate waits `tried` (`_candidates`)."""
        pc = state.pcs[t]
        for j in tried:
            stop, sid, need, adders = entries.entry(j)
            reachable = self._most_reachable(state, sid, adders, still, still_events, t, pc, stop, stopped)
            if reachable is not None and reachable < need:
                return stop
        # None of those: the waits a still thread has yet to feed (it adds to their
        # semaphore from its pc on). A thread far behind a neighbour that feeds it waits at
        # many steps its neighbour already fed, which can all pass; the first it has not
        # fed is where standing still keeps it (a ring device running ahead of its right
        # neighbour). Trying these only after the first ones keeps every cut found before.
        fed = self._first_unfed(t, entries.first_from(pc), state.pcs, still, set(tried), limit)
        for j in fed:
            stop, sid, need, adders = entries.entry(j)
            reachable = self._most_reachable(state, sid, adders, still, still_events, t, pc, stop, stopped)
            if reachable is not None and reachable < need:
                return stop
        return None

    @staticmethod
    def _candidates(entries: CountedWaits, pc: int, still, still_sems, stopped: dict[int, int],
                    limit: int) -> list[int]:
        """Sorted indices into a thread's counted waits `entries`, from `pc` on, the first
        `limit` (at least 1) of those whose semaphore something standing still may add to:
        only such a wait can be kept closed. They are found per member in the indices by
        adder and by semaphore; a thread stopped by a guard is still from its stop on, so it
        counts as a member. The first is the thread's first candidate wait."""
        k = entries.first_from(pc)
        chosen: set[int] = set()
        for index, keys in ((entries.by_adder, still), (entries.by_adder, stopped), (entries.by_sem, still_sems)):
            # whichever is smaller is walked: a big set's members, or the thread's few adders
            for key in (keys if len(keys) <= len(index) else [key for key in index if key in keys]):
                chosen.update(index.from_(key, k, limit))
        return sorted(chosen)[:limit]

    def _first_candidate(self, state: State, still, still_sems, stopped: dict[int, int],
                         a: int) -> tuple[int, int, int, frozenset[int]] | None:
        """Thread a's first counted wait from its pc on whose semaphore a member standing
        still (or a thread stopped by a guard) may add to: (pc, semaphore, amount, adders)."""
        entries = self.counting.counted(a)
        if not entries:
            return None
        first = self._candidates(entries, state.pcs[a], still, still_sems, stopped, 1)
        return entries.entry(first[0]) if first else None

    def _joint_cuts(self, state: State, still, still_events, still_sems, stopped: dict[int, int],
                    t: int) -> dict[int, int]:
        """Stops for t and the threads that add to the semaphores they wait on, found
        together: each thread a of the group (at most `_JOINT` threads outside `still`,
        straight-line) is given its first candidate wait W(a) (`_first_candidate`), then a
        thread is dropped from the group while the most W(a)'s semaphore can hold reaches
        W(a)'s amount when every other thread of the group adds only what comes before its
        own W (and a thread stopped by a guard only what comes before that stop). Those
        left cannot pass their W while the set stands still: in a schedule of actions
        outside the set, at the first moment one of them passes its W none of the others
        has passed its own, so the semaphore holds at most what was summed, less than the
        amount. Kept per state and members: the next thread asked finds its answer here
        when it was in an earlier group."""
        key = (frozenset(still), frozenset(still_events))
        cache = self.state_cache(state).joint
        known = cache.get(key)
        if known is None:
            known = cache[key] = ({}, set())
        verified, grouped = known
        if t in grouped:
            return verified
        pcs, bodies = state.pcs, self.system.bodies
        group: dict[int, tuple[int, int, int, frozenset[int]]] = {}
        work = [t]
        while work and len(group) < _JOINT:
            a = work.pop()
            if a in group or a in grouped or a in still or not 0 <= pcs[a] < len(bodies[a]):
                continue
            candidate = self._first_candidate(state, still, still_sems, stopped, a)
            if candidate is None:
                continue
            group[a] = candidate
            work.extend(b for b in sorted(candidate[3], reverse=True) if b not in group and b not in still)
        grouped.update(group)
        grouped.add(t)
        changed = True
        while changed:
            changed = False
            for a in list(group):
                stop, sid, need, adders = group[a]
                most = self._most_with_stops(state, sid, adders, still, still_events, a, stop, group, verified, stopped)
                if most is None or most >= need:
                    del group[a]
                    changed = True
        verified.update((a, entry[0]) for a, entry in group.items())
        return verified

    def _most_with_stops(self, state: State, sid: int, adders, still, still_events, t: int, stop: int,
                         group: dict[int, tuple], verified: dict[int, int], stopped: dict[int, int]) -> int | None:
        """The most `sid` can hold while the members stand still and every thread of
        `group`, `verified` or `stopped` adds only what comes before its stop there, less
        what t's own waits before `stop` take (None: an unknown or looping amount)."""
        taken = self.counting.taken_between(t, sid, state.pcs[t], stop)
        if taken is None:
            return None
        most = state.sems[sid] - taken
        for action, amount in self.pending_additions(state.events, sid):
            if action not in still_events:
                most += amount
        for b in adders:
            if b in still:
                continue
            at = state.pcs[b]
            ends = [x for x in (group[b][0] if b in group else None, verified.get(b), stopped.get(b)) if x is not None]
            if ends and self.tables[b].straight:
                more = self.counting.added_between(b, sid, at, min(ends))
            else:
                more = self.counting.still_added(b, sid, at)
            if more is None:
                return None
            most += more
        return most

    def _first_unfed(self, t: int, k: int, pcs: tuple[int, ...], still, tried: set[int], limit: int) -> list[int]:
        """Sorted indices (from k on, at most `limit`, none in `tried`) into t's counted
        waits: per thread a in `still`, the first wait on a semaphore a still adds to from
        its pc on (`_feeds`: per (t, a), the last pc at which a adds to each candidate's
        semaphore, so the first is a bisection where those pcs grow along t's waits)."""
        counted = self.counting.counted(t)
        assert counted is not None
        index = counted.by_adder
        found: set[int] = set()
        for a in (still if len(still) <= len(index) else [a for a in index if a in still]):
            listed = index.run(a)  # t's waits a may add to: `index.at(listed, i)`, i < listed.size
            if listed is None:
                continue
            at = pcs[a]
            if at < 0:
                continue  # a thread that ended adds nothing
            lo = index.position(listed, k)
            if lo == listed.size:
                continue
            last, ordered = self._feeds(t, a)
            if ordered:
                i = max(lo, bisect_left(last, at))
            else:
                i = lo
                while i < listed.size and last[i] < at:
                    i += 1
            if i < listed.size and index.at(listed, i) not in tried:
                found.add(index.at(listed, i))
        return sorted(found)[:limit]

    def _feeds(self, t: int, a: int) -> tuple[list[float], bool]:
        """For thread t's counted waits that thread a may add to (`by_adder.get(a)`),
        the last pc at which a adds a positive amount to each one's semaphore (infinity:
        unbounded or unknown amounts), and whether those pcs never decrease."""
        key = (t, a)
        found = self._feeds_cache.get(key)
        if found is None:
            if len(self._feeds_cache) >= _KEPT:
                self._feeds_cache.clear()
            counted = self.counting.counted(t)
            assert counted is not None
            last = [self.counting.last_addition(a, counted.sids[j]) for j in counted.by_adder.get(a) or ()]
            found = self._feeds_cache[key] = (last, all(x <= y for x, y in zip(last, last[1:])))
        return found

    def _guard_stopped(self, state: State, still_events) -> dict[int, int]:
        """Per straight-line thread, active, with a wait that only a completion in
        `still_events` can satisfy (`CopyIndex.guard_stops`), the first such wait from its
        pc on: while those completions stand still it cannot pass it, so nothing it would do
        after can happen. Kept per state and set of completions, so threads in `still` are
        listed too: the callers pass over them (a member's whole share is taken back)."""
        if not still_events:
            return {}
        cache = self.state_cache(state).guard_stopped
        key = still_events if isinstance(still_events, frozenset) else frozenset(still_events)
        found = cache.get(key)
        if found is not None:
            return found
        found = cache[key] = {}
        pcs, bodies = state.pcs, self.system.bodies
        for action in key:
            event = action.event
            for a in self.copies.guarded_threads(event):
                if not 0 <= pcs[a] < len(bodies[a]) or not self.tables[a].straight:
                    continue
                stops = self.copies.guard_stops(a, event) or ()
                k = bisect_left(stops, pcs[a])
                if k < len(stops) and (a not in found or stops[k] < found[a]):
                    found[a] = stops[k]
        return found

    def _most_reachable(self, state: State, sid: int, adders, still, still_events, t: int, pc: int, stop: int,
                        stopped: dict[int, int] | None = None) -> int | None:
        taken = self.counting.taken_between(t, sid, pc, stop)
        if taken is None:
            return None
        sums = self._reachable_sums(state, sid, adders)
        total = sums.most - taken
        # take back what the members standing still would have added
        unbounded_still = 0
        if len(still) < len(sums.by_adder):
            for a in still:
                if a in sums.by_adder:
                    more = sums.by_adder[a]
                    if more is None:
                        unbounded_still += 1
                    else:
                        total -= more
        else:
            for a, more in sums.by_adder.items():
                if a in still:
                    if more is None:
                        unbounded_still += 1
                    else:
                        total -= more
        if stopped:  # and what the threads stopped by a guard would have added from their stop on
            less, unbounded_gone = self._past_guard_stops(state, sid, sums, still, stopped)
            total -= less
            unbounded_still += unbounded_gone
        if unbounded_still < sums.unbounded:
            return None
        if sums.by_completion:
            for action in still_events:
                amount = sums.by_completion.get(action)
                if amount is not None:
                    total -= amount
        return total

    def _past_guard_stops(self, state: State, sid: int, sums: _ReachableSums, still,
                          stopped: dict[int, int]) -> tuple[int, int]:
        """What the threads in `stopped` (outside `still`) would add to `sid` from their
        guard stop on, taken out of `sums`: (the amount, how many unbounded shares go)."""
        less = gone = 0
        for a, at in stopped.items():
            if a not in sums.by_adder or a in still:
                continue
            before = self.counting.added_between(a, sid, state.pcs[a], at)
            if before is None:
                continue  # an unknown amount before its stop: its whole share stays
            more = sums.by_adder[a]
            if more is None:
                gone += 1
                less -= before
            else:
                less += more - before
        return less, gone

    def _reachable_sums(self, state: State, sid: int, adders) -> _ReachableSums:
        """What `sid` can hold in `state` if every actor moves (the count, every pending
        completion's positive amount, every adder thread's remaining additions), with each
        actor's share, so that `_most_reachable` takes back only the shares of a set's
        members. Kept for the last state seen: its closures ask about the same semaphores
        again and again, with different members."""
        if state is not self._sums_state:
            self._sums_state, self._sums = state, {}
        found = self._sums.get(sid)
        if found is not None:
            return found
        most = state.sems[sid]
        by_completion: dict[Action, int] = {}
        for action, amount in self.pending_additions(state.events, sid):
            by_completion[action] = amount  # identical completions are one actor
            most += amount
        by_adder: dict[int, int | None] = {}
        unbounded = 0
        for a in adders:
            more = by_adder[a] = self.counting.still_added(a, sid, state.pcs[a])
            if more is None:
                unbounded += 1
            else:
                most += more
        found = self._sums[sid] = _ReachableSums(most, by_adder, unbounded, by_completion)
        return found

    def independent(self, state: State, a: Action, b: Action) -> bool:
        """Two actions of different actors, both enabled in `state`, that commute and cannot
        disable each other."""
        if a == b:  # one actor (a thread has one next step; identical completions are one)
            return False
        return not clash(self.own(state, a), self.own(state, b))

    # -- suppressing reported racing pairs --

    def watched(self, t: int, pc: int) -> bool:
        """Whether this instruction's line can still be in a race not yet reported."""
        return self.memory.watched(self.system.bodies[t][pc].loc)

    def report(self, loc: ir.Loc | None, other: ir.Loc | None) -> bool:
        """The engine reported a data race between these two lines: later races between
        the same two lines are dropped (`normalize`), and from now on the accesses of the
        one line order those of the other no more (`_MemoryView.report`): the pair's
        schedules are not explored again, while every other pair either line may race in
        keeps its dependencies, so a second pair sharing a line with the first is still
        found."""
        pair = frozenset(loc_ for loc_ in (loc, other) if loc_ is not None)
        if not pair or pair in self.reported_pairs:
            return False
        self.reported_pairs.add(pair)
        changed = self.memory.report(pair)
        if not changed:
            return True
        system = self.system
        for t, body in enumerate(system.bodies):
            if any(instr.loc in changed for instr in body):
                fps = [self.memory.view(fp, body[pc].loc) for pc, fp in enumerate(system.footprints[t])]
                self.tables[t] = table = ThreadTable(body, ThreadFootprints.of(fps, system.cell_base))
                for r in table.resources():
                    if r not in self.touchers:
                        self.touchers[r] = self.touchers.get(self.memory.plain(r), ())
        self._event_channels.clear()
        self._pending_events, self._pending = None, {}
        self._sums_state, self._sums = None, {}
        self._cache_state, self._cache = None, StateCache()
        return True

    def normalize(self, state: State) -> State:
        """Drop races recorded between two lines whose race is already reported."""
        if not self.reported_pairs or not state.hazards:
            return state
        bodies = self.system.bodies
        kept = tuple(
            h for h in state.hazards
            if h.kind not in (DATA_RACE, PLAIN_RACE)
            or frozenset((bodies[h.thread][h.pc].loc, bodies[h.other_thread][h.other_pc].loc))
            not in self.reported_pairs
        )
        return state if len(kept) == len(state.hazards) else state._replace(hazards=kept)


@record(slots=True)
class StateCache:
    """One state's answers that its stubborn-set closures share: per (action, whether it is
    asked as a blocked wait), the actors whose whole footprint conflicts with it
    (`reduction._Context._candidates`); per (thread, the members standing still), the
    counting cut (`Independence.cut`); per enabled action, the threads blocked at a wait on a
    semaphore it adds to (`reduction._Context._waiting_for`); per set of completions standing
    still, the threads they stop at a guard and where (`Independence._guard_stopped`)."""

    candidates: dict[tuple[Action, bool], list[tuple]] = field(default_factory=dict)
    cuts: dict[tuple[int, frozenset], int | None] = field(default_factory=dict)
    waiters: dict[Action, list[Action]] = field(default_factory=dict)
    guard_stopped: dict[frozenset, dict[int, int]] = field(default_factory=dict)
    joint: dict[tuple[frozenset, frozenset], tuple[dict[int, int], set[int]]] = field(default_factory=dict)


@record(frozen=True)
class _ReachableSums:
    """One semaphore in one state: the most it can hold if every actor moves (`most`,
    counting only bounded adders), each adder thread's share (None: unbounded), how many
    adders are unbounded, and each pending completion's share."""

    most: int
    by_adder: dict[int, int | None]
    unbounded: int
    by_completion: dict[Action, int]


def _additions_to(events: tuple[Event, ...], sid: int, copies) -> list[tuple[Action, int]]:
    """(completion action, amount) per distinct pending completion adding a positive
    amount to `sid`, among the completions of the copy starts `copies` names
    (`CopyIndex.copies_on(sid)`: every copy that may add to it). `events` is sorted,
    so each prefix's completions are one run and identical completions are adjacent."""
    found: list[tuple[Action, int]] = []
    n = len(events)
    for starts, ranges in copies:
        for prefix in ranges:
            width = len(prefix)
            k = bisect_left(events, prefix)
            while k < n:
                e = events[k]
                if e[:width] != prefix:
                    break
                run = 1
                while k + run < n and events[k + run] == e:
                    run += 1
                k += run
                if e.sem == sid and e.inc > 0 and e.start_pc in starts:
                    found.append((EventFires(e), e.inc * run))
    return found


class _Touchers:
    """`System.touchers`, and the pair resources `_MemoryView` makes as races are reported."""

    def __init__(self, base):
        self._base = base
        self._more: dict[int, tuple[int, ...]] = {}

    def get(self, r: int, default=()):
        if r < self._base.size:
            return self._base.get(r)
        return self._more.get(r, default)

    def __contains__(self, r: int) -> bool:
        return r < self._base.size or r in self._more

    def __setitem__(self, r: int, threads) -> None:
        self._more[r] = tuple(threads)


class _MemoryView:
    """The buffer cells of each line's footprints as the search sees them once some racing
    pairs are reported. Memory cells matter to the search only through data races (the
    other properties look at semaphores and lifecycle cells), and a race is between two
    source lines, so once a pair of lines is reported, an access of the one line need no
    longer order an access of the other (their later races are dropped anyway), while it
    must still order the accesses of every line it may race with and whose pair is not
    reported.

    Lines race in pairs (`System.racing_pairs`, `System.plain_racing_pairs`: a superset of
    what any schedule shows). A line none of whose pairs is reported keeps its plain cells.
    A line with a reported pair is *split*: each of its cells c becomes one resource per
    pair {line, partner} not yet reported, `pair resource(c, pair)`, and a line that is not
    split also names the pair resources of its split partners. Two accesses then share a
    resource exactly when they share a cell and their lines' pair is possible and not
    reported (two lines that are not split: their plain cell, as before any report; a
    split one and any other: the pair resource of their pair). A line all of whose pairs
    are reported names no buffer cell at all."""

    def __init__(self, system: System):
        self.system = system
        self.buffer_cells = system.lifecycle_base  # cells below this are buffer cells
        self.first_pair_resource = system.lifecycle_base + system.protocol.devices * system.protocol.cores
        bodies = system.bodies
        partners: dict[ir.Loc, set[ir.Loc]] = {}
        for t, pc, u, upc in (*system.racing_pairs(), *system.plain_racing_pairs()):
            a, b = bodies[t][pc].loc, bodies[u][upc].loc
            partners.setdefault(a, set()).add(b)
            partners.setdefault(b, set()).add(a)
        self.partners = {loc: frozenset(found) for loc, found in partners.items()}
        self.unreported = {loc: set(found) for loc, found in partners.items()}
        self.split: set[ir.Loc] = set()
        self._pair_ids: dict[frozenset[ir.Loc], int] = {}

    def watched(self, loc: ir.Loc) -> bool:
        """Whether the line may still be in a race not yet reported."""
        return bool(self.unreported.get(loc))

    def report(self, pair: frozenset[ir.Loc]) -> set[ir.Loc]:
        """Take a reported pair out of the view: the lines whose footprints change (the
        pair's lines and their partners)."""
        a, b = (*pair, *pair)[:2]
        if b not in self.unreported.get(a, ()):
            return set()  # not a pair the static analysis knows: nothing orders it
        self.unreported[a].discard(b)
        self.unreported[b].discard(a)
        self.split |= {a, b}
        return {a, b} | self.partners[a] | self.partners[b]

    def view(self, fp: Footprint, loc: ir.Loc) -> Footprint:
        """`fp`, an action's footprint at line `loc`, with its buffer cells as the search
        sees them now."""
        if not self.split:
            return fp
        if loc in self.split:
            pairs = [self._pair_id(loc, other) for other in self.unreported.get(loc, ())]
            keep_plain = False
        else:
            pairs = [self._pair_id(loc, other) for other in self.partners.get(loc, ()) if other in self.split]
            keep_plain = True
            if not pairs:
                return fp
        return fp._replace(mread=self._cells(fp.mread, pairs, keep_plain),
                           mwrite=self._cells(fp.mwrite, pairs, keep_plain),
                           mnear=self._cells(fp.mnear, pairs, keep_plain))

    def plain(self, r: int) -> int:
        """The resource itself, or for a pair resource the cell it stands for (both offset
        by `cell_base`, as `footprints.channels` numbers them)."""
        base = self.system.cell_base
        if r < base + self.first_pair_resource:
            return r
        return base + (r - base - self.first_pair_resource) % self.buffer_cells

    def _cells(self, cells: frozenset[int], pairs: list[int], keep_plain: bool) -> frozenset[int]:
        out = set()
        for c in cells:
            if c >= self.buffer_cells:  # a lifecycle cell: not a race's
                out.add(c)
                continue
            if keep_plain:
                out.add(c)
            for k in pairs:
                out.add(self.first_pair_resource + k * self.buffer_cells + c)
        return frozenset(out)

    def _pair_id(self, a: ir.Loc, b: ir.Loc) -> int:
        key = frozenset((a, b))
        found = self._pair_ids.get(key)
        if found is None:
            found = self._pair_ids[key] = len(self._pair_ids)
        return found
