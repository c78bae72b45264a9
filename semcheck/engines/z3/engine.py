"""The z3 engine: decide the same properties as the explicit engine by solving.

`encoding.py` turns the protocol into constraints whose models are execution prefixes;
this module asks the questions, in turn:

1. faults: a cut in which some instruction faults (a device, core or semaphore index out of
   range), one query per fault not yet found;
2. hazards, which a transition records in the state and never blocks on: a data race (an
   access while a conflicting copy is in flight), a remote signal or copy landing on a core
   outside the sender's invocation (remote_before_entry), a leftover that a later kernel
   entry finds before it resets the core's semaphores, and a wait on a GPU mbarrier phase
   that passes when the barrier has completed the next phase too (barrier_phase_overrun);
   one query per finding not yet found (each pair of racing lines is its own finding: the
   explicit engine watching every line reports the same), each witness reported up to the
   step that recorded it;
3. stuck states: a terminal cut in which some thread is blocked; each answer is replayed and
   classified (deadlock or unsatisfied wait) by `properties.terminal_findings`, then that
   configuration (where every thread stopped, and on which semaphore) is excluded, until no
   terminal stuck cut is left;
4. leftovers: a terminal cut in which every thread finished and a semaphore that must be 0 at
   exit is not, one query per (allocation, index) not yet found;
5. when asked (`report_ends`), a clean end, unless a leftover's witness showed one: whether
   some execution ends with every thread finished (`engines/components.py` needs it to merge
   independent parts);
6. the unrolling bound: whether any thread can take more backward jumps than were unrolled
   (`unroll.py`: loops with a constant trip count are unrolled fully; the bound counts the
   jumps that depend on inputs or reads). If it can, what was not unrolled was not checked,
   so without a violation the verdict is inconclusive, never safe.

Each question is answered by a witness, an execution of the semantics, found in three steps:

* the counting relaxation (no positions; only counts, and bounds on what each wait can have
  seen) is asked first: if even counting rules the question out, the answer is no. A safe
  ring all-gather is proved this way: a device stuck at step k needs its left neighbour
  stuck earlier, around the ring, which no count allows;
* otherwise the cut it proposes (how far each thread got, with which inputs) is scheduled
  greedily through the semantics (`guided.py`); if that execution answers the question, it
  is the witness;
* otherwise the full query, with positions, is asked, and its model decoded into an action
  sequence and replayed (a model that does not replay is a bug in the encoding and raises).

Either way findings, messages and traces come from the semantics and `properties`, as in
the explicit engine; a fault's trace is cut down to its causal past (`causal.py`). Inputs
are solver variables, so one query covers every input value.
"""

from __future__ import annotations

import threading

import z3

from semcheck.semantics import trace as tracing
from semcheck.engines.z3 import guided
from semcheck.engines.budget import JUDGING, Budget, BudgetExceeded, Monitor, ProgressFn, ProgressInfo, rss_mb
from semcheck.engines.causal import causal_past
from semcheck.engines.common import Exploration
from semcheck.engines.options import Z3Options
from semcheck.engines.z3.encoding import Encoding
from semcheck.engines.z3.scope import unmodelled
from semcheck.engines.z3.terms import NOT, OR, fresh_context
from semcheck.engines.z3.unroll import CONSTANT_JUMP_CAP
from semcheck.kinds import StoppedBy
from semcheck.semantics.properties import (
    CASCADING_KINDS, CLEAN_END, STUCK_END, Kind, fault_findings, hazard_findings, terminal_findings, went_wrong,
)
from semcheck.semantics import Action, EventFires, State, System

NAME = "z3"


class EncodingMismatch(AssertionError):
    """A solver model that the semantics does not replay: a bug in the encoding."""


# z3's Python bindings share one default context, which two threads must not use at once
# (it crashes the process): checks run from a thread pool take turns here.
_Z3_IN_USE = threading.Lock()


