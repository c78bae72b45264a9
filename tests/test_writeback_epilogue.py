"""The write-back pattern of tpu-inference's ragged paged attention v3 (its KV-cache update),
as our own example pair: local copies out of two VMEM slots left in flight across grid steps,
each found again through the row count recorded in SMEM, and drained at the last step. The
correct example drains both slots; the buggy one only the slot its last step wrote, so the
write-back started one step earlier is never waited for."""

from __future__ import annotations

from tests.tpu_support import example_line, results

DRAINED, _ = example_line("writeback_drained_in_epilogue.py", "DRAINED_SLOTS = (0, 1)")
ONE_SLOT, START = example_line("writeback_drained_in_epilogue_one_slot.py", "writeback(slot, i, ROWS).start()")


def test_draining_both_slots_is_safe_with_every_state_counted():
    [r] = results(DRAINED, 2)
    assert r.verdict.value == "safe", [v.message for v in r.violations]
    assert r.stats.states == 100


def test_draining_one_slot_leaves_the_other_slots_write_back_in_flight():
    [r] = results(ONE_SLOT, 2)
    assert r.verdict.value == "violation"
    assert {v.kind for v in r.errors} == {"semaphore_leftover"}
    assert {v.location.line for v in r.errors} == {START}
    # the leftover is on the slot the last step did not drain: NUM_BLOCKS = 4, so slot 0
    assert all("sems[0]" in v.message for v in r.errors), [v.message for v in r.errors]
