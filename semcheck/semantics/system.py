"""The System: a Protocol compiled into a transition system, and its contract to the engines.

Shaped like stateright's Model. An engine (engines/, parametric/) starts from
`initial_states()`, asks `enabled(state)` for the actions there and `step(state, action)`
for each successor, and judges states with properties.py (`fault_findings`,
`hazard_findings`, `terminal_findings`). That contract is the `Model` protocol below; the
rest of `System` is what the engines' reductions and messages read: the static tables
(tables.py: threads, bodies, semaphore and buffer instances, cells, invocations),
the footprints of every instruction (`footprints`, `tables`, `touchers`, `resource_count`),
the racing pairs (races.py), and the search's shortcuts (`thread_steps`, `movable_threads`,
`movable_after`, `can_move`, `static_wait`, `may_add`, `touches`, `inputs_read`).

What each instruction does is in rules.py, one function per instruction kind.
"""

from __future__ import annotations

from array import array
from typing import Iterator, Protocol

from semcheck import ir
from semcheck.semantics.footprints import EMPTY, Y_WAITER, Footprint, ThreadFootprints, ThreadTable, packed
from semcheck.semantics.races import RaceTables
from semcheck.semantics.resource_index import ResourceIndex
from semcheck.semantics.rules import EXEC_RULES, FOOTPRINT_RULES, WAIT_RULES, complete
from semcheck.semantics.state import FAULTED, Action, Counts, EventFires, Fault, State, ThreadStep, distinct
from semcheck.semantics.tables import without_gc


class Model(Protocol):
    """What every engine needs of a transition system (`System` is the one implementation)."""

    def initial_states(self) -> list[State]:
        """One start state per combination of the protocol's input values."""

    def iter_initial_states(self) -> Iterator[State]:
        """`initial_states`, lazily."""

    def enabled(self, state: State, movable: tuple[int, ...] | None = None) -> list[Action]:
        """Every action enabled in `state`: a `ThreadStep` for each thread that can move,
        an `EventFires` for each distinct DMA completion in flight."""

    def step(self, state: State, action: Action) -> State:
        """The successor of `state` by an enabled `action` (hazards recorded in it)."""

    def blocked_wait(self, state: State, t: int) -> tuple[int, int, int] | None:
        """(semaphore, needed, current count) when thread `t` sits at a wait it cannot pass."""

    def current(self, state: State, t: int) -> ir.Instr | None:
        """Thread `t`'s next instruction, None when it finished or faulted."""

    def thread_name(self, t: int) -> str:
        """Thread `t` as messages name it."""


_NEVER_BLOCKS: tuple[()] = ()
_STOPS = ("cut",)  # where a thread's lowering stopped (`ir.Cut`): it never moves on


class _WaitTable:
    """One thread's `System._static_wait` per pc, in two machine arrays (a tuple per wait
    costs 70 bytes, and a ring of N devices has 2N^2 waits): `[pc]` gives it back."""

    __slots__ = ("_sems", "_needs")
    _CODES = {id(_NEVER_BLOCKS): -1, id(_STOPS): -2, id(None): -3}

    def __init__(self, waits: list):
        self._sems, self._needs = array("q"), array("q")
        for known in waits:
            code = self._CODES.get(id(known))
            if code is None and not -2**63 <= known[1] < 2**63:
                code = -3  # an amount past 64 bits: resolved in each state instead
            self._sems.append(known[0] if code is None else code)
            self._needs.append(known[1] if code is None else 0)

    def __len__(self) -> int:
        return len(self._sems)

    def __getitem__(self, pc: int):
        sid = self._sems[pc]
        if sid >= 0:
            return sid, self._needs[pc]
        return _NEVER_BLOCKS if sid == -1 else _STOPS if sid == -2 else None


