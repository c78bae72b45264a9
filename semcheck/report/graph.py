"""A counterexample as a graph (networkx): what `--graph` draws and what tests inspect.

One lane per thread (device, core[, sub-thread]); down each lane, the trace's events in
program order, each labelled with its step number and source line. A DMA completion sits in
the lane of the device whose semaphore it adds to. Edges:

* `program`: one event to the next in its lane;
* `copy`: a dma_start to each completion of that copy (`TraceStep.started_by`);
* `feeds`: a signal or DMA completion to the wait that consumed what it added
  (`TraceStep.fed_by`);
* `partial`: an addition that a still-blocked wait (or a semaphore left at exit) holds,
  but that was not enough;
* `waits_for`: for a deadlock, each blocked wait to the blocked wait it needs to move first
  (`Violation.cycle`);
* `unordered`: for a data race, the start of the copy still in flight to the access that
  overlaps it: nothing orders the two (no edge path of `program`/`feeds` runs from the
  copy's completion to the access, because the completion has not happened);
* `repeats`: for a loop that spins for ever, the trace's last step back to the first step
  of the turn that repeats (`Violation.loop_from`);
* `wiped`: an addition to a kernel entry that reset the semaphore before any wait took it
  (a signal that arrived before its peer entered: it is lost, not "not enough").

Blocked waits of the final, stuck state (`Violation.blocked`) end their lanes. Nodes carry
`kind` (lane, step, blocked, collapsed, at_exit), `lane`, `label`, `line` and `highlight`
(`blocked`, `behind`, `fault`, `focus` or None); drawing is `draw.py`'s job.

Only the lanes involved are drawn: those with a step in the violation's happens-before
past (`TraceStep.relevance`), a root blocked wait, or the semaphore left at exit. Every other
lane is folded into one last lane with one node that counts its steps and its waits stuck
behind the root. Within a lane, runs of steps outside the causal past (or, in long lanes,
steps that neither touch a semaphore the violation is about nor fault) fold into one
"n steps" node (edges are kept, attached to the fold). Steps that explain the verdict are
never folded.

Nodes carry `tooltip`: the step's source line, quoted.
"""

from __future__ import annotations

import linecache
import os
import textwrap

import networkx as nx

from semcheck.ir import Loc, core_unit, thread_name
from semcheck.kinds import LOWERING_KINDS
from semcheck.result import BlockedWait, Result, StepEvent, TraceStep, Violation

LANE, STEP, BLOCKED, COLLAPSED, AT_EXIT = "lane", "step", "blocked", "collapsed", "at_exit"
PROGRAM, FEEDS, PARTIAL, WAITS_FOR, COPY = "program", "feeds", "partial", "waits_for", "copy"
UNORDERED, REPEATS, WIPED = "unordered", "repeats", "wiped"
REST = (1 << 30, 0, 0)  # the lane key of the folded lane of every thread not involved

# A lane longer than this has its runs of uninteresting steps folded (at least MIN_RUN long).
FOLD_LANES_LONGER_THAN = 24
MIN_RUN = 3
LABEL_WIDTH = 40

LaneKey = tuple  # (device, core, sub)


