"""The picture shows the cause: only the lanes involved (the rest folded into one lane),
the regions a copy moves, an entry that wipes a pending addition drawn as a loss, a legend
for the kind, source lines as SVG tooltips, and file names that tell two files apart."""

import os

from semcheck import cli
from semcheck.semantics import trace
from semcheck.api import verify_path
from semcheck.engines.common import describing
from semcheck.model import ProtocolBuilder
from semcheck.report import draw
from semcheck.report import graph as cex
from semcheck.result import Result, Verdict, Violation
from semcheck.semantics import System, ThreadStep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")


def only_error(name, devices):
    [r] = verify_path(os.path.join(MODELS, name + ".py"), [devices])
    [v] = r.errors
    return r, v


def test_eight_devices_draw_two_lanes_and_one_folded_lane():
    r, v = only_error("ring_allgather_missing_signal", 8)
    graph = cex.counterexample_graph(r, v)
    labels = [label for _key, label in graph.graph["lanes"]]
    assert labels == ["device 6", "device 7", "other devices (0-5)"]
    [rest] = [n for n in graph if graph.nodes[n]["lane"] == cex.REST]
    assert graph.nodes[rest]["label"].startswith("... 110 steps the violation does not depend on")
    assert "6 waits stuck behind it" in graph.nodes[rest]["label"]
    assert not list(graph.predecessors(rest)) and not list(graph.successors(rest))  # it explains nothing
    # every cross-lane edge joins two nodes of the causal past
    for a, b, data in graph.edges(data=True):
        if data["kind"] != cex.PROGRAM:
            assert graph.nodes[a].get("relevant", True) and graph.nodes[b].get("relevant", True)


def test_dma_nodes_show_the_regions_they_copy():
    r, v = only_error("dma_wait_mismatch", 4)
    graph = cex.counterexample_graph(r, v)
    starts = [n for n in graph if graph.nodes[n].get("event") == "dma_start"]
    assert starts
    for n in starts:
        step = next(s for s in v.trace if f"s{s.index}" == n)
        assert step.src is not None and step.dst is not None
        assert str(step.src) in graph.nodes[n]["label"] and f"→ {step.dst}" in graph.nodes[n]["label"]
        assert str(step.dst).endswith(f"@d{step.target_device}")


def _early_signal_lost():
    """Device 0 signals device 1's flag before device 1 entered: its entry wipes it."""
    p = ProtocolBuilder("early", devices=2, backend="tpu")
    flag = p.semaphore("flag")
    for d in (0, 1):
        t = p.thread(d)
        t.entry()
        if d == 0:
            t.signal(flag, device=1)
        else:
            t.wait(flag)
        t.exit()
    return p.build()


def test_an_entry_that_wipes_a_pending_signal_is_drawn_as_such():
    protocol = _early_signal_lost()
    system = System(protocol)
    initial = system.initial_state(())
    # device 0 enters and signals; then device 1 enters (wiping it) and waits for ever
    actions = [ThreadStep(0), ThreadStep(0), ThreadStep(1)]
    steps = trace.build(system, initial, actions)
    entry = steps[2]
    assert entry.event == "entry" and entry.wiped == ("flag@d1",) and entry.wiped_additions == (2,)
    assert entry.fed_by == ()  # a wipe is not a wait being fed
    violation = Violation("unsatisfied_wait", "error", "", 1, 0, None, trace=steps)
    result = Result(**describing(protocol), engine="explicit", verdict=Verdict.VIOLATION, violations=[violation])
    graph = cex.counterexample_graph(result, violation)
    assert [(a, b) for a, b, d in graph.edges(data=True) if d["kind"] == cex.WIPED] == [("s2", "s3")]
    assert "resets flag@d1" in graph.nodes["s3"]["label"]
    assert "kernel entry reset" in draw.legend(graph)


def test_each_kind_has_its_own_legend_and_nodes_quote_their_source():
    r, v = only_error("circular_wait", 2)
    graph = cex.counterexample_graph(r, v)
    assert draw.legend(graph).startswith("red: the blocked waits of the cycle")
    r2, v2 = only_error("remote_out_of_range", 2)
    assert draw.legend(cex.counterexample_graph(r2, v2)).startswith("red: the step that names a device outside")
    svg = draw.render(graph, "svg").decode()
    assert svg.count('xlink:title="circular_wait.py:20: t.wait(token, 1)') == 2  # both blocked waits


def test_file_names_carry_the_source_files_stem(tmp_path, capsys):
    a, b = tmp_path / "one.py", tmp_path / "two.py"
    source = open(os.path.join(MODELS, "circular_wait.py")).read()
    a.write_text(source)
    b.write_text(source)  # both define the kernel `circular_wait`
    code = cli.main(["verify", str(a), str(b), "--devices", "2", "--graph", str(tmp_path / "cex.svg"), "-q"])
    capsys.readouterr()
    assert code == 1
    assert sorted(p.name for p in tmp_path.glob("cex-*")) == [
        "cex-one-circular_wait-2d-deadlock.svg", "cex-two-circular_wait-2d-deadlock.svg"]


def test_json_steps_carry_the_structured_fields(capsys):
    import json

    cli.main(["verify", os.path.join(MODELS, "dma_wait_mismatch.py"), "--devices", "2", "--format", "json", "-q"])
    [violation] = json.loads(capsys.readouterr().out)["results"][0]["violations"]
    start = violation["trace"][0]
    assert start["event"] == "dma_start" and start["target_device"] == 1
    assert start["src"] == {"buffer": "src", "device": None, "starts": [0, 0], "sizes": [8, 128]}
    assert start["dst"]["device"] == 1
    assert {c["side"] for c in start["completions"]} == {"send", "recv"}
    waits = [s for s in violation["trace"] if s["event"] == "dma_wait"]
    assert waits and all(s["side"] == "send" and s["need"] == 4096 for s in waits)