# The first bound on a solver call while z3 shares the core with other engines (engine
# auto): the MoE kernels' queries take well under it, so they are never asked twice.
FIRST_CALL_BOUND = 1.0


def explore(
    system: System,
    options: Z3Options = Z3Options(),
    *,
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
) -> Exploration:
    """`options.report_ends`: also ask whether some execution ends cleanly (question 5), which
    only merging independent parts needs. `options.stop_at_first`: ask no more questions once
    an answer is an error (the check reports its first counterexample)."""
    unroll, report_ends, stop_at_first = options.unroll, options.report_ends, options.stop_at_first
    stop = budget.stop if budget is not None else None
    if stop is None:
        with _Z3_IN_USE:
            fresh_context()  # the answer must not depend on what this process checked before
            return _explore(system, unroll, budget, progress, report_ends, stop_at_first)
    while not _Z3_IN_USE.acquire(timeout=0.05):  # another check is solving: wait, unless stopped
        if stop.is_set():
            found = Exploration(system, exhausted=stop.reason, stopped_by=StoppedBy.STOP, solver_queries=0,
                                encoded_events=0)
            return found
    try:
        fresh_context()
        return _explore(system, unroll, budget, progress, report_ends, stop_at_first)
    finally:
        _Z3_IN_USE.release()


def _explore(
    system: System, unroll: int, budget: Budget | None, progress: ProgressFn | None, report_ends: bool,
    stop_at_first: bool = False,
) -> Exploration:
    monitor = Monitor(budget or Budget.from_env(), progress, phase="encoding for z3")
    found = Exploration(system)
    session = None
    missing = unmodelled(system)
    if missing is not None:
        found.exhausted = f"the z3 engine does not model {missing} yet (use --engine explicit)"
        found.stopped_by = StoppedBy.ENGINE
        found.solver_queries = 0
        return found
    try:
        encoding = Encoding(system, unroll, tick=lambda: _encoding_tick(monitor))
        monitor.phase = "solving with z3"
        session = _Session(system, encoding, monitor, found, stop_at_first)
        questions = [session.find_faults, session.find_hazards, session.find_stuck_states, session.find_leftovers]
        if report_ends:
            questions.append(session.find_clean_end)
        for question in questions:
            question()
            if stop_at_first and found.has_errors:
                break
        else:
            session.check_bound(unroll)
    except BudgetExceeded as exceeded:
        found.exhausted, found.stopped_by = exceeded.reason, exceeded.by
    except MemoryError:
        found.exhausted, found.stopped_by = f"memory ran out while {monitor.phase}", StoppedBy.MEMORY
    except z3.Z3Exception:
        stop = monitor.budget.stop
        if stop is None or not stop.is_set():
            raise
        # Stopped from outside (engine auto): the context's interrupt can land on any z3
        # call that runs at that moment, not only on a solver check.
        found.exhausted, found.stopped_by = stop.reason, StoppedBy.STOP
    found.seconds = monitor.elapsed()
    found.peak_memory_mb = max(monitor.peak_mb, rss_mb())
    found.solver_queries = session.queries if session else 0
    found.encoded_events = session.encoding.event_count if session else 0
    return found


def _encoding_tick(monitor: Monitor) -> None:
    monitor.check()
    monitor.say("z3: encoding")


Witness = tuple[State, list[Action], list[State]]  # initial state, actions, states along them