def counterexample_graph(  # noqa: C901
    result: Result, violation: Violation, *, fold_above: int = FOLD_LANES_LONGER_THAN
) -> nx.DiGraph:
    graph = nx.DiGraph(
        kernel=result.kernel,
        devices=result.devices,
        kind=violation.kind,
        title=_title(result, violation),
        subtitle=_subtitle(violation),
    )
    focus = _focus_semaphores(violation)
    focus_steps = {s.index for s in violation.trace if s.semaphore in focus}
    # A copy that adds to a focus semaphore is started elsewhere: keep its start in view too.
    focus_steps |= {s.started_by for s in violation.trace if s.index in focus_steps and s.started_by}
    primary = _primary_blocked(violation)
    involved = _involved_lanes(violation, primary)
    lanes: dict[LaneKey, list[str]] = {}
    rest: list[TraceStep] = []

    for step in violation.trace:
        node = f"s{step.index}"
        lane = _lane(step)
        if lane not in involved:
            rest.append(step)
            continue
        highlight = "fault" if _is_fault(step, violation) else ("focus" if step.index in focus_steps else None)
        graph.add_node(
            node, kind=STEP, lane=lane, step=step.index, event=step.event, semaphore=step.semaphore,
            line=_line(step.location), highlight=highlight, relevant=step.relevance is not None,
            label=_step_label(step, result.file) + _marker(step, violation),
            tooltip=_tooltip(step.location),
        )
        lanes.setdefault(lane, []).append(node)

    behind = []
    for i, b in enumerate(violation.blocked):
        lane = (b.device, b.core or 0, b.sub)
        if lane not in involved:
            behind.append(b)
            continue
        node = f"b{i}"
        graph.add_node(
            node, kind=BLOCKED, lane=lane, semaphore=b.short,
            line=_line(b.location), highlight="blocked" if i in primary else "behind",
            label=_blocked_label(b, result.file), tooltip=_tooltip(b.location),
        )
        lanes.setdefault(lane, []).append(node)

    if violation.kind == "semaphore_leftover" and violation.semaphore:
        node = "x0"
        lane = (violation.device or 0, violation.core or 0, 0)
        graph.add_node(
            node, kind=AT_EXIT, lane=lane, semaphore=violation.semaphore, line=None,
            highlight="blocked", label=_at_exit_label(violation), tooltip=_tooltip(violation.location),
        )
        lanes.setdefault(lane, []).append(node)

    rest_lanes = sorted({_lane(s) for s in rest} | {(b.device, b.core or 0, b.sub) for b in behind})
    if rest_lanes:
        graph.add_node(
            "rest", kind=COLLAPSED, lane=REST, steps=[s.index for s in rest], line=None, highlight=None,
            label=_rest_label(rest, behind), tooltip="", relevant=False,
        )
        lanes[REST] = ["rest"]
    graph.graph["rest_lanes"] = rest_lanes

    folded = _fold(graph, lanes, fold_above)
    folded.update({f"s{s.index}": "rest" for s in rest})
    lane_order = sorted(lanes)
    unit = core_unit(result.backend)
    graph.graph["lanes"] = [
        (key, _rest_lane_label(rest_lanes, result.cores, unit) if key == REST else _lane_label(key, result.cores, unit))
        for key in lane_order
    ]
    for key in lane_order:
        for position, node in enumerate(lanes[key]):
            graph.nodes[node]["order"] = position
        for earlier, later in zip(lanes[key], lanes[key][1:]):
            graph.add_edge(earlier, later, kind=PROGRAM)

    def at(index: int) -> str | None:
        """The node step `index` is drawn in; None when it is outside the causal past (an
        edge to or from it would explain nothing)."""
        node = folded.get(f"s{index}", f"s{index}")
        return node if node in graph and graph.nodes[node].get("relevant", True) else None

    for step in violation.trace:
        for source in step.fed_by:
            _add_cross_edge(graph, at(source), at(step.index), FEEDS)
        if step.started_by is not None:
            _add_cross_edge(graph, at(step.started_by), at(step.index), COPY)
        for source in step.wiped_additions:
            _add_cross_edge(graph, at(source), at(step.index), WIPED)
    for i, b in enumerate(violation.blocked):
        for source in _pending_additions(violation.trace, b.short):
            _add_cross_edge(graph, at(source), f"b{i}", PARTIAL)
    if "x0" in graph:
        for source in _pending_additions(violation.trace, violation.semaphore):
            _add_cross_edge(graph, at(source), "x0", PARTIAL)
    cycle = violation.cycle
    for waiter, needed in zip(cycle, cycle[1:] + cycle[:1]):
        graph.add_edge(f"b{waiter}", f"b{needed}", kind=WAITS_FOR)
    racing_copy = _racing_copy_start(violation)
    if racing_copy is not None and violation.trace:
        _add_edge(graph, at(racing_copy), at(violation.trace[-1].index), UNORDERED)
    if violation.loop_from is not None and violation.trace:
        _add_edge(graph, at(violation.trace[-1].index), at(violation.loop_from), REPEATS)
    return graph


def _lane(step: TraceStep) -> LaneKey:
    return (step.device or 0, step.core or 0, step.sub)


