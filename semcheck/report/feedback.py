"""What a run says on stderr while it works: one capture line per kernel script and device
count, with where its time went (capturing a script takes seconds; checking it often less)."""

from __future__ import annotations

from typing import Callable, TextIO

from semcheck.ir import display_path
from semcheck.records import record


def capture_line(report) -> str | None:
    """`semcheck: captured ring.py at 4 devices: 2 kernels in 3.1 s (jax import 1.0 s, script
    1.9 s, lowering 0.2 s)`, or `... 2 kernels from the capture cache in 0.0 s (captured
    earlier in 3.1 s: ...)`; None for a model file (nothing to capture)."""
    if not report.phases and not report.failed:
        return None
    where = f"{display_path(report.path)} at {report.devices} device{'s' if report.devices != 1 else ''}"
    if report.failed:
        return f"semcheck: {where}: could not be loaded ({report.seconds:.1f} s)"
    kernels = f"{report.kernels} kernel{'s' if report.kernels != 1 else ''}"
    phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in report.phases.items())
    if report.kept:
        made = sum(report.phases.values())
        return (f"semcheck: {where}: {kernels} from the capture cache in {report.seconds:.1f} s "
                f"(captured earlier in {made:.1f} s: {phases})")
    return f"semcheck: captured {where}: {kernels} in {report.seconds:.1f} s ({phases})"


def capture_line_printer(stream: TextIO, before: Callable[[], None] | None = None):
    def show(report) -> None:
        line = capture_line(report)
        if line is None:
            return
        if before is not None:
            before()  # a progress line in place on a terminal is cleared first
        stream.write(line + "\n")
        stream.flush()

    return show


@record
class Position:
    """Where a run is: how many of its (file, device count) checks are done, of how many."""

    total: int
    finished: int = 0

    def done(self, *_task) -> None:
        self.finished += 1

    def __str__(self) -> str:
        return f"[{min(self.finished + 1, self.total)}/{self.total}]" if self.total > 1 else ""


def progress_line(kernel: str, devices: int, info, position: Position | None = None, budget=None) -> str:
    """`semcheck: [3/12] ring [8 devices]: 12,345 states (of 2,000,000), 4,100 states/s,
    frontier 310, depth 40, 3 s of 600 s`: a check's progress, with the run's totals and
    what is left of the check's budget."""
    at = f" {position}" if position is not None and str(position) else ""
    where = f"semcheck:{at} {kernel} [{devices} device{'s' if devices != 1 else ''}{', ' + info.part if info.part else ''}]"
    seconds = f"{info.seconds:.0f} s" + (f" of {budget.timeout:g} s" if budget is not None and budget.timeout else "")
    if info.what:  # an engine that counts no states says what it is doing
        return f"{where}: {info.what}, {seconds}"
    states = f"{info.states:,} states" + (f" (of {budget.max_states:,})" if budget is not None and budget.max_states else "")
    return (f"{where}: {states}, {info.rate:,.0f} states/s, frontier {info.frontier:,}, depth {info.depth}, "
            f"{seconds}")
