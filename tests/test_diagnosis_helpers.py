"""Root causes of races in kernels that start and wait every copy through one helper (the
pattern of tpu-inference's all_gather_matmul, `_start_or_wait_copy(op, wait)`), on the
example pair double_buffer_via_helper{,_wrong_slot}.py.

A wait on the racing copy's receive semaphore that came before that copy even started took
an earlier copy's completion, rightly: it is not a wait that "took the wrong copy"
(`WRONG_COPY`), and the race has no root cause beyond itself. Lines inside a helper are
named with the kernel line that called it, in root causes as elsewhere."""

from __future__ import annotations

import os

import pytest

from semcheck import ir
from semcheck.report import causes
from semcheck.report.text import render_violation
from semcheck.result import CauseKind, RootCause
from tests.tpu_support import EXAMPLES, results

SAFE = os.path.join(EXAMPLES, "double_buffer_via_helper.py")
WRONG_SLOT = os.path.join(EXAMPLES, "double_buffer_via_helper_wrong_slot.py")


def _line_of(path: str, text: str) -> int:
    with open(path, encoding="utf-8") as f:
        [number] = [n for n, line in enumerate(f, start=1) if text in line]
    return number


@pytest.mark.parametrize(("devices", "states"), [(1, 22), (2, 50)])
def test_reading_the_slot_waited_one_step_earlier_is_safe(devices, states):
    [result] = results(SAFE, devices)
    assert result.verdict.value == "safe"
    assert result.stats.states == states


@pytest.mark.parametrize(("devices", "states"), [(1, 23), (2, 51)])
def test_reading_the_slot_being_filled_is_a_race_with_no_wrong_copy_blamed(devices, states):
    # (exhaustive, as `results` checks: every state, not the first counterexample's search)
    [result] = results(WRONG_SLOT, devices)
    assert result.verdict.value == "violation" and result.stats.states == states
    [race] = [v for v in result.violations if v.kind == "data_race"]
    read = _line_of(WRONG_SLOT, "o_ref[...] += buf[i % 2]")
    assert race.location.line == read
    # the copy it races with is the one started through the helper from `copy_in(wait=False)`
    [copy] = race.related
    assert copy.line == _line_of(WRONG_SLOT, "copy.start()")
    assert copy.chain[-1].line == _line_of(WRONG_SLOT, "copy_in(wait=False)")
    # the previous step's wait on the same semaphore came before this copy started: it is
    # not a wait that took another copy's completion
    assert race.cause is None
    report = "\n".join(render_violation(race, kernel_file=result.file, cores=result.cores, max_trace_steps=50))
    assert "was satisfied by" not in report
    assert "wait for the copy's semaphore before touching its memory" in report


def test_a_root_cause_names_a_helper_line_with_the_kernel_line_that_called_it():
    helper = _line_of(WRONG_SLOT, "copy.start()")
    start = _line_of(WRONG_SLOT, "copy_in(wait=False)")
    in_helper = ir.Loc(WRONG_SLOT, helper, (ir.Frame(WRONG_SLOT, 40, "copy_in"), ir.Frame(WRONG_SLOT, start, "_")))
    cause = RootCause(CauseKind.UNWAITED_COPY, in_helper, sides=("recv",))
    assert causes.statement(cause) == f"the copy started at line {helper} (called from line {start}) is never waited for"
    assert causes.fix(cause) == f"call its `.wait_recv()` (on the receiving device) after line {helper} (called from line {start})"
    # a line of the kernel body itself reads as before
    assert causes.statement(RootCause(CauseKind.UNWAITED_COPY, ir.Loc(WRONG_SLOT, 52), sides=("recv",))) == \
        "the copy started at line 52 is never waited for"
    # a call from another file names that file
    elsewhere = ir.Loc(WRONG_SLOT, helper, (ir.Frame("/elsewhere/driver.py", 7, "main"),))
    assert causes.statement(RootCause(CauseKind.UNWAITED_COPY, elsewhere, sides=("recv",))).endswith(
        f"line {helper} (called from /elsewhere/driver.py:7) is never waited for")
