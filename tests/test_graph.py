"""`--graph`: the counterexample graph's content (lanes, events, feeds, blocked waits, the
wait-for cycle), its layout, and the files drawn from it."""

import os

import graphviz
import networkx as nx
import pytest

from semcheck import cli
from semcheck.api import verify_path
from semcheck.report import draw, layout
from semcheck.report import graph as cex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")

# Every model with an error-severity bug, and the kind it has.
BUGGY = {
    "circular_wait": "deadlock",
    "ring_recv_before_send": "deadlock",
    "ring_allgather_missing_signal": "unsatisfied_wait",
    "dma_wait_mismatch": "unsatisfied_wait",
    "nondec_poll_leak": "semaphore_leftover",
    "remote_out_of_range": "invalid_device_id",
    "ring_allgather_shared_recv": "data_race",
    "moe_dispatch_capacity": "unsatisfied_wait",
    "poll_flag_never_set": "unsatisfied_wait",
}


def check(name, devices=4):
    [result] = verify_path(os.path.join(MODELS, name + ".py"), [devices])
    [violation] = result.errors
    return result, violation


def graph_of(name, devices=4, **options):
    result, violation = check(name, devices)
    return cex.counterexample_graph(result, violation, **options), violation


def nodes(graph, kind):
    return [n for n, d in graph.nodes(data=True) if d["kind"] == kind]


def edges(graph, kind):
    return [(a, b) for a, b, d in graph.edges(data=True) if d["kind"] == kind]


def lane_devices(graph):
    return [key[0] for key, _label in graph.graph["lanes"]]


def test_every_shipped_buggy_model_is_covered():
    from semcheck.run.expectations import declared_in_file

    declared = {
        name[:-3]
        for name in os.listdir(MODELS)
        if name.endswith(".py") and any(d.outcomes for d in declared_in_file(os.path.join(MODELS, name)))
    }
    assert declared == set(BUGGY)


@pytest.mark.parametrize("name", sorted(BUGGY))
def test_lanes_program_order_and_source_lines(name):
    graph, violation = graph_of(name)
    assert graph.graph["kind"] == BUGGY[name]
    # Only the lanes involved (a step in the causal past, a root wait, the leftover) are drawn.
    primary = cex._primary_blocked(violation)
    involved = {s.device for s in violation.trace if s.relevance is not None}
    involved |= {b.device for i, b in enumerate(violation.blocked) if i in primary}
    if violation.kind == "semaphore_leftover":
        involved.add(violation.device)
    others = ({s.device for s in violation.trace} | {b.device for b in violation.blocked}) - involved
    assert lane_devices(graph) == sorted(involved) + ([cex.REST[0]] if others else [])
    assert [label for _key, label in graph.graph["lanes"]][:len(involved)] == [f"device {d}" for d in sorted(involved)]
    for step in violation.trace:  # at 4 devices every step of the causal past is a node
        if step.relevance is None:
            assert f"s{step.index}" not in graph
            continue
        data = graph.nodes[f"s{step.index}"]
        assert data["lane"][0] == step.device
        assert data["line"] == step.location.line
        assert f"line {step.location.line}" in data["label"]
        assert data["label"].startswith(f"{step.index}. ")
    for a, b in edges(graph, cex.PROGRAM):  # program edges stay in their lane and go forward
        assert graph.nodes[a]["lane"] == graph.nodes[b]["lane"]
        assert graph.nodes[a]["order"] + 1 == graph.nodes[b]["order"]


@pytest.mark.parametrize("name", sorted(BUGGY))
def test_blocked_waits_end_their_lanes(name):
    graph, violation = graph_of(name)
    blocked = nodes(graph, cex.BLOCKED)
    drawn = [i for i, b in enumerate(violation.blocked) if (b.device, b.core, b.sub) in {
        graph.nodes[n]["lane"] for n in graph if graph.nodes[n]["kind"] != cex.COLLAPSED}]
    assert len(blocked) == len(drawn) and set(cex._primary_blocked(violation)) <= set(drawn)
    for i in drawn:
        b = violation.blocked[i]
        data = graph.nodes[f"b{i}"]
        assert data["lane"][0] == b.device
        assert data["highlight"] in ("blocked", "behind")
        assert f"needs {b.needs}, has {b.has}" in data["label"]
        assert f"line {b.location.line}" in data["label"]
        lane_orders = [graph.nodes[n]["order"] for n in graph if graph.nodes[n].get("lane") == data["lane"]]
        assert data["order"] == max(lane_orders)  # the last thing in its lane
        assert not [n for n in graph.successors(f"b{i}") if graph.edges[f"b{i}", n]["kind"] == cex.PROGRAM]