def _involved_lanes(violation: Violation, primary: set[int]) -> set[LaneKey]:
    """Lanes with a step in the causal past, a root blocked wait, or the leftover; and the
    lanes of the copies in flight that a race is with."""
    lanes = {_lane(s) for s in violation.trace if s.relevance is not None}
    lanes |= {(b.device, b.core or 0, b.sub) for i, b in enumerate(violation.blocked) if i in primary}
    if violation.kind == "semaphore_leftover":
        lanes.add((violation.device or 0, violation.core or 0, 0))
    if not lanes:  # nothing says what matters: show everything
        lanes = {_lane(s) for s in violation.trace} | {(b.device, b.core or 0, b.sub) for b in violation.blocked}
    return lanes


def _rest_label(rest: list[TraceStep], behind: list[BlockedWait]) -> str:
    lines = [f"... {len(rest)} step{'s' if len(rest) != 1 else ''} the violation does not depend on"]
    if behind:
        lines.append(f"{len(behind)} wait{'s' if len(behind) != 1 else ''} stuck behind it "
                     f"({_lines_text(sorted({b.location.line for b in behind if b.location}))})")
    return "\n".join(lines)


def _rest_lane_label(keys: list[LaneKey], cores: int, unit: str) -> str:
    devices = sorted({key[0] for key in keys})
    if len(devices) == len(keys):
        return f"other devices ({_ranges(devices)})"
    return f"{len(keys)} other threads"


def _ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    parts, start = [], None
    for i, n in enumerate(numbers):
        if start is None:
            start = n
        if i + 1 == len(numbers) or numbers[i + 1] != n + 1:
            parts.append(str(n) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)


def _tooltip(loc: Loc | None) -> str:
    """The source line a node stands for, quoted: what an SVG shows on hover."""
    if loc is None:
        return ""
    source = linecache.getline(loc.file, loc.line).strip()
    text = f"{os.path.basename(loc.file)}:{loc.line}: {source}" if source else f"{os.path.basename(loc.file)}:{loc.line}"
    for frame in loc.chain:  # a line in a helper: the calls from the kernel body, each quoted
        call = linecache.getline(frame.file, frame.line).strip()
        text += f"\n  called from {os.path.basename(frame.file)}:{frame.line}: {call}" if call else \
            f"\n  called from {os.path.basename(frame.file)}:{frame.line}"
    return text


def graphs_for(results: list[Result]) -> list[tuple[Result, Violation]]:
    """The counterexamples worth drawing: every error-severity violation of every result but
    the lowering's own findings, which no schedule shows (`kinds.LOWERING_KINDS`)."""
    lowering = {k.value for k in LOWERING_KINDS}
    return [(r, v) for r in results for v in r.errors if v.kind not in lowering]


# --- what matters ------------------------------------------------------------------------------


def _focus_semaphores(violation: Violation) -> set[str]:
    focus = {b.short for b in violation.blocked}
    if violation.semaphore:
        focus.add(violation.semaphore)
    if violation.kind == "data_race" and violation.trace:
        # The last wait before the racing access let it through: whatever added to that
        # semaphore (often another copy than the one in flight) explains the race.
        last = violation.trace[-1]
        lane = (last.device, last.core, last.sub)
        waits = [s for s in violation.trace[:-1] if (s.device, s.core, s.sub) == lane
                 and s.event in ("wait", "dma_wait") and s.semaphore]
        if waits and (semaphore := waits[-1].semaphore):
            focus.add(semaphore)
    return focus


def _primary_blocked(violation: Violation) -> set[int]:
    """The blocked waits the violation is about: the cycle of a deadlock, the root waits of
    an unsatisfied wait (those at the violation's line); others are stuck behind them."""
    if violation.cycle:
        return set(violation.cycle)
    return {
        i for i, b in enumerate(violation.blocked)
        if violation.location is None or b.location == violation.location
    }


def _is_fault(step: TraceStep, violation: Violation) -> bool:
    """The steps the violation is about: a fault; the access that races and the start of
    the copy it races with; a signal or copy that arrives outside the kernel."""
    if step.fault is not None or step.index == violation.loop_from:
        return True
    if step is violation.trace[-1] and (
        violation.kind.startswith("invalid_")
        or violation.kind in ("data_race", "remote_before_entry", "barrier_phase_overrun")
    ):
        return True
    return step.index == _racing_copy_start(violation)


