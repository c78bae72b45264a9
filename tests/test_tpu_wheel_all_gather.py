"""The TPU all-gather shipped in the jax wheel (nobody on the team wrote it), as a user would
check it: a driver script that builds a mesh and calls `all_gather`. Then mutants of its
source, made here at test time, must be caught with the right violation kinds.

The kernel keeps one receive semaphore per direction for every step, so two remote copies
can be in flight on one semaphore and the later one can satisfy the wait for the earlier
one: the device then forwards a slot that is still being written. JAX's TPU interpreter
(`InterpretParams(detect_races=True)`) reports that race at the file's two
`async_remote_copy` calls from 4 devices on; semcheck must report it there too, with both
lines, and its `--graph` must show the two racing accesses and the missing order.
"""

from __future__ import annotations

import inspect
import os

import pytest

from semcheck.api import verify_path

SYNC_KINDS = {"deadlock", "unsatisfied_wait", "semaphore_leftover", "invalid_device_id", "invalid_core_index"}

DRIVER = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh

{import_line}

mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
x = jnp.ones((mesh.size * 8, 128), jnp.float32)
out = ag.all_gather(x, mesh=mesh, axis_name="x")
jax.block_until_ready(out)
print("all_gather", out.shape)
"""


def wheel_source() -> tuple[str, str]:
    from jax.experimental.pallas.ops.tpu import all_gather

    return os.path.abspath(all_gather.__file__), inspect.getsource(all_gather)


def write_driver(tmp_path, import_line: str) -> str:
    path = tmp_path / "driver.py"
    path.write_text(DRIVER.format(import_line=import_line))
    return str(path)


def mutant(tmp_path, replace: str, by: str) -> tuple[str, str]:
    """A copy of the wheel's all_gather with `replace` (which must occur once) replaced."""
    _, source = wheel_source()
    assert source.count(replace) == 1, f"the wheel's all_gather no longer contains {replace!r}"
    module = tmp_path / "ag_mutant.py"
    module.write_text(source.replace(replace, by))
    return write_driver(tmp_path, "import ag_mutant as ag"), str(module)


def line_of(path: str, text: str) -> int:
    with open(path, encoding="utf-8") as f:
        [number] = [n for n, line in enumerate(f, start=1) if text in line]
    return number


@pytest.mark.parametrize("devices", [2, 4, 8])
def test_wheel_all_gather_has_no_hang_leftover_or_bad_id(tmp_path, devices):
    driver = write_driver(tmp_path, "from jax.experimental.pallas.ops.tpu import all_gather as ag")
    [result] = verify_path(driver, [devices])
    assert result.error is None, result.error
    assert result.kernel == "ag_kernel" and result.devices == devices
    assert not {v.kind for v in result.errors} & SYNC_KINDS, [v.message for v in result.errors]
    wheel_file, _ = wheel_source()
    assert os.path.samefile(result.file, wheel_file)  # the kernel's own file, not the driver
    assert result.line == line_of(wheel_file, "def ag_kernel(")


def remote_copy_lines(path: str) -> dict[str, int]:
    return {d: line_of(path, f"{d}_dma = pltpu.async_remote_copy(") for d in ("right", "left")}


def test_wheel_all_gather_has_no_race_with_two_devices(tmp_path):
    """Two devices: one step per direction, so no second copy shares a semaphore."""
    driver = write_driver(tmp_path, "from jax.experimental.pallas.ops.tpu import all_gather as ag")
    [result] = verify_path(driver, [2])
    assert result.verdict.value == "safe", [v.message for v in result.violations]


@pytest.mark.parametrize("devices", [4, 8])
def test_wheel_all_gather_races_at_both_remote_copies(tmp_path, devices):
    driver = write_driver(tmp_path, "from jax.experimental.pallas.ops.tpu import all_gather as ag")
    [result] = verify_path(driver, [devices], exhaustive=True)
    wheel_file, _ = wheel_source()
    races = [v for v in result.errors if v.kind == "data_race"]
    assert {v.kind for v in result.errors} == {"data_race"}
    assert sorted(v.location.line for v in races) == sorted(remote_copy_lines(wheel_file).values())
    for race in races:
        # The other access is a copy started at the same line (the previous step's copy).
        [other] = race.related
        assert os.path.samefile(other.file, wheel_file) and other.line == race.location.line
        assert os.path.samefile(race.location.file, wheel_file)
        assert "while a copy still in flight writes" in race.message


@pytest.mark.parametrize("devices, states", [(4, 198), (8, 714)])
def test_the_explicit_search_finds_both_races_without_exploring_pairs_no_schedule_shows(tmp_path, devices, states):
    """Exact state counts: its first local copy, its ring sends and the copy-out of its
    output at exit overlap in memory, but no schedule can make them race (counting and
    happens-before order them: semcheck/semantics/ordering.py). Explored as if they could, the search
    took 4,690 states at 4 devices and 338,501 at 8."""
    driver = write_driver(tmp_path, "from jax.experimental.pallas.ops.tpu import all_gather as ag")
    [result] = verify_path(driver, [devices], engine="explicit", exhaustive=True)
    wheel_file, _ = wheel_source()
    assert sorted(v.location.line for v in result.errors) == sorted(remote_copy_lines(wheel_file).values())
    assert result.stats.states == states