@pytest.mark.parametrize("name", ["circular_wait", "ring_recv_before_send"])
def test_deadlock_cycle_edges_follow_the_wait_for_cycle(name):
    graph, violation = graph_of(name)
    cycle_edges = edges(graph, cex.WAITS_FOR)
    expected = [(f"b{a}", f"b{b}") for a, b in zip(violation.cycle, violation.cycle[1:] + violation.cycle[:1])]
    assert sorted(cycle_edges) == sorted(expected)
    assert len(cycle_edges) == 4  # all four devices of the ring
    assert nx.is_strongly_connected(nx.DiGraph(cycle_edges))
    assert all(graph.nodes[n]["highlight"] == "blocked" for n in nodes(graph, cex.BLOCKED))
    assert "wait-for cycle" in graph.graph["subtitle"]


def test_ring_deadlock_shows_the_handshake_feeding_the_barrier_waits():
    graph, violation = graph_of("ring_recv_before_send")
    waits = [n for n in nodes(graph, cex.STEP) if graph.nodes[n]["event"] == "wait"]
    assert len(waits) == 4
    for wait in waits:
        device = graph.nodes[wait]["lane"][0]
        feeders = [a for a, b in edges(graph, cex.FEEDS) if b == wait]
        assert sorted(graph.nodes[a]["lane"][0] for a in feeders) == sorted({(device - 1) % 4, (device + 1) % 4})
        assert all(graph.nodes[a]["event"] == "signal" for a in feeders)
        assert {graph.nodes[a]["semaphore"] for a in feeders} == {f"barrier@d{device}"}


def test_unsatisfied_wait_marks_the_root_and_what_is_stuck_behind_it():
    graph, violation = graph_of("ring_allgather_missing_signal")
    by_device = {graph.nodes[n]["lane"][0]: n for n in nodes(graph, cex.BLOCKED)}
    assert graph.nodes[by_device[3]]["highlight"] == "blocked"  # nobody signals its barrier again
    assert "barrier@d3" in graph.nodes[by_device[3]]["label"]
    # Device 2 is drawn (its signal fed device 3's barrier); its own wait is stuck behind.
    assert sorted(by_device) == [2, 3] and graph.nodes[by_device[2]]["highlight"] == "behind"
    # Devices 0 and 1 take no part: one folded lane counts their steps and stuck waits.
    assert lane_devices(graph) == [2, 3, cex.REST[0]]
    assert graph.graph["lanes"][-1][1] == "other devices (0-1)"
    assert "2 waits stuck behind it (line 36)" in graph.nodes["rest"]["label"]
    assert "device 0 has no semaphore_signal at line 28" in graph.graph["subtitle"]
    # The one barrier signal device 3 did get is drawn into its blocked wait.
    [(source, _)] = [(a, b) for a, b in edges(graph, cex.PARTIAL) if b == by_device[3]]
    assert graph.nodes[source]["event"] == "signal" and graph.nodes[source]["semaphore"] == "barrier@d3"
    assert graph.nodes[source]["lane"][0] == 2
    assert not edges(graph, cex.WAITS_FOR)


def test_leftover_semaphore_is_shown_at_exit_with_its_unconsumed_additions():
    graph, violation = graph_of("nondec_poll_leak")
    [at_exit] = nodes(graph, cex.AT_EXIT)
    assert "counter@d0 = 3" in graph.nodes[at_exit]["label"]
    assert graph.nodes[at_exit]["lane"][0] == 0
    sources = sorted(graph.nodes[a]["lane"][0] for a, b in edges(graph, cex.PARTIAL) if b == at_exit)
    assert sources == [1, 2, 3]