def _marker(step: TraceStep, violation: Violation) -> str:
    """A last line naming the part a step plays in a race or an early arrival."""
    last = violation.trace[-1] if violation.trace else None
    if violation.kind == "data_race":
        if step is last:
            return "\nRACE: touches memory a copy is still writing or reading"
        if step.index == _racing_copy_start(violation):
            return "\nCOPY STILL IN FLIGHT"
    if violation.kind == "remote_before_entry" and step is last:
        return "\nARRIVES OUTSIDE THE KERNEL"
    if violation.kind == "barrier_phase_overrun" and step is last:
        return "\nPHASE OVERRUN: the barrier is already a phase further"
    if violation.loop_from is not None and step.index == violation.loop_from:
        return "\nSPINS FOR EVER: from here the steps repeat"
    return ""


def _racing_copy_start(violation: Violation) -> int | None:
    """The step that started the copy a data race is with: as the engine recorded it, or
    else the latest start at the other line of the race whose completions have not all
    happened by the end of the trace."""
    if violation.kind != "data_race" or not violation.related:
        return None
    if violation.racing_step is not None:
        return violation.racing_step
    other = violation.related[0]
    done: dict[int, int] = {}
    for step in violation.trace:
        if step.started_by is not None:
            done[step.started_by] = done.get(step.started_by, 0) + 1
    starts = [
        s for s in violation.trace[:-1]
        if s.event == "dma_start" and s.location == other
        and done.get(s.index, 0) < len(s.completions)
    ]
    return starts[-1].index if starts else None


def _pending_additions(trace: list[TraceStep], semaphore: str | None) -> list[int]:
    """Steps whose additions to `semaphore` are still in it at the end of the trace."""
    pending: list[int] = []
    if semaphore is None:
        return pending
    for step in trace:
        if semaphore in step.wiped:
            pending = []  # a kernel entry reset it: those additions are lost, not pending
            continue
        if step.semaphore != semaphore or step.before is None or step.after is None:
            continue
        if step.after > step.before:
            pending.append(step.index)
        elif step.after < step.before:
            pending = []  # a decrement consumes what was there (fed_by records who it was)
    return pending


def _add_edge(graph: nx.DiGraph, source: str | None, target: str | None, kind: str) -> None:
    if source is not None and target is not None:
        graph.add_edge(source, target, kind=kind)


def _add_cross_edge(graph: nx.DiGraph, source: str | None, target: str | None, kind: str) -> None:
    if source is None or target is None or source == target or source not in graph or target not in graph:
        return
    if not graph.has_edge(source, target) or graph.edges[source, target]["kind"] == PROGRAM:
        graph.add_edge(source, target, kind=kind)


# --- folding long lanes ----------------------------------------------------------------------


def _fold(graph: nx.DiGraph, lanes: dict[LaneKey, list[str]], fold_above: int) -> dict[str, str]:
    """Fold every run of steps outside the causal past, and in long lanes runs (of at least
    MIN_RUN, not the lane's last step) of steps that do not touch what the violation is
    about; returns {step node: fold node}."""
    folded: dict[str, str] = {}
    for key, nodes in lanes.items():
        if key == REST:
            continue
        long_lane = len(nodes) > fold_above
        new_nodes: list[str] = []
        run: list[str] = []
        last_step = max((n for n in nodes if graph.nodes[n]["kind"] == STEP), default=None,
                        key=lambda n: graph.nodes[n]["step"])
        for n in nodes:
            data = graph.nodes[n]
            is_step = data["kind"] == STEP and data["highlight"] != "fault"
            if is_step and not data["relevant"]:
                if run and graph.nodes[run[-1]]["relevant"]:
                    # a run is all relevant or all not: the two fold differently
                    _flush(graph, key, run, new_nodes, folded)
                run.append(n)
            elif is_step and long_lane and data["highlight"] is None and n != last_step:
                if run and not graph.nodes[run[-1]]["relevant"]:
                    _flush(graph, key, run, new_nodes, folded)
                run.append(n)
            else:
                _flush(graph, key, run, new_nodes, folded)
                new_nodes.append(n)
        _flush(graph, key, run, new_nodes, folded)
        lanes[key] = new_nodes
    return folded


