"""A data race between two copies that one thread started into the same device's memory rests
on those copies landing out of issue order (semantics/properties.py, ISSUE_ORDER_READING): the
finding says so (`rests on:`, JSON `rests_on`), and no other race does. The pair
examples/tpu/resend_into_slot*.py has the pattern of a public matmul-reduce-scatter for a
2x2 TPU v5p (benchmarks/public_kernels.md, "TPU-Collectives")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from semcheck import api
from semcheck.api import check_protocol
from semcheck.result import Reading
from semcheck.semantics.properties import ISSUE_ORDER_READING
from tests.tpu_kernels import line_of, mesh, protocols
from tests.tpu_support import EXAMPLES, results

ACKED = os.path.join(EXAMPLES, "resend_into_slot.py")
UNACKED = os.path.join(EXAMPLES, "resend_into_slot_unacked.py")
SHARED_RECV = os.path.join(EXAMPLES, "chunked_shift_shared_recv.py")


@pytest.mark.parametrize("devices, states", [(2, 42), (4, 82)])
def test_a_second_copy_after_the_receivers_go_ahead_is_safe(devices, states):
    [r] = results(ACKED, devices)
    assert r.verdict.value == "safe", [v.message for v in r.violations]
    assert r.stats.states == states


@pytest.mark.parametrize("devices, states", [(2, 39), (4, 75)])
def test_two_copies_of_one_device_into_one_peer_slot_race_and_say_what_that_rests_on(devices, states):
    [r] = results(UNACKED, devices)
    assert r.stats.states == states
    [race] = r.violations
    assert race.kind == "data_race"
    assert race.location.line == 44 and [loc.line for loc in race.related] == [42]  # the second start, the first
    assert race.rests_on == (Reading(ISSUE_ORDER_READING, None),)
    assert "[0:16, 0:128]" in race.message and "[0:8, 0:128]" in race.message


def test_races_that_no_landing_order_removes_rest_on_nothing():
    """A relay of one device against its neighbour's copy: no order of one path's landings
    would order them."""
    [r] = results(os.path.join(EXAMPLES, "relay_in_pieces_early.py"), 4)
    assert r.violations and {v.kind for v in r.violations} == {"data_race"}
    assert all(v.rests_on == () for v in r.violations)


@pytest.mark.parametrize("devices, states", [(2, 44), (4, 84)])
def test_a_read_whose_wait_a_later_copy_of_the_same_peer_took_rests_on_the_reading(devices, states):
    """Two chunks of one neighbour on one receive semaphore: the wait for the first is met
    by the second's bytes, then the read races the first's landing. Landing in issue order,
    the second's bytes would mean the first had landed (the all2all of a public fused
    all-reduce matmul, sweep 6); chunked_shift.py, a semaphore per chunk, is the fix."""
    [r] = results(SHARED_RECV, devices)
    assert r.stats.states == states
    [race] = r.violations
    assert (race.location.line, [loc.line for loc in race.related]) == (50, [46])  # the read, the copies
    assert race.rests_on == (Reading(ISSUE_ORDER_READING, None),)
    [fixed] = results(os.path.join(EXAMPLES, "chunked_shift.py"), devices)
    assert fixed.verdict.value == "safe"


@pytest.mark.parametrize("devices", [2, 4])
def test_a_ring_whose_first_wait_a_neighbours_onward_copy_can_take_rests_on_the_reading(devices):
    """allreduce_ring_no_capacity.py: the wait after the first copy can be met by the left
    neighbour's onward copy, started later, and the local copy then reads the slot the first
    copy still writes. The lines also pair up as the first copy's start against the
    neighbour's local copy in flight, which no run reaches (that local copy waits for bytes
    only the first copy's device sends, the first of them at that very start)."""
    [r] = results(os.path.join(EXAMPLES, "allreduce_ring_no_capacity.py"), devices)
    races = {(v.location.line, tuple(loc.line for loc in v.related)): v.rests_on for v in r.violations}
    assert races[(59, (55,))] == (Reading(ISSUE_ORDER_READING, None),)


def two_peers_on_one_receive_semaphore(x_ref, o_ref, landing, send_sems, recv_sem):
    # both neighbours send a chunk into one receive semaphore of this device: the wait for
    # the left one's may take the right one's bytes, whatever order each path keeps
    n = lax.axis_size("x")
    me = lax.axis_index("x")
    copies = [pltpu.make_async_remote_copy(x_ref, landing.at[side], send_sems.at[side], recv_sem,
                                           device_id=(peer,), device_id_type=pl.DeviceIdType.MESH)
              for side, peer in enumerate((lax.rem(me + 1, n), lax.rem(me + n - 1, n)))]
    for copy in copies:
        copy.start()
    copies[1].wait_recv()  # stands for the left neighbour's copy into landing[1]
    o_ref[...] = landing[1]  # the chunk from the left
    copies[0].wait_recv()
    o_ref[...] += landing[0]
    for copy in copies:
        copy.wait_send()


def test_a_read_whose_wait_another_peers_copy_can_take_rests_on_nothing():
    """The same read with its wait shared by two peers' copies: the right neighbour's
    landing meets it while the left one's copy is in flight, in any landing order."""
    def per_device(block):
        return pl.pallas_call(
            two_peers_on_one_receive_semaphore, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.VMEM((2, *block.shape), block.dtype), pltpu.SemaphoreType.DMA((2,)),
                            pltpu.SemaphoreType.DMA])(block)

    [protocol] = protocols(per_device, mesh((4,)))
    result = check_protocol(protocol, engine="explicit")
    read = line_of(__file__, "o_ref[...] = landing[1]  # the chunk from the left")
    [race] = [v for v in result.violations if v.kind == "data_race"]
    assert race.location.line == read
    assert race.rests_on == ()


def test_of_two_races_only_the_one_between_one_devices_copies_rests_on_the_reading():
    """The ring all-gather without capacity: device 1's next copy into device 2's landing slot
    races with its previous one (line 53 twice: rests on the landing order) and with device
    2's read of the slot (line 56: whatever the order)."""
    [r] = api.verify_path(os.path.join(EXAMPLES, "allgather_ring_overwrite.py"), devices=[4], exhaustive=True)
    found = {(v.location.line, tuple(loc.line for loc in v.related)): v.rests_on for v in r.violations}
    assert found == {(53, (53,)): (Reading(ISSUE_ORDER_READING, None),), (56, (53,)): ()}
    assert r.stats.states == 302


@pytest.mark.parametrize("path", [UNACKED, SHARED_RECV])
def test_the_reports_name_the_reading(tmp_path, path):
    out = tmp_path / "report.json"
    run = subprocess.run(
        [sys.executable, "-m", "semcheck", "verify", path, "--devices", "2", "--format", "json", "-o", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 1, run.stderr
    assert "rests on: copies that one thread started to the same device" in run.stdout
    assert "no switch takes another reading yet" in run.stdout
    [violation] = json.loads(out.read_text())["results"][0]["violations"]
    assert violation["rests_on"] == [{"rule": ISSUE_ORDER_READING, "switch": None}]
