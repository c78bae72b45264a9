"""Which events happen before which in every execution, by counting: a static relation the
encoding uses to leave out hazards that no execution can have.

`a` precedes `b` here means: in every execution in which `b` executes (a node fires
without fault, a copy side completes), `a` executed earlier. Three rules make it, and it is
closed under transitivity:

* program order: a node precedes every node it dominates in its thread's unrolled DAG;
* a copy's start precedes the completions of its sides;
* counting: a wait `w` passes only with the count of its semaphore at least its need. The
  count just before `w` is the sum of the changes executed before it, so it is at most the
  positive parts of the changes not known to come after `w`, plus the (negative) changes
  known to come before it. When leaving one positive change `c` out of that bound leaves
  less than the need, `w` cannot pass unless `c` executed first: `c` precedes `w`.

The counting rule needs counts that never go below 0, so that a kernel entry's reset (minus
the count) never adds: it is applied only to semaphores whose every change is a constant
increment, a decrementing wait for a constant at least 0, or an entry's reset (a count that
starts at 0 and only such changes stays at least 0), and only to waits whose semaphore and
need are constants.

New precedences let the rule see more changes as "after" a wait, so rule and closure are
applied in turns until nothing changes. A two-round barrier on one semaphore, for instance:
the second round's wait needs every signal of both rounds (its own first wait took one
round's worth), so every peer's first-round signal precedes it; the first round's wait
cannot tell a peer's second-round signal from a first-round one until something orders the
peer's second round after this device's first wait (say, a wait on data this device sends
after its barrier).

Sound because each rule is a fact about every execution of the semantics (the encoding's
constraints state the same counts); vacuous facts about events that never execute (a cycle
of precedences) are harmless, since they only speak of executions in which those events
execute.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from semcheck import ir
from semcheck.engines.z3 import unroll as unrolling
from semcheck.engines.z3.terms import is_const

# encoding.py's Encoding, NodeVars, Completion and Change: it imports this module, so their
# names here would be an import cycle (tests/test_layers.py), even under TYPE_CHECKING.
Encoding: TypeAlias = Any
NodeVars: TypeAlias = Any  # or a Completion: an event
Change: TypeAlias = Any

MAX_ROUNDS = 64  # rule-then-closure rounds; each adds precedences, so few are ever needed


class Precedence:
    """The relation over an encoding's instruction occurrences and copy completions."""

    def __init__(self, encoding: Encoding, tick=lambda: None):
        self._tick = tick
        self._ids: dict[int, int] = {}  # id(NodeVars or Completion) -> event number
        self._objects: list[object] = []
        for row in encoding.nodes:
            for nv in row:
                self._number(nv)
        for c in encoding.completions:
            self._number(c)
        self._rows = encoding.nodes
        self._completions = encoding.completions
        self._extra = [0] * len(self._objects)  # counted precedences into each event, as a bitset
        self.before = [0] * len(self._objects)  # event -> bitset of the events that precede it
        self._waits = list(_counted_waits(encoding))
        self._close()
        for _ in range(MAX_ROUNDS):
            tick()
            if not self._count():
                break
            self._close()

    def _number(self, x: object) -> None:
        self._ids[id(x)] = len(self._objects)
        self._objects.append(x)

    def id_of(self, x: NodeVars) -> int:
        return self._ids[id(x)]

    def precedes(self, a: NodeVars, b: NodeVars) -> bool:
        """In every execution in which `b` executes, `a` executed before it."""
        return bool(self.before[self.id_of(b)] >> self.id_of(a) & 1)

    def counted(self):
        """(earlier, wait) of every precedence the counting rule found (not their closure)."""
        for w, _changes, _need in self._waits:
            edges = self._extra[self.id_of(w)]
            while edges:
                low = edges & -edges
                yield self._objects[low.bit_length() - 1], w
                edges ^= low

    # -- closure --

    def _close(self) -> None:
        """Transitive closure of program order, start-before-completion and the counted
        precedences; repeated passes until stable (the counted edges cross threads in any
        order)."""
        before, extra, ids = self.before, self._extra, self._ids
        changed = True
        while changed:
            self._tick()
            changed = False
            for row in self._rows:
                for nv in row:
                    i = ids[id(nv)]
                    preds = nv.node.preds
                    common = 0
                    if preds:
                        common = -1
                        for p in preds:
                            pred = row[p]
                            j = ids[id(pred)]
                            mine = before[j] | (1 << j if pred.node.kind == unrolling.INSTR else 0)
                            common &= mine
                    new = common | before[i] | _closure(extra[i], before)
                    if new != before[i]:
                        before[i] = new
                        changed = True
            for c in self._completions:
                i = ids[id(c)]
                s = ids[id(c.start)]
                new = before[i] | before[s] | 1 << s | _closure(extra[i], before)
                if new != before[i]:
                    before[i] = new
                    changed = True

    # -- the counting rule --

    def _count(self) -> bool:
        """Apply the counting rule to every wait; whether it found a new precedence."""
        found = False
        for w, changes, need in self._waits:
            wi = self.id_of(w)
            after_w = [self.before[self._event_of(c)] >> wi & 1 for c, _ in changes]
            bound = 0
            positive = []
            for (c, cond), after in zip(changes, after_w):
                if after:
                    continue  # executes after w whenever it executes: never counted before it
                delta = c.delta
                if not isinstance(delta, int):
                    continue  # an entry's reset: minus a count that is at least 0
                if delta > 0:
                    bound += delta
                    positive.append(c)
                elif cond is True and self.before[wi] >> self._event_of(c) & 1:
                    bound += delta  # a decrement sure to come first
            for c in positive:
                assert isinstance(c.delta, int)
                ci = self._event_of(c)
                if bound - c.delta < need and not self._extra[wi] >> ci & 1:
                    self._extra[wi] |= 1 << ci
                    found = True
        return found

    def _event_of(self, change: Change) -> int:
        return self.id_of(change.completion if change.completion is not None else change.node)


def _closure(edges: int, before: list[int]) -> int:
    """The events in bitset `edges` and everything that precedes them."""
    out = edges
    while edges:
        low = edges & -edges
        out |= before[low.bit_length() - 1]
        edges ^= low
    return out


def _counted_waits(encoding: Encoding):
    """(wait, the changes to its semaphore other than its own decrement, need) of every wait
    the counting rule applies to."""
    qualifies: dict[int, bool] = {}
    for row in encoding.nodes:
        for w in row:
            if w.need is None or w.read_value is not None or not is_const(w.need) or w.target is None:
                continue
            if len(w.target.candidates) != 1 or w.target.candidates[0][1] is not True:
                continue
            sid = w.target.candidates[0][0]
            if sid not in qualifies:
                qualifies[sid] = all(_stays_nonnegative(c) for c, _ in encoding.changes.get(sid, ()))
            if not qualifies[sid]:
                continue
            changes = [(c, cond) for c, cond in encoding.changes.get(sid, ())
                       if not (c.node is w and c.completion is None)]
            yield w, changes, w.need


def _stays_nonnegative(change: Change) -> bool:
    """A change of the kinds that keep a count at least 0 (see the module's docstring)."""
    if isinstance(change.node.node.instr, ir.KernelEntry) and change.completion is None:
        return True
    if not is_const(change.delta):
        return False
    if change.completion is not None or isinstance(change.node.node.instr, ir.Signal):
        return change.delta > 0
    if isinstance(change.node.node.instr, (ir.Wait, ir.DmaWait)):
        need = change.node.need
        return isinstance(need, int) and need >= 0
    return False
