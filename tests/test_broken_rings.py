"""The JAX guide's ring kernels broken one line at a time, as a user would break them
(examples/tpu/allreduce_ring_*.py and allgather_ring_grid_no_wait.py): each report names
one problem per dropped line, and a fix that names what is missing, in a report that fits a
screen. The 8-device checks (what issue 27 judges) are in the slow tier; the fast tier
checks the same reports at fewer devices."""

from __future__ import annotations

import os
import re

import pytest

from semcheck import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TPU = os.path.join(ROOT, "examples", "tpu")
SCREEN = 60  # lines: one bug at 8 devices fits a screen


def line_of(name: str, text: str) -> int:
    with open(os.path.join(TPU, name), encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if line.strip().startswith(text))


# example -> (the problem's headline, the fix), each naming the lines of the example
BROKEN = {
    "allreduce_ring_no_capacity_wait.py": lambda: (
        f"no wait on `capacity` exists: its signals at line {line_of('allreduce_ring_no_capacity_wait.py', 'pl.semaphore_signal(capacity')} are never consumed",
        f"wait on `capacity` (`pl.semaphore_wait(capacity, ...)`) before line "
        f"{line_of('allreduce_ring_no_capacity_wait.py', 'onward.start()')}",
    ),
    "allreduce_ring_no_remote_wait.py": lambda: (
        f"the copy started at line {line_of('allreduce_ring_no_remote_wait.py', 'onward.start()')} is never waited for",
        f"call its `.wait()` (or `.wait_send()` / `.wait_recv()`) after line "
        f"{line_of('allreduce_ring_no_remote_wait.py', 'onward.start()')}",
    ),
    "allreduce_ring_capacity_to_right.py": lambda: (
        f"the wait at line {line_of('allreduce_ring_capacity_to_right.py', 'pl.semaphore_wait(capacity')} on device d "
        f"was satisfied by the signal at line {line_of('allreduce_ring_capacity_to_right.py', 'pl.semaphore_signal(capacity')} "
        f"from device d-1, not by device d+1, whose memory the copy at line "
        f"{line_of('allreduce_ring_capacity_to_right.py', 'onward.start()')} writes",
        "send it to device d-1 instead",
    ),
    "allreduce_ring_no_barrier.py": lambda: (
        f"remote_before_entry (device 0) at examples/tpu/allreduce_ring_no_barrier.py:"
        f"{line_of('allreduce_ring_no_barrier.py', 'first.start()')}",
        "handshake first: signal the barrier semaphore of each peer and wait for theirs before any remote signal or copy",
    ),
    "allgather_ring_grid_no_wait.py": lambda: (
        f"the copy started at line {line_of('allgather_ring_grid_no_wait.py', 'hop.start()')} is never waited for",
        f"call its `.wait()` (or `.wait_send()` / `.wait_recv()`) after line "
        f"{line_of('allgather_ring_grid_no_wait.py', 'hop.start()')}",
    ),
}
# What JAX's own TPU lowering says besides the dropped line's one problem: a kernel that
# sets collective_id and has no barrier semaphore is refused (tpu-observations.md, 4).
JAX_REFUSES = {"allreduce_ring_no_barrier.py": "  error: not_lowerable (protocol) at examples/tpu/allreduce_ring_no_barrier.py:"}
# The device counts the fast tier checks each at: the smallest where the report has every
# kind it has at 8 (a copy never waited for races only from 4 devices on in the all-gather).
FAST = {"allreduce_ring_no_capacity_wait.py": 4, "allreduce_ring_no_remote_wait.py": 2,
        "allreduce_ring_capacity_to_right.py": 4, "allreduce_ring_no_barrier.py": 4,
        "allgather_ring_grid_no_wait.py": 4}


def report(capsys, name: str, devices: int, *flags: str) -> tuple[int, str]:
    code = cli.main(["verify", os.path.join(TPU, name), "--devices", str(devices), "-q", "--max-memory", "3000", *flags])
    return code, capsys.readouterr().out


def check_report(code: int, out: str, name: str) -> None:
    headline, fix = BROKEN[name]()
    lines = out.splitlines()
    assert code == 1, out
    assert len(lines) <= SCREEN, out
    problems = [line for line in lines if re.match(r"  (error|warning): ", line)]
    if name in JAX_REFUSES:
        refusals = [line for line in problems if line.startswith(JAX_REFUSES[name])]
        assert len(refusals) == 1, problems
        problems.remove(refusals[0])
    assert len(problems) == 1, problems  # one dropped line, one problem
    assert problems[0] == f"  error: {headline}", out
    assert any(fix in line for line in lines if line.startswith("    fix: ")), out
    assert "  note" not in out  # modelling notes are behind -v, counted
    assert re.search(r"^  \d+ modelling notes? \(what the verdicts rest on\): shown with -v", out, re.M)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_one_dropped_line_is_one_problem_with_its_fix_at_8_devices(capsys, name):
    check_report(*report(capsys, name, 8), name)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_one_dropped_line_is_one_problem_with_its_fix(capsys, name):
    check_report(*report(capsys, name, FAST[name]), name)


def test_the_violations_of_one_cause_are_listed_under_it(capsys):
    """A capacity semaphore nobody waits on is left non-zero and lets senders run ahead:
    the leftover and the races are one problem, found as both kinds (every finding: --exhaustive)."""
    code, out = report(capsys, "allreduce_ring_no_capacity_wait.py", 4, "--exhaustive")
    signal = line_of("allreduce_ring_no_capacity_wait.py", "pl.semaphore_signal(capacity")
    local = line_of("allreduce_ring_no_capacity_wait.py", "local.start()")
    onward = line_of("allreduce_ring_no_capacity_wait.py", "onward.start()")
    assert (f"    found as: data_race at lines {local}, {onward}; semaphore_leftover at line {signal} "
            "(5 violations)") in out
    assert ": 5 violations of 1 problem: data_race, semaphore_leftover" in out.splitlines()[0]
