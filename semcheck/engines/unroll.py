"""Unroll one thread's control-flow graph into a DAG of instruction occurrences.

A node is `(pc, layer)`: instruction `pc` reached after `layer` backward jumps. Forward
edges (to a higher pc) stay in their layer and backward edges (a loop's back edge) go to the
next one, so the graph is acyclic and `(layer, pc)` is a topological order. A backward edge
out of the last layer leads to the thread's OVERFLOW node: reaching it means the unrolling
bound was too small for that path, and an engine that sees it must not call the protocol safe.

Straight-line code is a single chain in layer 0, whatever the bound. No solver here: the
SMT encoding (`smt_encoding.py`) attaches variables to these nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from semcheck import ir

INSTR, EXIT, OVERFLOW = "instr", "exit", "overflow"

# Why an edge is taken: always, when a branch condition is non-zero, when it is zero.
ALWAYS, IF_TRUE, IF_FALSE = "always", "if_true", "if_false"


@dataclass
class Node:
    index: int  # position in the thread's topological order
    pc: int  # instruction index; len(body) for the exit; -1 for the overflow node
    layer: int
    kind: str  # INSTR, EXIT or OVERFLOW
    instr: ir.Instr | None
    preds: list[tuple[int, str]] = field(default_factory=list)  # (node index, edge condition)
    succs: list[tuple[int, str]] = field(default_factory=list)
    ancestors: int = 0  # bitmask of node indices that precede this one on some path


@dataclass
class Unrolled:
    nodes: list[Node]
    overflow: Node | None  # None when no path reaches the bound

    @property
    def entry(self) -> Node:
        return self.nodes[0]

    def precedes(self, a: Node, b: Node) -> bool:
        """True when `a` comes before `b` on every path that contains both."""
        return bool(b.ancestors >> a.index & 1)


def unroll(body: tuple[ir.Instr, ...], bound: int) -> Unrolled:
    """The DAG of `body` with at most `bound` backward jumps on any path."""
    n = len(body)
    keys: dict[tuple[int, int], int] = {}
    raw: list[tuple[int, int]] = []
    edges: list[tuple[tuple[int, int], tuple[int, int], str]] = []
    overflow_key = (-1, bound + 1)

    def visit(key):
        if key not in keys:
            keys[key] = len(raw)
            raw.append(key)

    visit((0, 0))
    i = 0
    while i < len(raw):
        pc, layer = raw[i]
        i += 1
        if pc < 0 or pc >= n:
            continue
        for target, condition in _targets(pc, body[pc]):
            if target > pc:
                dest = (target, layer)
            elif layer < bound:
                dest = (target, layer + 1)
            else:
                dest = overflow_key
            visit(dest)
            edges.append(((pc, layer), dest, condition))

    def order(key):
        pc, layer = key
        return (layer, pc if pc >= 0 else n + 1)

    ordered = sorted(raw, key=order)
    index = {key: i for i, key in enumerate(ordered)}
    nodes = []
    for i, (pc, layer) in enumerate(ordered):
        if pc < 0:
            nodes.append(Node(i, -1, layer, OVERFLOW, None))
        elif pc >= n:
            nodes.append(Node(i, pc, layer, EXIT, None))
        else:
            nodes.append(Node(i, pc, layer, INSTR, body[pc]))
    for src, dst, condition in edges:
        a, b = nodes[index[src]], nodes[index[dst]]
        a.succs.append((b.index, condition))
        b.preds.append((a.index, condition))
    for node in nodes:  # topological order: every predecessor is already done
        for p, _ in node.preds:
            node.ancestors |= nodes[p].ancestors | (1 << p)
    overflow = next((nd for nd in nodes if nd.kind == OVERFLOW), None)
    return Unrolled(nodes, overflow)


def _targets(pc: int, instr: ir.Instr) -> list[tuple[int, str]]:
    if isinstance(instr, ir.Jump):
        return [(instr.target, ALWAYS)]
    if isinstance(instr, ir.Branch):
        return [(instr.target, IF_TRUE), (pc + 1, IF_FALSE)]
    return [(pc + 1, ALWAYS)]


def has_loops(body: tuple[ir.Instr, ...]) -> bool:
    """Whether any jump or branch goes backward (the thread needs unrolling)."""
    return any(
        isinstance(instr, (ir.Jump, ir.Branch)) and instr.target <= pc
        for pc, instr in enumerate(body)
    )
