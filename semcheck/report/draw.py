"""Draw counterexample graphs with Graphviz: DOT text, SVG or PNG, chosen by file suffix.

Where the nodes go is `layout.py`'s decision (lanes as columns in device order, time as
rows); Graphviz's `nop2` layout keeps those positions and routes the edges around them.

File naming when one run has several counterexamples: see `graph_paths`.
"""

from __future__ import annotations

import html
import os
import re

import graphviz
import networkx as nx

from semcheck.report import graph as cex
from semcheck.report import layout
from semcheck.result import Result, Violation

SUFFIXES = (".dot", ".svg", ".png")
PNG_DPI = 110

FONT = "Helvetica"
RED = "#c62828"
BLUE = "#1f5fbf"
GREY = "#9e9e9e"
LANE_FILLS = ("#f3f6f9", "#e6edf4")
LANE_BORDER = "#cfd8dc"

_NODE_STYLE = {
    None: {"style": "rounded,filled", "fillcolor": "white", "color": GREY},
    "focus": {"style": "rounded,filled", "fillcolor": "white", "color": "#37474f", "penwidth": "1.6"},
    "fault": {"style": "rounded,filled,bold", "fillcolor": "#ffcdd2", "color": RED, "penwidth": "2.5",
              "fontcolor": "#7f0000"},
    "blocked": {"style": "rounded,filled,bold", "fillcolor": "#ffcdd2", "color": RED, "penwidth": "2.5",
                "fontcolor": "#7f0000"},
    "behind": {"style": "rounded,filled,dashed", "fillcolor": "#fff3f3", "color": RED, "penwidth": "1.5",
               "fontcolor": "#7f0000"},
}

_EDGE_STYLE = {
    cex.PROGRAM: {"color": GREY, "arrowsize": "0.5", "weight": "20"},
    cex.FEEDS: {"color": BLUE, "penwidth": "1.4", "arrowsize": "0.7"},
    cex.PARTIAL: {"color": RED, "style": "dashed", "penwidth": "1.4", "arrowsize": "0.7"},
    cex.COPY: {"color": "#7e57c2", "style": "dotted", "penwidth": "1.6", "arrowsize": "0.7"},
    cex.WAITS_FOR: {"color": RED, "penwidth": "2.8", "arrowsize": "1.1"},
    cex.UNORDERED: {"color": RED, "style": "dashed", "penwidth": "2.8", "arrowsize": "1.1", "dir": "both"},
    cex.REPEATS: {"color": RED, "penwidth": "2.8", "arrowsize": "1.1"},
    cex.WIPED: {"color": "#ef6c00", "style": "dashed", "penwidth": "2.0", "arrowhead": "tee", "arrowsize": "0.9"},
}

_LEGEND_EDGES = {
    cex.FEEDS: "blue: an addition and the wait that took it",
    cex.COPY: "purple dotted: a DMA from its start to its completion",
    cex.PARTIAL: "red dashed: added, but not enough",
    cex.WAITS_FOR: "red arrow: a blocked wait → the blocked wait it waits for",
    cex.UNORDERED: "red dashed, both ways: a copy in flight and an access to the same memory, unordered",
    cex.REPEATS: "red arrow back: the loop's last step, then the first again, for ever",
    cex.WIPED: "orange dashed, flat end: an addition a kernel entry reset before any wait took it (lost)",
}

# What red means, per kind: the first line of the legend.
_KIND_LEGENDS = {
    "deadlock": "red: the blocked waits of the cycle",
    "unsatisfied_wait": "red: the wait nothing can satisfy; dashed red: waits stuck behind it",
    "semaphore_leftover": "red: the semaphore not back to 0 at exit",
    "invalid_device_id": "red: the step that names a device outside the mesh",
    "invalid_core_index": "red: the step that names a core that does not exist",
    "invalid_semaphore_index": "red: the step that indexes outside its semaphore array",
    "data_race": "red: the access and the copy in flight it overlaps",
    "remote_before_entry": "red: the signal or copy that arrives outside the kernel",
    "barrier_phase_overrun": "red: the wait whose phase has already been overrun",
}


def legend(graph: nx.DiGraph) -> str:
    """One line naming only what this picture shows."""
    parts = [part for part in (_KIND_LEGENDS.get(graph.graph.get("kind", "")), "time runs down") if part]
    kinds = {data["kind"] for _, _, data in graph.edges(data=True)}
    parts += [text for kind, text in _LEGEND_EDGES.items() if kind in kinds]
    if any(d["kind"] == cex.COLLAPSED for _, d in graph.nodes(data=True)):
        parts.append("dashed grey: steps the violation does not depend on, folded")
    return "  ·  ".join(parts)


class DrawError(Exception):
    """The picture cannot be made (Graphviz missing, unknown suffix); says what to do."""


