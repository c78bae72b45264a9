"""The `semcheck` command: its parser and run loop (`command.py`), the validation of its
arguments (`options.py`), the project defaults of `[tool.semcheck]` (`config.py`), its CI-gate
flags (`gate.py`) and how a signal ends a run (`interrupts.py`)."""

from __future__ import annotations

import gc
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run `semcheck ARGV` (the process's arguments when None); the exit code."""
    if "semcheck.cli.command" not in sys.modules:
        _import_quietly()
    from semcheck.cli import command

    return command.main(argv)


def _import_quietly() -> None:
    """Import the command's modules (about 200 on a model file's path) with Python's cyclic
    garbage collector paused, then freeze what they made out of its later collections. What
    an import makes (modules, classes, functions, tables) lives as long as the process, so a
    collection during the imports is wasted work, and so is scanning it all again in the
    next full collection and at exit: 25 M of the 385 M instructions a model file's process
    took (benchmarks/startup.py). Pausing alone saves nothing: the first collection after
    it scans the same objects. A forked child (a model file's load) then also leaves their
    pages unwritten by its collections."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        import semcheck.cli.command  # noqa: F401
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
