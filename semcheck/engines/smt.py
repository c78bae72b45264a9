"""The z3 engine: decide the same properties as the explicit engine by solving.

`smt_encoding.py` turns the protocol into constraints whose models are execution prefixes;
this module asks the questions, in turn:

1. faults: a cut in which some instruction faults (a device, core or semaphore index out of
   range), one query per fault not yet found;
2. stuck states: a terminal cut in which some thread is blocked; each answer is replayed and
   classified (deadlock or unsatisfied wait) by `properties.terminal_findings`, then that
   configuration (where every thread stopped, and on which semaphore) is excluded, until no
   terminal stuck cut is left;
3. leftovers: a terminal cut in which every thread finished and a semaphore that must be 0 at
   exit is not, one query per (allocation, index) not yet found;
4. the unrolling bound: whether any thread can take more backward jumps than were unrolled
   (`unroll.py`: loops with a constant trip count are unrolled fully; the bound counts the
   jumps that depend on inputs or reads). If it can, what was not unrolled was not checked,
   so without a violation the verdict is inconclusive, never safe.

Inputs are solver variables, so one query covers every input value. Every model is decoded
into an action sequence and replayed through `semantics` (a divergence is a bug and raises),
so findings, messages and traces are the explicit engine's own; a fault's trace is cut down
to the fault's causal past (`causal.py`).
"""

from __future__ import annotations

import z3

from semcheck import trace as tracing
from semcheck.engines.budget import Budget, BudgetExceeded, Monitor, ProgressFn, ProgressInfo, rss_mb
from semcheck.engines.causal import causal_past
from semcheck.engines.common import Exploration
from semcheck.engines.smt_encoding import Encoding
from semcheck.engines.smt_terms import NOT, OR
from semcheck.engines.unroll import CONSTANT_JUMP_CAP
from semcheck.properties import fault_findings, terminal_findings
from semcheck.semantics import Action, State, System

NAME = "z3"
DEFAULT_UNROLL = 8  # backward jumps per thread that depend on inputs or reads (unroll.py)


class EncodingMismatch(AssertionError):
    """A solver model that the semantics does not replay: a bug in the encoding."""


def explore(
    system: System,
    *,
    unroll: int = DEFAULT_UNROLL,
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
) -> Exploration:
    monitor = Monitor(budget or Budget.from_env(), progress)
    found = Exploration(system)
    session = None
    try:
        encoding = Encoding(system, unroll)
        session = _Session(system, encoding, monitor, found)
        session.find_faults()
        session.find_stuck_states()
        session.find_leftovers()
        session.check_bound(unroll)
    except BudgetExceeded as exceeded:
        found.exhausted = exceeded.reason
    found.seconds = monitor.elapsed()
    found.peak_memory_mb = max(monitor.peak_mb, rss_mb())
    found.solver_queries = session.queries if session else 0
    found.encoded_events = session.encoding.event_count if session else 0
    return found