def to_dot(graph: nx.DiGraph, *, dpi: int | None = None) -> str:
    """DOT text with every node pinned where `layout.py` puts it (Graphviz only routes the
    edges), so `dot -Tsvg file.dot` draws the same picture semcheck does."""
    title_lines = [graph.graph.get("title", ""), graph.graph.get("subtitle", ""), legend(graph)]
    title_lines = [line for part in title_lines for line in part.split("\n") if line]
    geometry = layout.layout(graph, len(title_lines))
    attrs = {
        # nop2: take every node's position as given (in points) and only route the edges.
        "layout": "nop2", "splines": "true",
        "bgcolor": "white", "pad": "0.2", "fontname": FONT,
        "_background": _lane_backgrounds(geometry),
    }
    if dpi:
        attrs["dpi"] = str(dpi)
    dot = graphviz.Digraph(
        name=_identifier(graph.graph.get("kernel", "counterexample")),
        graph_attr=attrs,
        node_attr={"shape": "box", "fontname": FONT, "fontsize": "10", "margin": "0.08,0.04"},
        edge_attr={"fontname": FONT},
    )
    dot.node("title", label=_title_html(title_lines), shape="plaintext",
             pos=_pos(geometry.title_position))
    for number, (lane_label, x, y) in enumerate(geometry.headers):
        dot.node(f"h{number}", label=lane_label, shape="plaintext", fontsize="12",
                 fontname=f"{FONT} Bold", pos=_pos((x, y)))
    # Invisible corners, so the drawing's bounding box holds the lane backgrounds.
    bottom = min((lane[3] for lane in geometry.lanes), default=0.0)
    for name, corner in (("corner_top", (0.0, geometry.top)),
                         ("corner_bottom", (geometry.width, bottom))):
        dot.node(name, label="", shape="point", style="invis", width="0", pos=_pos(corner))
    for node, data in graph.nodes(data=True):
        tooltip = {"tooltip": data["tooltip"]} if data.get("tooltip") else {}
        dot.node(node, label=data["label"], pos=_pos(geometry.positions[node]),
                 width=f"{geometry.widths[node] / 72:.3f}", **tooltip, **_node_style(data))
    for a, b, data in graph.edges(data=True):
        dot.edge(a, b, **_EDGE_STYLE[data["kind"]])
    return dot.source


def _pos(point: tuple[float, float]) -> str:
    return f"{point[0]:.1f},{point[1]:.1f}"


def _lane_backgrounds(geometry: layout.Layout) -> str:
    """Filled rectangles behind the lanes, in Graphviz's xdot drawing language."""
    ops = []
    for number, (_label, left, right, bottom, top) in enumerate(geometry.lanes):
        fill = LANE_FILLS[number % 2]
        corners = f"{left:.1f} {bottom:.1f} {right:.1f} {bottom:.1f} {right:.1f} {top:.1f} {left:.1f} {top:.1f}"
        ops.append(f"c {len(LANE_BORDER)} -{LANE_BORDER} C {len(fill)} -{fill} P 4 {corners}")
    return " ".join(ops)


def _title_html(lines: list[str]) -> str:
    parts = [f"<b>{html.escape(lines[0])}</b>"] if lines else []
    parts += [html.escape(line) for line in lines[1:-1]]
    if len(lines) > 1:
        parts.append(f'<font point-size="10" color="#555555">{html.escape(lines[-1])}</font>')
    return "<" + "<br/>".join(parts) + ">"


def render(graph: nx.DiGraph, fmt: str) -> bytes:
    """The drawing as bytes in `fmt` (svg or png); needs Graphviz's `dot` program."""
    source = to_dot(graph, dpi=PNG_DPI if fmt == "png" else None)
    try:
        # quiet: dot's layout warnings ("some nodes with margin touch - falling back to
        # straight line edges") went to the user's terminal; the drawing is made all the same
        return graphviz.Source(source).pipe(format=fmt, quiet=True)
    except graphviz.ExecutableNotFound:
        raise DrawError(
            f"drawing {fmt.upper()} needs Graphviz's `dot` program: install Graphviz "
            "(e.g. `apt-get install graphviz`), or write a .dot file instead"
        ) from None


def write(graph: nx.DiGraph, path: str) -> None:
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in SUFFIXES:
        raise DrawError(f"--graph {path}: the file name must end in {', '.join(SUFFIXES)}")
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    if suffix == ".dot":
        with open(path, "w", encoding="utf-8") as f:
            f.write(to_dot(graph))
    else:
        data = render(graph, suffix[1:])
        with open(path, "wb") as f:
            f.write(data)


def graph_paths(requested: str, items: list[tuple[Result, Violation]]) -> list[str]:
    """Where each counterexample goes. One counterexample: exactly `requested`. Several:
    `<stem>-<file stem>-<kernel>-<N>d-<kind><suffix>` next to it (and `-2`, `-3`, ... should
    a check have two violations of one kind), so a run over many files and device counts
    keeps them all, and two files that define a kernel of one name stay apart."""
    if len(items) == 1:
        return [requested]
    stem, suffix = os.path.splitext(requested)
    paths, seen = [], set()
    for result, violation in items:
        source = _identifier(os.path.splitext(os.path.basename(result.file))[0]) if result.file else ""
        kernel = _identifier(result.kernel)
        names = [name for name in dict.fromkeys((source, kernel)) if name]  # a model names its kernel after its file
        cores = f"x{result.cores}" if result.cores > 1 else ""
        base = f"{stem}-{'-'.join(names)}-{result.devices}d{cores}-{violation.kind}"
        path, n = base + suffix, 1
        while path in seen:
            n += 1
            path = f"{base}-{n}{suffix}"
        seen.add(path)
        paths.append(path)
    return paths


def write_counterexamples(results: list[Result], requested: str) -> list[str]:
    """Draw every error-severity violation of `results`; returns the files written."""
    suffix = os.path.splitext(requested)[1].lower()
    if suffix not in SUFFIXES:
        raise DrawError(f"--graph {requested}: the file name must end in {', '.join(SUFFIXES)}")
    items = cex.graphs_for(results)
    paths = graph_paths(requested, items)
    for (result, violation), path in zip(items, paths):
        write(cex.counterexample_graph(result, violation), path)
    return paths


def _node_style(data: dict) -> dict:
    if data["kind"] == cex.COLLAPSED:
        return {"style": "rounded,dashed", "color": GREY, "fontcolor": "#616161"}
    return dict(_NODE_STYLE[data.get("highlight")])


def _identifier(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "_", text) or "kernel"