def _flush(graph: nx.DiGraph, key: LaneKey, run: list[str], new_nodes: list[str], folded: dict[str, str]) -> None:
    """End a run of `_fold`: a fold node in place of its steps (in `new_nodes`), or the steps
    themselves when they are relevant and too few to fold; `run` is emptied."""
    relevant = any(graph.nodes[n]["relevant"] for n in run)
    if not run or (relevant and len(run) < MIN_RUN):
        new_nodes.extend(run)
    else:
        fold = f"f{run[0][1:]}"
        steps = [graph.nodes[n]["step"] for n in run]
        lines = sorted({graph.nodes[n]["line"] for n in run if graph.nodes[n]["line"]})
        count = f"{len(run)} step{'s' if len(run) != 1 else ''}"
        span = f"#{steps[0]}-#{steps[-1]}" if len(steps) > 1 else f"#{steps[0]}"
        graph.add_node(
            fold, kind=COLLAPSED, lane=key, steps=steps, line=None, highlight=None, relevant=relevant,
            label=f"... {count} ({span})\n{_lines_text(lines)}", tooltip="",
        )
        for n in run:
            folded[n] = fold
            graph.remove_node(n)
        new_nodes.append(fold)
    run.clear()


def _lines_text(lines: list[int]) -> str:
    if not lines:
        return ""
    if len(lines) == 1:
        return f"line {lines[0]}"
    if len(lines) <= 3:
        return "lines " + ", ".join(map(str, lines))
    return f"lines {lines[0]}-{lines[-1]}"


# --- labels ---------------------------------------------------------------------------------------


def _title(result: Result, violation: Violation) -> str:
    devices = f"{result.devices} device{'s' if result.devices != 1 else ''}"
    return f"{result.kernel}, {devices}: {violation.kind}"


def _subtitle(violation: Violation) -> str:
    if violation.cycle:
        names = [violation.blocked[i].name for i in violation.cycle]
        return "wait-for cycle (red): " + " -> ".join(names + names[:1]) + _missing_text(violation)
    if violation.loop_from is not None and violation.trace:
        first = violation.trace[violation.loop_from - 1]
        return (f"{first.actor} loops for ever from step {first.index} (red): no schedule lets it "
                "leave, and nothing left changes what it reads")
    if violation.kind == "unsatisfied_wait":
        roots = [violation.blocked[i].name for i in sorted(_primary_blocked(violation))]
        return (f"blocked for good (red): {', '.join(roots)}; nothing left can add to what they wait for"
                + _missing_text(violation))
    if violation.kind == "semaphore_leftover":
        return f"{violation.semaphore} is not back to 0 when the kernel exits (red)"
    if violation.kind.startswith("invalid_") and violation.trace:
        last = violation.trace[-1]
        return f"{last.actor} faults at line {_line(last.location)} (red)"
    if violation.kind == "data_race" and violation.trace:
        last = violation.trace[-1]
        other = f" and the copy started at line {violation.related[0].line}" if violation.related else ""
        return (f"{last.actor} at line {_line(last.location)}{other} touch the same memory (red), "
                "and nothing orders them: the copy is still in flight")
    if violation.kind == "remote_before_entry" and violation.trace:
        last = violation.trace[-1]
        return f"step {last.index} reaches a core that is not inside this invocation of the kernel (red)"
    if violation.kind == "barrier_phase_overrun" and violation.trace:
        last = violation.trace[-1]
        return (f"{last.actor} waits at line {_line(last.location)} for a barrier phase after the "
                "next phase has completed too (red)")
    return ""


def _missing_text(violation: Violation) -> str:
    """The missing action in a few words, for the picture's subtitle."""
    for m in violation.missing:
        for a in m.absent:
            return f"\n{', '.join(a.missing_on[:3])} {'has' if len(a.missing_on) == 1 else 'have'} no {a.what} at line {a.location.line}"
        for site in m.sites:
            if not site.ran and site.adds:
                line = site.location.line if site.location else "?"
                return f"\n{site.thread}'s {site.what} at line {line} never runs"
    return ""


def _lane_label(key: LaneKey, cores: int, unit: str) -> str:
    device, core, sub = key
    return thread_name(device, core, sub, max(cores, 1), unit)


def _where(loc: Loc | None, kernel_file: str) -> str:
    """"line 12", or "helpers.py:12"; a line in a helper adds the kernel's line that called
    it ("line 12 (from 40)")."""
    if loc is None:
        return ""
    where = _at(loc.file, loc.line, kernel_file)
    if loc.chain:
        outer = loc.chain[-1]  # the kernel body's own line
        where += f" (from {outer.line if outer.file == loc.file else _at(outer.file, outer.line, kernel_file)})"
    return where