def test_the_faulting_step_is_red():
    graph, violation = graph_of("remote_out_of_range")
    faults = [n for n in nodes(graph, cex.STEP) if graph.nodes[n]["highlight"] == "fault"]
    assert faults == [f"s{violation.trace[-1].index}"]
    assert graph.nodes[faults[0]]["lane"][0] == 3


def test_long_lanes_fold_only_steps_that_do_not_matter():
    graph, violation = graph_of("ring_allgather_missing_signal", devices=4, fold_above=4)
    folds = nodes(graph, cex.COLLAPSED)
    assert folds, "a lane longer than 4 events should fold its uninteresting runs"
    folded_steps = {s for n in folds for s in graph.nodes[n]["steps"]}
    shown_steps = {graph.nodes[n]["step"] for n in nodes(graph, cex.STEP)}
    assert folded_steps | shown_steps == {s.index for s in violation.trace}  # nothing dropped
    focus = {b.short for b in violation.blocked}
    for step in violation.trace:
        if step.semaphore in focus:
            assert step.index in shown_steps
    for n in folds:
        assert len(graph.nodes[n]["steps"]) >= cex.MIN_RUN


def test_eight_devices_fold_runs_and_keep_every_focus_step():
    graph, violation = graph_of("ring_allgather_missing_signal", devices=8)
    assert lane_devices(graph) == [6, 7, cex.REST[0]]  # the lanes involved, and the rest folded
    assert nodes(graph, cex.COLLAPSED)
    shown = {graph.nodes[n]["step"] for n in nodes(graph, cex.STEP)}
    # the causal slice's four steps (their numbers follow the reduced search's path)
    assert shown == {s.index for s in violation.trace if s.relevance is not None} == {20, 23, 24, 27}
    longest = max(sum(1 for n in graph if graph.nodes[n]["lane"] == key) for key, _ in graph.graph["lanes"])
    assert longest <= cex.FOLD_LANES_LONGER_THAN + 2


def test_layout_keeps_lanes_in_device_order_and_time_flowing_down():
    graph, _ = graph_of("ring_recv_before_send", devices=8)
    geometry = layout.layout(graph, title_lines=3)
    xs = [geometry.positions[next(n for n in graph if graph.nodes[n]["lane"] == key)][0]
          for key, _ in graph.graph["lanes"]]
    assert xs == sorted(xs) and len(set(xs)) == 8
    for a, b, data in graph.edges(data=True):
        if data["kind"] in (cex.PROGRAM, cex.FEEDS, cex.PARTIAL):
            assert geometry.positions[a][1] > geometry.positions[b][1], (a, b)
    bottom = {geometry.rows[n] for n in nodes(graph, cex.BLOCKED)}
    assert bottom == {max(geometry.rows.values())}  # the stuck state is one row


def test_dot_text_pins_nodes_and_paints_the_cycle_red():
    graph, _ = graph_of("circular_wait")
    source = draw.to_dot(graph)
    assert "layout=nop2" in source
    for d in range(4):
        assert f'"device {d}"' in source or f"label=\"device {d}\"" in source
    assert source.count("BLOCKED: wait token@d") == 4
    assert source.count(f"color=\"{draw.RED}\" penwidth=2.8") == 4  # the waits-for edges


def declared_bugs():
    """Every model and example file that declares an error-severity violation, with the
    device count and invocation count its declarations name (4 and 1 when they name none)."""
    from semcheck.run.expectations import declared_in_file
    from semcheck.frontends import discover
    from semcheck.semantics.properties import SEVERITY, Kind

    folders = [p for p in (MODELS, os.path.join(ROOT, "examples")) if os.path.isdir(p)]
    out = []
    for path in discover(folders):
        declared = [d for d in declared_in_file(path) if any(SEVERITY[Kind(k)] == "error" for k in d.outcomes)]
        if declared:
            counts = sorted({n for d in declared for n in (d.devices or ())}) or [4]
            invocations = sorted({k for d in declared for k in (d.invocations or ())}) or [1]
            out.append(pytest.param(path, counts[0], invocations[0], id=os.path.relpath(path, ROOT)))
    return out


