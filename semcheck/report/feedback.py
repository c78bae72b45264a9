"""What a run says on stderr while it works: one capture line per kernel script and device
count, with where its time went (capturing a script takes seconds; checking it often less)."""

from __future__ import annotations

from typing import Callable, TextIO

from semcheck.ir import display_path


def capture_line(report) -> str | None:
    """`semcheck: captured ring.py at 4 devices: 2 kernels in 3.1 s (jax import 1.0 s, script
    1.9 s, lowering 0.2 s)`; None for a model file (nothing to capture)."""
    if not report.phases and not report.failed:
        return None
    where = f"{display_path(report.path)} at {report.devices} device{'s' if report.devices != 1 else ''}"
    if report.failed:
        return f"semcheck: {where}: could not be loaded ({report.seconds:.1f} s)"
    kernels = f"{report.kernels} kernel{'s' if report.kernels != 1 else ''}"
    phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in report.phases.items())
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
