"""Where each node of a counterexample graph goes: lanes as columns, time as rows.

Graphviz's `dot` would lay out the lanes as clusters, but it orders clusters to reduce edge
crossings, so device 3 may end up left of device 0; a reader scanning for "device 2" should
not have to search. So semcheck places every node itself and lets Graphviz route the edges
around them:

* columns: one per lane, in device (then core) order, as wide as its widest label;
* rows: a node's row is one below the lowest row of anything that must happen before it
  (the previous event in its lane, the signal or DMA completion that fed it, the start of
  the copy it completes), so the
  picture reads top to bottom as time and every causal edge points down;
* the stuck state (blocked waits, semaphores left at exit) shares the bottom row.

All sizes are in points (1/72 inch), y growing upwards as Graphviz has it.
"""

from __future__ import annotations

import math
from dataclasses import field

import networkx as nx

from semcheck.records import record
from semcheck.report import graph as cex

CHAR_WIDTH = 5.9  # a little more than Helvetica's average at 10 pt, so labels always fit
LINE_HEIGHT = 12.5
NODE_PAD_X, NODE_PAD_Y = 10.0, 7.0
MIN_LANE_WIDTH = 150.0
LANE_GAP = 46.0  # room between columns for edges to run down
ROW_GAP = 20.0
LANE_PAD = 10.0  # lane background beyond its nodes
HEADER_HEIGHT = 26.0
TITLE_LINE_HEIGHT = 17.0

_ORDERING_EDGES = (cex.PROGRAM, cex.FEEDS, cex.PARTIAL, cex.COPY)


@record
class Layout:
    positions: dict[str, tuple[float, float]] = field(default_factory=dict)  # node -> centre
    widths: dict[str, float] = field(default_factory=dict)  # node -> width
    lanes: list[tuple[str, float, float, float, float]] = field(default_factory=list)
    # (label, left, right, bottom, top) of each lane's background, in lane order
    headers: list[tuple[str, float, float]] = field(default_factory=list)  # (label, x, y)
    title_position: tuple[float, float] = (0.0, 0.0)
    top: float = 0.0  # above the title
    rows: dict[str, int] = field(default_factory=dict)  # node -> row, 0 at the top
    width: float = 0.0
    height: float = 0.0


def label_size(label: str) -> tuple[float, float]:
    lines = label.split("\n")
    return (
        max(len(line) for line in lines) * CHAR_WIDTH + 2 * NODE_PAD_X,
        len(lines) * LINE_HEIGHT + 2 * NODE_PAD_Y,
    )


def rows_of(graph: nx.DiGraph) -> dict[str, int]:
    """Row of every node: longest path along edges that go forward in time."""
    time = {n: _time(d) for n, d in graph.nodes(data=True)}
    order = sorted(graph.nodes, key=lambda n: (time[n], n))
    rows: dict[str, int] = {}
    stuck = []
    for node in order:
        if graph.nodes[node]["kind"] in (cex.BLOCKED, cex.AT_EXIT):
            stuck.append(node)
            continue
        before = [
            rows[u] + 1
            for u in graph.predecessors(node)
            if u in rows and time[u] < time[node] and graph.edges[u, node]["kind"] in _ORDERING_EDGES
        ]
        rows[node] = max(before, default=0)
    last = max(rows.values(), default=-1) + 1
    for node in stuck:
        rows[node] = last
    return rows


def layout(graph: nx.DiGraph, title_lines: int) -> Layout:
    result = Layout()
    rows = rows_of(graph)
    result.rows = rows
    sizes = {n: label_size(d["label"]) for n, d in graph.nodes(data=True)}
    lanes = graph.graph.get("lanes", [])

    row_count = max(rows.values(), default=-1) + 1
    row_heights = [0.0] * row_count
    for node, row in rows.items():
        row_heights[row] = max(row_heights[row], sizes[node][1])
    row_tops = []
    y = -HEADER_HEIGHT  # rows start below the lane headers; y = 0 is the top of the lanes
    for height in row_heights:
        y -= ROW_GAP / 2
        row_tops.append(y)
        y -= height + ROW_GAP / 2
    bottom = y - LANE_PAD

    x = 0.0
    for key, lane_label in lanes:
        members = [n for n, d in graph.nodes(data=True) if d.get("lane") == key]
        width = max([MIN_LANE_WIDTH, len(lane_label) * CHAR_WIDTH * 1.3] + [sizes[n][0] for n in members])
        left, centre = x, x + LANE_PAD + width / 2
        for node in members:
            row = rows[node]
            result.positions[node] = (centre, row_tops[row] - row_heights[row] / 2)
            result.widths[node] = width
        right = x + width + 2 * LANE_PAD
        result.lanes.append((lane_label, left, right, bottom, 0.0))
        result.headers.append((lane_label, centre, -HEADER_HEIGHT / 2))
        x = right + LANE_GAP
    result.width = max(x - LANE_GAP, 0.0)
    title_height = title_lines * TITLE_LINE_HEIGHT + 10
    result.title_position = (result.width / 2, title_height / 2 + 4)
    result.top = title_height + 12
    result.height = -bottom + title_height
    return result


def _time(data: dict) -> float:
    if data["kind"] == cex.STEP:
        return data["step"]
    if data["kind"] == cex.COLLAPSED:
        return data["steps"][0]
    return math.inf