class _Session:
    def __init__(self, system: System, encoding: Encoding, monitor: Monitor, found: Exploration):
        self.system, self.encoding, self.monitor, self.found = system, encoding, monitor, found
        self.queries = 0
        self.solver = z3.Solver()
        self.solver.add(*[c for c in encoding.constraints if c is not True])
        if any(c is False for c in encoding.constraints):
            self.solver.add(z3.BoolVal(False))

    # -- the questions --

    def find_faults(self) -> None:
        remaining = {k: c for k, c in self.encoding.fault_conditions().items() if c is not False}
        while remaining:
            model = self._solve(OR(*remaining.values()), "faults")
            if model is None:
                return
            initial, actions, states = self._replay(model)
            seen = False
            for j in range(len(actions)):
                if states[j + 1].faults == states[j].faults:
                    continue
                for finding in fault_findings(self.system, states[j + 1], states[j].faults):
                    seen |= remaining.pop(finding.key, None) is not None
                    if finding.key not in self.found.findings:
                        self.found.add(finding, initial, causal_past(self.system, states, actions, j))
            if not seen:
                raise EncodingMismatch("the solver found a fault that the replay does not reach")

    def find_stuck_states(self) -> None:
        self.solver.push()
        try:
            self.solver.add(_solver_term(self.encoding.terminal()))
            self.solver.add(_solver_term(self.encoding.some_thread_blocked()))
            while True:
                model = self._solve(True, "stuck states")
                if model is None:
                    return
                initial, actions, states = self._replay(model)
                findings = self._terminal(states[-1])
                if not findings:
                    raise EncodingMismatch("the solver's stuck state has no blocked thread")
                for finding in findings:
                    self.found.add(finding, initial, actions)
                self.solver.add(_solver_term(NOT(self.encoding.configuration(model))))
        finally:
            self.solver.pop()

    def find_leftovers(self) -> None:
        remaining = {k: c for k, c in self.encoding.leftover_conditions().items() if c is not False}
        if not remaining:
            return
        self.solver.push()
        try:
            self.solver.add(_solver_term(self.encoding.terminal()))
            self.solver.add(_solver_term(NOT(self.encoding.some_thread_blocked())))
            while remaining:
                model = self._solve(OR(*remaining.values()), "leftover semaphores")
                if model is None:
                    return
                initial, actions, states = self._replay(model)
                seen = False
                for finding in self._terminal(states[-1]):
                    seen |= remaining.pop(finding.key[1:], None) is not None
                    self.found.add(finding, initial, actions)
                if not seen:
                    raise EncodingMismatch("the solver's leftover is not in the replayed exit state")
        finally:
            self.solver.pop()

    def check_bound(self, unroll: int) -> None:
        if not self.encoding.has_overflow:
            return
        model = self._solve(self.encoding.overflow(), "the unrolling bound")
        if model is not None:
            self.found.exhausted = (
                f"a loop can run past the unrolling bound ({unroll} backward jumps per thread "
                f"that depend on inputs or semaphore reads, {CONSTANT_JUMP_CAP} in all); "
                "raise it with --unroll"
            )

    # -- solving, decoding, replaying --

    def _solve(self, goal, what: str) -> z3.ModelRef | None:
        budget = self.monitor.budget
        remaining = budget.timeout - self.monitor.elapsed()
        if remaining <= 0:
            raise BudgetExceeded(f"time budget of {budget.timeout:g} s ran out")
        mem = rss_mb()
        self.monitor.peak_mb = max(self.monitor.peak_mb, mem)
        if mem > self.monitor.memory_limit:
            raise BudgetExceeded(f"memory budget of {self.monitor.memory_limit:,.0f} MB ran out")
        self.solver.set("timeout", max(1, int(remaining * 1000)))
        self.queries += 1
        self._progress(what)
        answer = self.solver.check(*([] if goal is True else [_solver_term(goal)]))
        if answer == z3.unsat:
            return None
        if answer == z3.unknown:
            reason = self.solver.reason_unknown()
            if "timeout" in reason or "canceled" in reason:
                raise BudgetExceeded(f"time budget of {budget.timeout:g} s ran out in the solver")
            raise BudgetExceeded(f"the solver gave up ({reason})")
        return self.solver.model()

    def _progress(self, what: str) -> None:
        monitor = self.monitor
        if monitor.progress is None or monitor.elapsed() < monitor.FIRST_PROGRESS:
            return
        monitor.progress(
            ProgressInfo(0, 0, monitor.elapsed(), 0, 0, what=f"z3 query {self.queries} ({what})")
        )

    def _replay(self, model: z3.ModelRef) -> tuple[State, list[Action], list[State]]:
        inputs, decoded = self.encoding.decode(model)
        initial = self.system.initial_state(inputs)
        actions = [action for action, _, _ in decoded]
        try:
            states = tracing.replay(self.system, initial, actions)
        except AssertionError as e:
            raise EncodingMismatch(f"the solver's execution does not replay: {e}") from None
        for j, (action, t, pc) in enumerate(decoded):
            if t is not None and states[j].pcs[t] != pc:
                raise EncodingMismatch(
                    f"step {j + 1}: the solver has thread {t} at pc {pc}, the replay at {states[j].pcs[t]}"
                )
        return initial, actions, states

    def _terminal(self, state: State):
        if self.system.enabled(state):
            raise EncodingMismatch("the solver's terminal state has enabled actions")
        return terminal_findings(self.system, state)


def _solver_term(x):
    return z3.BoolVal(x) if isinstance(x, bool) else x
