"""The `semcheck` command: its parser and run loop (`command.py`), the validation of its
arguments (`options.py`), the project defaults of `[tool.semcheck]` (`config.py`), its CI-gate
flags (`gate.py`) and how a signal ends a run (`interrupts.py`)."""

from semcheck.cli.command import main

__all__ = ["main"]
