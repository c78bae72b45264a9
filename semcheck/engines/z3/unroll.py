"""Unroll one thread's control-flow graph into a DAG of instruction occurrences, lazily.

A node is `(layer, pc)`: instruction `pc` reached after `layer` backward jumps. Forward
edges (to a higher pc) stay in their layer and backward edges (a loop's back edge) go to the
next one, so the graph is acyclic and `(layer, pc)` is a topological order.

The DAG is discovered while it is encoded: `next_node()` hands out nodes in topological
order, each with all its predecessors known, and the encoder adds only the edges whose guard
is not constantly false. So a loop whose trip count folds to a constant (a counter compared
with a constant) is unrolled exactly that often, and straight-line code is a single chain.

The bound counts *symbolic* backward jumps only: those whose branch condition depends on an
input or a `semaphore_read`. A jump decided by constants is free, up to `CONSTANT_JUMP_CAP`
(an endless constant loop must end somewhere). A backward edge beyond either limit leads to
the thread's OVERFLOW node: reaching it means the unrolling was too short for that path, and
an engine that sees it must not call the protocol safe.
"""

from __future__ import annotations

import heapq
from dataclasses import field

from semcheck import ir
from semcheck.records import record

INSTR, EXIT, OVERFLOW = "instr", "exit", "overflow"

# Why an edge is taken: always, when a branch condition is non-zero, when it is zero.
ALWAYS, IF_TRUE, IF_FALSE = "always", "if_true", "if_false"

Key = tuple[int, int]  # (layer, pc); the overflow node is (CONSTANT_JUMP_CAP + 1, len(body) + 1)

CONSTANT_JUMP_CAP = 1000


@record
class Node:
    index: int  # position in the thread's topological order
    key: Key
    kind: str  # INSTR, EXIT or OVERFLOW
    instr: ir.Instr | None
    preds: list[int] = field(default_factory=list)  # node indices
    ancestors: int = 0  # bitmask of node indices that precede this one on some path
    symbolic_jumps: int = 0  # most symbolic backward jumps on a path to here

    @property
    def layer(self) -> int:
        return self.key[0]

    @property
    def pc(self) -> int:
        """The instruction index; len(body) at the exit; -1 at the overflow node."""
        return -1 if self.kind == OVERFLOW else self.key[1]


def successors(pc: int, instr: ir.Instr) -> list[tuple[int, str]]:
    """(target pc, condition) of every edge out of instruction `pc`."""
    if isinstance(instr, ir.Jump):
        return [(instr.target, ALWAYS)]
    if isinstance(instr, ir.Branch):
        return [(instr.target, IF_TRUE), (pc + 1, IF_FALSE)]
    return [(pc + 1, ALWAYS)]


class Unroller:
    def __init__(self, body: tuple[ir.Instr, ...], bound: int):
        self.body, self.bound = body, bound
        self.nodes: list[Node] = []
        self.by_key: dict[Key, Node] = {}
        self.overflow: Node | None = None
        self._pending: dict[Key, list[int]] = {(0, 0): []}
        self._symbolic: dict[Key, int] = {(0, 0): 0}
        self._heap: list[Key] = [(0, 0)]
        self._overflow_key: Key = (CONSTANT_JUMP_CAP + 1, len(body) + 1)

    def next_node(self) -> Node | None:
        """The next node in topological order; every edge into it has been added."""
        if not self._heap:
            return None
        key = heapq.heappop(self._heap)
        preds = self._pending.pop(key)
        layer, pc = key
        if key == self._overflow_key:
            kind, instr = OVERFLOW, None
        elif pc >= len(self.body):
            kind, instr = EXIT, None
        else:
            kind, instr = INSTR, self.body[pc]
        node = Node(len(self.nodes), key, kind, instr, preds, symbolic_jumps=self._symbolic.pop(key))
        for p in preds:
            node.ancestors |= self.nodes[p].ancestors | (1 << p)
        self.nodes.append(node)
        self.by_key[key] = node
        if kind == OVERFLOW:
            self.overflow = node
        return node

    def add_edge(self, source: Node, target_pc: int, symbolic: bool) -> Key:
        """Record an edge from `source` to instruction `target_pc`, taken on a condition that
        is `symbolic` (not a constant); returns the target's key."""
        layer, pc = source.key
        jumps = source.symbolic_jumps
        if target_pc > pc:
            key = (layer, target_pc)
        else:
            jumps += symbolic
            fits = jumps <= self.bound and layer < CONSTANT_JUMP_CAP
            key = (layer + 1, target_pc) if fits else self._overflow_key
        if key not in self._pending:
            self._pending[key] = []
            self._symbolic[key] = 0
            heapq.heappush(self._heap, key)
        self._symbolic[key] = max(self._symbolic[key], jumps)
        if source.index not in self._pending[key]:
            self._pending[key].append(source.index)
        return key

    def precedes(self, a: Node, b: Node) -> bool:
        """True when `a` comes before `b` on every path that contains both."""
        return bool(b.ancestors >> a.index & 1)


def has_loops(body: tuple[ir.Instr, ...]) -> bool:
    """Whether any jump or branch goes backward (the thread needs unrolling)."""
    return any(
        isinstance(instr, (ir.Jump, ir.Branch)) and instr.target <= pc
        for pc, instr in enumerate(body)
    )