class _Session:
    def __init__(self, system: System, encoding: Encoding, monitor: Monitor, found: Exploration,
                 stop_at_first: bool = False):
        self.system, self.encoding, self.monitor, self.found = system, encoding, monitor, found
        self.stop_at_first = stop_at_first
        self.queries = 0
        self.call_bound = FIRST_CALL_BOUND  # seconds a solver call may take while z3 shares the core
        base = [_solver_term(c) for c in encoding.constraints if c is not True]
        self.counting = _new_solver()  # the relaxation: no ordering constraints at all
        self.counting.add(*base)
        self.solver = _new_solver()
        self.solver.add(*base)
        self.solver.add(*[_solver_term(c) for c in encoding.ordering if c is not True])

    # -- the questions --

    def find_faults(self) -> None:
        remaining = {k: c for k, c in self.encoding.fault_conditions().items() if c is not False}

        def new_fault(states: list[State]) -> bool:
            return any((kind, t, pc) in remaining for t, pc, kind, _ in states[-1].faults)

        while remaining and not self._done():
            witness = self._witness(OR(*remaining.values()), "faults", new_fault)
            if witness is None:
                return
            initial, actions, states = witness
            for j in range(len(actions)):
                if states[j + 1].faults == states[j].faults:
                    continue
                for finding in fault_findings(self.system, states[j + 1], states[j].faults):
                    remaining.pop(finding.key, None)
                    if finding.key not in self.found.findings:
                        self.found.add(finding, initial, causal_past(self.system, states, actions, j))

    def find_hazards(self) -> None:
        """Data races, arrivals outside the kernel, leftovers found at a later entry and
        mbarrier phase overruns: one query for every such finding not yet found; each witness is replayed and every
        hazard the semantics records along it is reported, with the path to where it was
        recorded."""
        remaining = {k: c for k, c in self.encoding.hazards.items() if c is not False}

        def new_hazard(states: list[State]) -> bool:
            return any(f.key in remaining for f in hazard_findings(self.system, states[-1]))

        while remaining and not self._done():
            witness = self._witness(OR(*remaining.values()), "hazards", new_hazard, lazy_first=True)
            if witness is None:
                return
            initial, actions, states = witness
            for j in range(len(actions)):
                if states[j + 1].hazards == states[j].hazards:
                    continue
                for finding in hazard_findings(self.system, states[j + 1], states[j].hazards):
                    remaining.pop(finding.key, None)
                    if finding.key not in self.found.findings:
                        self.found.add(finding, initial, actions[: j + 1])

    def find_stuck_states(self) -> None:
        seen: set[tuple] = set()

        def new_stuck_state(states: list[State]) -> bool:
            final = states[-1]
            return self._stuck(final) and not went_wrong(final) and self._configuration(final) not in seen

        self._push()
        try:
            self._add(self.encoding.terminal())
            self._add(self._no_cascade())
            self._add(self.encoding.some_thread_blocked())
            while not self._done():
                witness = self._witness(True, "stuck states", new_stuck_state)
                if witness is None:
                    return
                initial, actions, states = witness
                final = states[-1]
                self.found.ends.add(STUCK_END)
                with self.monitor.during(JUDGING):
                    for finding in terminal_findings(self.system, final, self.monitor.check):
                        self.found.add(finding, initial, actions)
                seen.add(self._configuration(final))
                self._add(NOT(self.encoding.configuration_of(final)))
        finally:
            self._pop()

    def find_leftovers(self) -> None:
        remaining = {
            k: c for k, c in self.encoding.leftover_conditions().items()
            if c is not False and (Kind.SEMAPHORE_LEFTOVER, *k) not in self.found.findings
        }
        if not remaining:
            return

        def leftovers(state: State) -> list:
            if not self._terminal(state) or went_wrong(state) or any(
                self.system.blocked_wait(state, t) for t in range(len(state.pcs))
            ):
                return []
            with self.monitor.during(JUDGING):
                return [f for f in terminal_findings(self.system, state, self.monitor.check) if f.key[1:] in remaining]

        self._push()
        try:
            self._add(self.encoding.terminal())
            self._add(self._no_cascade())
            self._add(NOT(self.encoding.some_thread_blocked()))
            while remaining and not self._done():
                witness = self._witness(
                    OR(*remaining.values()), "leftover semaphores", lambda states: bool(leftovers(states[-1]))
                )
                if witness is None:
                    return
                initial, actions, states = witness
                self.found.ends.add(CLEAN_END)
                for finding in leftovers(states[-1]):
                    remaining.pop(finding.key[1:], None)
                    self.found.add(finding, initial, actions)
        finally:
            self._pop()

    def find_clean_end(self) -> None:
        """Whether some execution ends with every thread finished and none faulted (a
        leftover's witness already is one). Merging independent parts needs it: a part's
        leftovers are the whole's only when every other part can end that way too."""
        if CLEAN_END in self.found.ends:
            return
        self._push()
        try:
            self._add(self.encoding.terminal())
            self._add(NOT(self.encoding.some_thread_blocked()))
            clean = lambda states: self._terminal(states[-1]) and not self._stuck(states[-1])  # noqa: E731
            if self._witness(True, "a clean end", clean) is not None:
                self.found.ends.add(CLEAN_END)
        finally:
            self._pop()

    def check_bound(self, unroll: int) -> None:
        if not self.encoding.has_overflow:
            return
        goal, what = self.encoding.overflow(), "the unrolling bound"
        if self._satisfiable(goal, what, ordered=False) is None:
            return  # not even by counting
        if self._satisfiable(goal, what, ordered=True) is not None:
            self.found.exhausted = (
                f"a loop can run past the unrolling bound ({unroll} backward jumps per thread "
                f"that depend on inputs or semaphore reads, {CONSTANT_JUMP_CAP} in all); "
                "raise it with --unroll"
            )
            self.found.stopped_by = StoppedBy.BOUND

    def _done(self) -> bool:
        """Whether the check stops here: at its first counterexample, when asked to."""
        return self.stop_at_first and self.found.has_errors

    # -- the states the questions are about --

    def _no_cascade(self):
        """No hazard that changes what happens next happens on the way (`properties.went_wrong`):
        what follows one is its consequence, reported as that hazard."""
        return NOT(OR(*(c for key, c in self.encoding.hazards.items()
                        if key[0].value in CASCADING_KINDS and c is not False)))

    def _terminal(self, state: State) -> bool:
        return not state.faults and not self.system.enabled(state)

    def _stuck(self, state: State) -> bool:
        return self._terminal(state) and any(
            self.system.blocked_wait(state, t) is not None for t in range(len(state.pcs))
        )

    def _configuration(self, state: State) -> tuple:
        """What decides a terminal state's findings: where each thread stopped, and on which
        semaphore it waits there."""
        waits = tuple(
            None if (b := self.system.blocked_wait(state, t)) is None else b[0] for t in range(len(state.pcs))
        )
        return state.pcs, waits

    # -- witnesses: counting, then a guided schedule, then the ordered query --

    def _witness(self, goal, what: str, wanted, lazy_first: bool = False) -> Witness | None:
        """An execution that `wanted(states)` accepts and that the question's constraints
        allow, or None when there is none. Hazards happen while a copy is still in flight
        or a peer has not entered yet: their guided schedules try completing copies late
        first."""
        proposal = self._satisfiable(goal, what, ordered=False)
        if proposal is None:
            return None  # not even by counting
        for lazy in ((True, False) if lazy_first else (False,)):
            witness = self._guided(proposal, lazy)
            if wanted(witness[2]):
                return witness
        model = self._satisfiable(goal, what, ordered=True)
        if model is None:
            return None
        witness = self._replay(model)
        if not wanted(witness[2]):
            raise EncodingMismatch(f"the solver's answer about {what} is not one when replayed")
        return witness

    def _guided(self, model: z3.ModelRef, lazy: bool = False) -> Witness:
        inputs, decoded = self.encoding.decode(model)
        steps = [0] * len(self.system.threads)
        for _, t, _ in decoded:
            if t is not None:
                steps[t] += 1
        initial = self.system.initial_state(inputs)
        actions, states = guided.schedule(self.system, initial, steps, lazy_completions=lazy)
        return initial, actions, states

    def _satisfiable(self, goal, what: str, ordered: bool) -> z3.ModelRef | None:
        """A model of the question (with ordering, or its counting relaxation), or None.
        While other engines share the core (engine auto), a call is cut at `call_bound`
        seconds and asked again, with the bound doubled, at z3's next turn
        (engines/turns.py), so that one hard query cannot hold the core for minutes while
        a search that needs seconds waits."""
        budget = self.monitor.budget
        solver = self.solver if ordered else self.counting
        term = [] if goal is True else [_solver_term(goal)]
        self.queries += 1
        while True:
            self.monitor.check()  # at the end of z3's turn: wait for its next one
            remaining = self.monitor.remaining()
            shares = budget.turn is not None and budget.turn.shared()
            bounded = shares and self.call_bound < remaining
            solver.set("timeout", max(1, int((self.call_bound if bounded else remaining) * 1000)))
            self._progress(what)
            if budget.stop is None:
                answer = solver.check(*term)
            else:  # this thread holds _Z3_IN_USE: interrupting the context stops only this call
                with budget.stop.on_stop(solver.ctx.interrupt):
                    answer = solver.check(*term)
            if answer != z3.unknown:
                break
            reason = solver.reason_unknown()
            cut = "timeout" in reason or "canceled" in reason or "interrupted" in reason
            if not (bounded and cut and not (budget.stop is not None and budget.stop.is_set())):
                self.monitor.check()  # stopped from outside, or out of memory: say which
                if cut:
                    raise BudgetExceeded(f"time budget of {budget.timeout:g} s ran out in the solver", StoppedBy.TIME)
                raise BudgetExceeded(f"the solver gave up ({reason})", StoppedBy.ENGINE)
            self.call_bound *= 2
        if answer == z3.unsat:
            return None
        return solver.model()

    def _progress(self, what: str) -> None:
        monitor = self.monitor
        if monitor.progress is None or monitor.elapsed() < monitor.FIRST_PROGRESS:
            return
        monitor.progress(
            ProgressInfo(0, 0, monitor.elapsed(), 0, 0, what=f"z3 query {self.queries} ({what})")
        )

    def _replay(self, model: z3.ModelRef) -> Witness:
        inputs, decoded = self.encoding.decode(model)
        initial = self.system.initial_state(inputs)
        states, actions = [initial], []
        for action, _, _ in decoded:  # a decoded completion knows no accesses: take the pending one
            actions.append(_pending(states[-1], action))
            try:
                states += tracing.replay(self.system, states[-1], actions[-1:])[1:]
            except AssertionError as e:
                raise EncodingMismatch(f"the solver's execution does not replay: {e}") from None
        for j, (_action, t, pc) in enumerate(decoded):
            if t is not None and states[j].pcs[t] != pc:
                raise EncodingMismatch(
                    f"step {j + 1}: the solver has thread {t} at pc {pc}, the replay at {states[j].pcs[t]}"
                )
        return initial, actions, states

    # Both solvers hold the same question-specific constraints.
    def _push(self) -> None:
        self.counting.push()
        self.solver.push()

    def _pop(self) -> None:
        self.counting.pop()
        self.solver.pop()

    def _add(self, term) -> None:
        self.counting.add(_solver_term(term))
        self.solver.add(_solver_term(term))


def _pending(state: State, action: Action) -> Action:
    """The completion in `state` that a decoded one names (same side, start, semaphore and
    amount); the solver does not track what a copy reads and writes, the state does."""
    if not isinstance(action, EventFires):
        return action
    decoded = action.event
    for event in state.events:
        if event[:5] == decoded[:5]:
            return EventFires(event)
    return action


def _new_solver() -> z3.Solver:
    """Each question is solved afresh, after preprocessing that substitutes the encoding's
    defined variables away (solve-eqs): on the counting problems of a 32-device ring this
    is some 30 times faster than z3's default incremental solver."""
    return z3.Then("simplify", "solve-eqs", "smt").solver()


def _solver_term(x):
    return z3.BoolVal(x) if isinstance(x, bool) else x