class System(RaceTables):
    """A Protocol compiled for fast exploration."""

    def __init__(self, protocol: ir.Protocol, *, exclude_ordered_pairs: bool = True):
        """`exclude_ordered_pairs=False` keeps every overlapping pair in `racing_pairs`, even
        those an order that holds in every schedule excludes (the tests' reference)."""
        self._exclude_ordered_pairs = exclude_ordered_pairs
        with without_gc():  # its tables are acyclic: see `without_gc`
            self._build(protocol)

    def _build(self, protocol: ir.Protocol) -> None:
        self._build_tables(protocol)
        # every instruction's footprint, packed (`footprints.ThreadFootprints`): `footprints[t][pc]`
        self.footprints = [
            ThreadFootprints((packed(self._static_footprint(t, instr), self.cell_base) for instr in body),
                             self.cell_base)
            for t, body in enumerate(self.bodies)
        ]
        self.tables = [ThreadTable(body, fps) for body, fps in zip(self.bodies, self.footprints)]
        # resource -> the threads that may touch it
        self.touchers = ResourceIndex.of_threads(self.resource_count, (table.resources for table in self.tables))
        self._waits = [_WaitTable([self._static_wait(t, instr) for instr in body]) for t, body in enumerate(self.bodies)]
        self._resolved = {}
        # every thread's action, made once: `enabled` and the reduction name them in every state
        self.thread_steps = tuple(map(ThreadStep, range(len(self.bodies))))

    def waiters(self, sid: int) -> list[int]:
        """The threads that may wait on (or read) semaphore instance `sid`."""
        return [t for t in self.touchers.get(sid) if self.tables[t].future(0, sid)[1] & Y_WAITER]

    def _static_wait(self, t: int, instr: ir.Instr) -> tuple | None:
        """(semaphore, amount) of a wait whose semaphore and amount are constants, so that
        `enabled` need not resolve it in every state; `_NEVER_BLOCKS` for an instruction
        that is no wait, `_STOPS` for the point where the thread's lowering stopped; None
        when only the state can tell (or executing it faults)."""
        if type(instr) is ir.Cut:
            return _STOPS
        if not isinstance(instr, (ir.Wait, ir.DmaWait)):  # WAIT_RULES' instructions
            return _NEVER_BLOCKS
        ref = instr.sem
        need = instr.value if isinstance(instr, ir.Wait) else instr.nbytes
        if not (isinstance(need, int) and isinstance(ref.index, int)
                and ir.is_constant(ref.device) and ir.is_constant(ref.core)):
            return None
        sids = self.candidates(t, ref)
        return (next(iter(sids)), need) if len(sids) == 1 else None

    def _static_footprint(self, t: int, instr: ir.Instr) -> Footprint:
        rule = FOOTPRINT_RULES.get(type(instr))
        return rule(self, t, instr) if rule else EMPTY

    def initial_states(self) -> list[State]:
        return list(self.iter_initial_states())

    def iter_initial_states(self):
        """One start state per combination of input values, lazily (there may be billions)."""
        ranges = [range(inp.lo, inp.hi + 1) for inp in self.protocol.inputs]
        return (self.initial_state(values) for values in _lazy_product(ranges))

    def initial_state(self, inputs: tuple[int, ...]) -> State:
        """The start state for one value of every input (in `protocol.inputs` order)."""
        pcs = tuple(0 for _ in self.threads)
        regs = tuple(tuple(0 for _ in r) for r in self.registers)
        sems = Counts(len(self.instances))
        return State(pcs, regs, sems, (), (), tuple(inputs), ())

    def blocked_wait(self, state: State, t: int) -> tuple[int, int, int] | None:
        """(semaphore, needed, current count) when thread t sits at a wait it cannot pass."""
        pc = state.pcs[t]
        if 0 <= pc < len(self.bodies[t]):
            known = self._waits[t][pc]
            if known is _NEVER_BLOCKS or known is _STOPS:
                return None
            if known is not None:
                sid, need = known
                have = state.sems[sid]
                return None if have >= need else (sid, need, have)
        instr = self.current(state, t)
        rule = WAIT_RULES.get(type(instr))
        if rule is None:
            return None
        try:
            sid, need = rule(self, t, instr, state)
        except Fault:
            return None  # executing it will fault: that is a move, not a block
        have = state.sems[sid]
        return None if have >= need else (sid, need, have)

    def at_cut(self, state: State) -> bool:
        """Whether some thread stands at the point where its lowering stopped."""
        return any(
            0 <= pc < len(body) and type(body[pc]) is ir.Cut for pc, body in zip(state.pcs, self.bodies)
        )

    def static_wait(self, t: int, pc: int) -> tuple[int, int] | None:
        """(semaphore, amount) of the wait at (t, pc) when both are constants, else None."""
        known = self._waits[t][pc]
        return None if known is _NEVER_BLOCKS or known is _STOPS else known

    def can_move(self, state: State, t: int) -> bool:
        """Whether thread t has an instruction to execute that is not a blocked wait."""
        pc = state.pcs[t]
        waits = self._waits[t]
        if not 0 <= pc < len(waits):
            return False
        known = waits[pc]
        if known is _NEVER_BLOCKS:
            return True
        if known is _STOPS:
            return False
        if known is not None:
            return state.sems[known[0]] >= known[1]
        return self.blocked_wait(state, t) is None

    def movable_threads(self, state: State) -> tuple[int, ...]:
        return tuple(t for t in range(len(self.bodies)) if self.can_move(state, t))

    def movable_after(self, before: State, movable: tuple[int, ...], action: Action, after: State) -> tuple[int, ...]:
        """`movable_threads(after)` for a successor of `before` by `action`, from the
        threads that could move in `before`: only the acting thread, and threads whose wait
        may name a semaphore whose count changed, can differ. (A thread's wait resolves
        through its own registers, which only its own steps change.)"""
        recheck = {action.thread} if isinstance(action, ThreadStep) else set()
        if before.sems is not after.sems:
            for sid, _count in set(before.sems.items).symmetric_difference(after.sems.items):
                recheck.update(self.waiters(sid))
        if not recheck:
            return movable
        kept = [t for t in movable if t not in recheck]
        kept += [t for t in recheck if self.can_move(after, t)]
        return tuple(sorted(kept))

    def enabled(self, state: State, movable: tuple[int, ...] | None = None) -> list[Action]:
        """Every enabled action: each thread that can move (`movable`, when the caller
        already knows them), then each distinct pending completion."""
        threads = self.movable_threads(state) if movable is None else movable
        steps = self.thread_steps
        actions: list[Action] = [steps[t] for t in threads]
        if state.events:
            actions.extend(map(EventFires, distinct(state.events)))
        return actions

    def step(self, state: State, action: Action) -> State:
        if isinstance(action, EventFires):
            return complete(self, state, action.event)
        t = action.thread
        instr = self.bodies[t][state.pcs[t]]
        try:
            return EXEC_RULES[type(instr)](self, t, instr, state)
        except Fault as fault:
            pcs = list(state.pcs)
            pcs[t] = FAULTED
            faults = tuple(sorted(state.faults + ((t, state.pcs[t], fault.kind, fault.detail),)))
            return state._replace(pcs=tuple(pcs), faults=faults)

    # -- what the reduction and the properties need --

    def may_add(self, t: int, pc: int, sid: int) -> bool:
        """Whether thread t, from pc on, may still add to semaphore instance `sid` (through
        its own signals or the copies it starts)."""
        from semcheck.semantics.footprints import X_INC

        return bool(self.tables[t].future(pc, sid)[0] & X_INC)

    def touches(self, t: int) -> frozenset[int]:
        """Every semaphore instance and memory cell (ids of one space: instances below
        `cell_base`) thread `t` may ever act on, through its own instructions or the copies
        it starts. Threads that share none of these, nor an input they read
        (`inputs_read`), can never affect each other (`engines/components.py`)."""
        return self.tables[t].reachable


def _lazy_product(ranges: list[range]):
    """itertools.product without materializing its arguments (a range may be huge)."""
    if not ranges:
        yield ()
        return
    for head in ranges[0]:
        for tail in _lazy_product(ranges[1:]):
            yield (head, *tail)