@pytest.mark.parametrize("devices", [4, 8])
def test_wheel_all_gather_graph_shows_why_the_copies_overlap(tmp_path, devices):
    """The graph of each race: the copy still in flight and the access that overlaps it,
    joined by an `unordered` edge; the copy never lands in the trace, and the wait before
    the access was satisfied by a LATER copy of the same sender on the same semaphore."""
    from semcheck.report import draw
    from semcheck.report import graph as cex

    driver = write_driver(tmp_path, "from jax.experimental.pallas.ops.tpu import all_gather as ag")
    # the explicit search's shortest path tells this story (z3, which auto may let decide
    # at 8 devices, finds a longer one)
    [result] = verify_path(driver, [devices], engine="explicit")
    wheel_file, _ = wheel_source()
    for race in result.errors:
        graph = cex.counterexample_graph(result, race)
        [(in_flight, access)] = [(a, b) for a, b, d in graph.edges(data=True) if d["kind"] == cex.UNORDERED]
        nodes = graph.nodes
        assert nodes[in_flight]["event"] == nodes[access]["event"] == "dma_start"
        assert nodes[in_flight]["line"] == nodes[access]["line"] == race.location.line
        assert nodes[in_flight]["lane"] != nodes[access]["lane"]  # the sender and the receiver
        assert nodes[in_flight]["highlight"] == nodes[access]["highlight"] == "fault"
        assert nodes[access]["step"] == race.trace[-1].index
        # The racing copy has not landed: none of its completions is in the graph.
        copy_edges = {b for a, b, d in graph.edges(data=True) if a == in_flight and d["kind"] == cex.COPY}
        assert not any(nodes[n].get("event") == "dma_recv_done" for n in copy_edges)
        # The receiver's wait just before the access consumed a completion of another copy
        # that the same sender started later, at the same line.
        [wait] = [a for a, b, d in graph.edges(data=True) if b == access and d["kind"] == cex.PROGRAM]
        assert nodes[wait]["event"] == "dma_wait"
        [landed] = [a for a, b, d in graph.edges(data=True) if b == wait and d["kind"] == cex.FEEDS]
        [later] = [a for a, b, d in graph.edges(data=True) if b == landed and d["kind"] == cex.COPY]
        assert later != in_flight and nodes[later]["line"] == nodes[in_flight]["line"]
        assert nodes[later]["lane"] == nodes[in_flight]["lane"] and nodes[later]["step"] > nodes[in_flight]["step"]
        # The DOT text draws the unordered pair as a red dashed two-way edge.
        dot = draw.to_dot(graph)
        [edge] = [line for line in dot.splitlines() if f"{in_flight} -> {access}" in line]
        assert "dashed" in edge and "dir=both" in edge


@pytest.mark.parametrize("devices", [2, 4])
def test_wrong_barrier_wait_value_is_an_unsatisfied_wait(tmp_path, devices):
    driver, module = mutant(tmp_path, "pl.semaphore_wait(sem, 2)", "pl.semaphore_wait(sem, 3)")
    [result] = verify_path(driver, [devices])
    assert {v.kind for v in result.errors} == {"unsatisfied_wait"}
    [violation] = result.errors
    assert os.path.samefile(violation.location.file, module)
    assert violation.location.line == line_of(module, "pl.semaphore_wait(sem, 3)")
    assert all(b.needs == 3 and b.has == 2 for b in violation.blocked)


@pytest.mark.parametrize("devices", [2, 8])
def test_dropped_barrier_signal_is_an_unsatisfied_wait(tmp_path, devices):
    driver, module = mutant(tmp_path, "pl.semaphore_signal(sem, 1, device_id=right_neighbor)\n", "\n")
    [result] = verify_path(driver, [devices])
    assert {v.kind for v in result.errors} == {"unsatisfied_wait"}
    assert result.errors[0].location.line == line_of(module, "pl.semaphore_wait(sem, 2)")


def test_dropped_wait_in_the_loop_leaves_bytes_on_the_semaphores(tmp_path):
    driver, module = mutant(
        tmp_path,
        'with jax.named_scope("wait_right_dma"):\n        right_dma.wait()',
        'with jax.named_scope("wait_right_dma"):\n        pass',
    )
    by_devices = {r.devices: r for r in verify_path(driver, [2, 4], exhaustive=True)}
    # With two devices the loop runs once, so there is no earlier copy to wait for.
    assert not {v.kind for v in by_devices[2].errors} & SYNC_KINDS
    # The kernel's own race (see above) is still there; the mutation adds the leftovers.
    leftovers = [v for v in by_devices[4].errors if v.kind != "data_race"]
    assert {v.kind for v in leftovers} == {"semaphore_leftover"}
    assert {"send_sem[1]", "recv_sem[1]"} <= {v.message.split()[2] for v in leftovers}
    start_line = line_of(module, "right_dma = pltpu.async_remote_copy(")
    assert all(start_line <= v.location.line <= start_line + 6 for v in leftovers)


def test_dropped_final_wait_leaves_bytes_on_the_semaphores(tmp_path):
    driver, _ = mutant(tmp_path, "    left_dma.wait()\n\n", "\n\n")
    [result] = verify_path(driver, [4], exhaustive=True)
    assert {v.kind for v in result.errors} - {"data_race"} == {"semaphore_leftover"}
