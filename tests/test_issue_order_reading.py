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

import pytest

from semcheck import api
from semcheck.result import Reading
from semcheck.semantics.properties import ISSUE_ORDER_READING
from tests.tpu_support import EXAMPLES, results

ACKED = os.path.join(EXAMPLES, "resend_into_slot.py")
UNACKED = os.path.join(EXAMPLES, "resend_into_slot_unacked.py")


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


@pytest.mark.parametrize("name", ["relay_in_pieces_early.py", "chunked_shift_shared_recv.py"])
def test_races_that_no_landing_order_removes_rest_on_nothing(name):
    """A relay of one device against its neighbour's copy, a read against a copy: no order
    of one path's landings would order them."""
    [r] = results(os.path.join(EXAMPLES, name), 4)
    assert r.violations and {v.kind for v in r.violations} == {"data_race"}
    assert all(v.rests_on == () for v in r.violations)


def test_of_two_races_only_the_one_between_one_devices_copies_rests_on_the_reading():
    """The ring all-gather without capacity: device 1's next copy into device 2's landing slot
    races with its previous one (line 53 twice: rests on the landing order) and with device
    2's read of the slot (line 56: whatever the order)."""
    [r] = api.verify_path(os.path.join(EXAMPLES, "allgather_ring_overwrite.py"), devices=[4], exhaustive=True)
    found = {(v.location.line, tuple(loc.line for loc in v.related)): v.rests_on for v in r.violations}
    assert found == {(53, (53,)): (Reading(ISSUE_ORDER_READING, None),), (56, (53,)): ()}
    assert r.stats.states == 302


def test_the_reports_name_the_reading(tmp_path):
    out = tmp_path / "report.json"
    run = subprocess.run(
        [sys.executable, "-m", "semcheck", "verify", UNACKED, "--devices", "2", "--format", "json", "-o", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 1, run.stderr
    assert "rests on: copies that one thread started to the same device" in run.stdout
    assert "no switch takes another reading yet" in run.stdout
    [violation] = json.loads(out.read_text())["results"][0]["violations"]
    assert violation["rests_on"] == [{"rule": ISSUE_ORDER_READING, "switch": None}]