@pytest.mark.parametrize("path,devices,invocations", declared_bugs())
def test_cli_renders_svg_for_every_declared_bug(tmp_path, capsys, path, devices, invocations):
    out = tmp_path / "out.svg"
    code = cli.main(["verify", path, "--devices", str(devices), "--invocations", str(invocations),
                     "--graph", str(out), "-q"])
    _, err = capsys.readouterr()
    assert code == 1
    drawn = sorted(tmp_path.glob("*.svg"))
    assert drawn and all(f"counterexample drawn to {f}" in err for f in drawn)
    for svg_file in drawn:
        svg = svg_file.read_text()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg
        assert any(marker in svg for marker in (
            "BLOCKED", "FAULT", "AT EXIT", "RACE", "OUTSIDE THE KERNEL", "PHASE OVERRUN", "SPINS FOR EVER"))


def test_every_buggy_model_is_drawn():
    drawn = {os.path.basename(p.values[0])[:-3] for p in declared_bugs() if p.values[0].startswith(MODELS)}
    assert drawn == set(BUGGY)


def test_png_and_dot_outputs(tmp_path):
    graph, _ = graph_of("ring_recv_before_send")
    draw.write(graph, str(tmp_path / "g.png"))
    draw.write(graph, str(tmp_path / "g.dot"))
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dot_text = (tmp_path / "g.dot").read_text()
    assert dot_text.startswith("digraph")
    # The .dot file alone draws the same picture semcheck draws (positions travel with it).
    assert graphviz.Source(dot_text).pipe(format="svg") == draw.render(graph, "svg")


def test_several_counterexamples_get_one_file_each(tmp_path, capsys):
    code = cli.main(["verify", os.path.join(MODELS, "circular_wait.py"), os.path.join(MODELS, "ring_allgather.py"),
                     "--devices", "2,4", "--graph", str(tmp_path / "cex.svg"), "-q"])
    capsys.readouterr()
    assert code == 1
    assert sorted(os.listdir(tmp_path)) == ["cex-circular_wait-2d-deadlock.svg", "cex-circular_wait-4d-deadlock.svg"]


def test_graph_file_must_have_a_known_suffix(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["verify", os.path.join(MODELS, "circular_wait.py"), "--graph", "out.pdf"])
    assert exc.value.code == 2


def test_each_dma_completion_is_linked_to_the_start_of_its_copy():
    graph, violation = graph_of("dma_wait_mismatch")
    completions = [n for n in nodes(graph, cex.STEP) if graph.nodes[n]["event"] in ("dma_recv_done", "dma_send_done")]
    assert len(completions) == 8  # each of the 4 copies has left and landed
    for node in completions:
        [start] = [a for a, b in edges(graph, cex.COPY) if b == node]
        assert graph.nodes[start]["event"] == "dma_start"
        receiver, sender = graph.nodes[node]["lane"][0], graph.nodes[start]["lane"][0]
        if graph.nodes[node]["event"] == "dma_recv_done":
            assert receiver == (sender + 1) % 4  # lands on the right neighbour
        else:
            assert receiver == sender  # the send side completes on the sender
    steps = {s.index: s for s in violation.trace}
    assert all(steps[s.started_by].event == "dma_start" for s in violation.trace if s.started_by)


@pytest.mark.parametrize("devices", [3, 8])  # ring_allgather_shared_recv needs 3 to race
@pytest.mark.parametrize("name", sorted(BUGGY))
def test_graphviz_routes_every_edge_around_the_nodes(capfd, name, devices):
    """No node overlaps another, so Graphviz never falls back to straight lines through boxes."""
    graph, _ = graph_of(name, devices)
    capfd.readouterr()
    assert draw.render(graph, "svg")
    assert "Warning" not in capfd.readouterr().err