def _at(file: str, line: int, kernel_file: str) -> str:
    if kernel_file and os.path.abspath(file) == os.path.abspath(kernel_file):
        return f"line {line}"
    return f"{os.path.basename(file)}:{line}"


def _line(loc: Loc | None) -> int | None:
    return loc.line if loc is not None else None


def _step_label(step: TraceStep, kernel_file: str) -> str:
    """Two or three short lines: `12. what happened`, then the count's change and the line."""
    what, change = _short_text(step)
    lines = [line for part in f"{step.index}. {what}".split("\n") for line in textwrap.wrap(part, LABEL_WIDTH)]
    where = _where(step.location, kernel_file)
    lines.append("  ·  ".join(part for part in (change, where) if part))
    return "\n".join(lines)


def _short_text(step: TraceStep) -> tuple[str, str]:
    """(what happened, how the semaphore count changed) in a few words."""
    sem, before, after = _sem(step), step.before, step.after
    change = f"{before} → {after}" if before is not None and after is not None else ""
    if step.fault is not None:
        return f"FAULT in {step.event.value}: {step.fault}", ""
    rule = _SHORT_TEXT.get(step.event)
    if rule is None or (step.event is not StepEvent.DMA_START and (sem is None or before is None or after is None)):
        return _plain_text(step), ""
    return rule(step, change)


def _plain_text(step: TraceStep) -> str:
    if step.wiped:
        return f"{step.event.value}: resets {', '.join(step.wiped)}"
    if step.src is not None:
        return f"{step.event.value} {step.src}"
    return step.text


def _added(step: TraceStep) -> int:
    assert step.before is not None and step.after is not None, "_short_text keeps steps without counts"
    return step.after - step.before


def _sem(step: TraceStep) -> str | None:
    """The step's semaphore as its text names it."""
    return step.semaphore_shown_as or step.semaphore


def _short_signal(step: TraceStep, change: str) -> tuple[str, str]:
    return f"signal {_sem(step)} +{_added(step)}", change


def _short_wait(step: TraceStep, change: str) -> tuple[str, str]:
    need = f" ≥ {step.need}" if step.need is not None else ""
    if not step.decrement:
        return f"wait {_sem(step)}{need} (no decrement)", f"holds {step.before}"
    return f"wait {_sem(step)}{need}", change


def _short_dma_wait(step: TraceStep, change: str) -> tuple[str, str]:
    return f"dma_wait ({step.side}) {_sem(step)} {-_added(step)} B", change


def _short_recv_done(step: TraceStep, change: str) -> tuple[str, str]:
    origin = step.actor.removeprefix("DMA from ")
    return f"DMA from {origin} lands:\n{_sem(step)} +{_added(step)}", change


def _short_send_done(step: TraceStep, change: str) -> tuple[str, str]:
    return f"DMA sent: {_sem(step)} +{_added(step)}", change


def _short_dma_start(step: TraceStep, change: str) -> tuple[str, str]:
    if step.src is None or step.dst is None:
        target = f" to device {step.target_device}" if step.target_device is not None else ""
        return f"start DMA{target}", ""
    return f"start DMA {step.src}\n→ {step.dst}", ""  # a remote destination names its device


_SHORT_TEXT = {
    StepEvent.SIGNAL: _short_signal,
    StepEvent.WAIT: _short_wait,
    StepEvent.DMA_WAIT: _short_dma_wait,
    StepEvent.DMA_RECV_DONE: _short_recv_done,
    StepEvent.DMA_SEND_DONE: _short_send_done,
    StepEvent.DMA_START: _short_dma_start,
}


def _blocked_label(b: BlockedWait, kernel_file: str) -> str:
    what = "wait" if b.what.startswith("semaphore_wait") else b.what.replace(" side)", ")")
    lines = textwrap.wrap(f"BLOCKED: {what} {b.shown or b.short}", LABEL_WIDTH)
    lines.append(f"needs {b.needs}, has {b.has}  ·  {_where(b.location, kernel_file)}")
    return "\n".join(lines)


def _at_exit_label(violation: Violation) -> str:
    count, said = 0, violation.semaphore
    for step in violation.trace:
        if step.semaphore == violation.semaphore:
            said = step.semaphore_shown_as or said  # a counter the lowering made, as its steps say it
            if step.after is not None:
                count = step.after
    return f"AT EXIT: {said} = {count}\nmust be 0 (TPU)"
