"""The write-back pattern of tpu-inference's ragged paged attention v3 (its KV-cache update),
as our own example pair: local copies out of two VMEM slots left in flight across grid steps,
each found again through the row count recorded in SMEM, and drained at the last step. The
correct example drains both slots; the buggy one only the slot its last step wrote, so the
write-back started one step earlier is never waited for."""

from __future__ import annotations

import os

from tests.tpu_support import results

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRAINED = os.path.join(HERE, "examples", "tpu", "writeback_drained_in_epilogue.py")
ONE_SLOT = os.path.join(HERE, "examples", "tpu", "writeback_drained_in_epilogue_one_slot.py")


def _line(path: str, text: str) -> int:
    with open(path, encoding="utf-8") as f:
        [number] = [n for n, line in enumerate(f, start=1) if text in line]
    return number


def test_draining_both_slots_is_safe_with_every_state_counted():
    [r] = results(DRAINED, 2)
    assert r.verdict.value == "safe", [v.message for v in r.violations]
    assert r.stats.states == 100


def test_draining_one_slot_leaves_the_other_slots_write_back_in_flight():
    [r] = results(ONE_SLOT, 2)
    assert r.verdict.value == "violation"
    assert {v.kind for v in r.errors} == {"semaphore_leftover"}
    start = _line(ONE_SLOT, "writeback(slot, i, ROWS).start()")
    assert {v.location.line for v in r.errors} == {start}
    # the leftover is on the slot the last step did not drain: NUM_BLOCKS = 4, so slot 0
    assert all("sems[0]" in v.message for v in r.errors), [v.message for v in r.errors]