def test_a_race_shows_both_accesses_and_that_nothing_orders_them():
    graph, violation = graph_of("ring_allgather_shared_recv")
    [(copy_start, access)] = [(a, b) for a, b, d in graph.edges(data=True) if d["kind"] == cex.UNORDERED]
    assert graph.nodes[access]["step"] == violation.trace[-1].index
    assert graph.nodes[copy_start]["event"] == "dma_start"
    assert graph.nodes[copy_start]["line"] == violation.related[0].line
    assert {graph.nodes[copy_start]["highlight"], graph.nodes[access]["highlight"]} == {"fault"}
    assert graph.nodes[access]["label"].endswith("RACE: touches memory a copy is still writing or reading")
    assert graph.nodes[copy_start]["label"].endswith("COPY STILL IN FLIGHT")
    # the copy has not landed: no completion of it is in the trace
    assert not any(d["kind"] == cex.COPY for a, _, d in graph.edges(data=True) if a == copy_start
                   and graph.nodes[_]["event"] == "dma_recv_done")


def test_a_loop_that_spins_for_ever_is_drawn_as_a_loop():
    graph, violation = graph_of("poll_flag_never_set")
    assert violation.loop_from is not None and violation.blocked == []
    [(last, first)] = edges(graph, cex.REPEATS)
    assert graph.nodes[last]["step"] == violation.trace[-1].index
    assert graph.nodes[first]["step"] == violation.loop_from
    assert graph.nodes[first]["highlight"] == "fault"
    assert "SPINS FOR EVER" in graph.nodes[first]["label"]
    assert graph.nodes[first]["line"] == violation.location.line  # the loop's read


def test_a_step_on_a_counter_semcheck_made_is_labelled_as_its_text_names_it():
    """A graph's step said `signal warp_fork[1]@d0 +1`, the model's name, where the trace's
    text says what the counter stands for."""
    from semcheck.result import StepEvent, TraceStep

    step = TraceStep(index=3, actor="device 0", device=0, core=0, sub=0, event=StepEvent.SIGNAL, text="",
                     location=None, semaphore="warp_fork[1]@d0", declaration="warp_fork", before=0, after=1,
                     semaphore_shown_as="the fork into warps of a warp-level core_map (warp 1)")
    assert cex._short_text(step) == ("signal the fork into warps of a warp-level core_map (warp 1) +1", "0 → 1")
    mine = TraceStep(index=4, actor="device 0", device=0, core=0, sub=0, event=StepEvent.WAIT, text="",
                     location=None, semaphore="ready@d0", declaration="ready", before=1, after=0, need=1)
    assert cex._short_text(mine) == ("wait ready@d0 ≥ 1", "1 → 0")


def test_a_blocked_wait_and_a_leftover_on_a_counter_semcheck_made_are_labelled_as_their_steps_say_it():
    """The BLOCKED and AT EXIT labels said the model's key (`warp_join@d0`) where the trace's
    steps say what the counter stands for."""
    from dataclasses import replace

    from semcheck.result import BlockedWait, StepEvent, TraceStep, Violation

    join = "the join of a warp-level core_map's warps"
    blocked = BlockedWait(thread=0, device=0, core=0, sub=0, name="device 0", semaphore=f"{join} on device 0",
                          short="warp_join@d0", sem=3, needs=4, has=3, location=None, what="semaphore_wait",
                          shown=join)
    assert cex._blocked_label(blocked, "").replace("\n", " ").startswith(f"BLOCKED: wait {join} needs 4, has 3")
    step = TraceStep(index=1, actor="device 0", device=0, core=0, sub=0, event=StepEvent.SIGNAL, text="",
                     location=None, semaphore="warp_join@d0", declaration="warp_join", before=0, after=1,
                     semaphore_shown_as=join)
    left = Violation(kind="semaphore_leftover", severity="error", message="", device=0, core=0, location=None,
                     trace=[step], semaphore="warp_join@d0")
    assert cex._at_exit_label(left) == f"AT EXIT: {join} = 1\nmust be 0 (TPU)"
    plain = replace(blocked, short="ready@d0", shown="")
    assert cex._blocked_label(plain, "").startswith("BLOCKED: wait ready@d0")
