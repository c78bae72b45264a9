"""Colour for a text report on a terminal: verdict words, severities and fix lines. Never
in a pipe or a file (the CLI decides), never where `NO_COLOR` is set (https://no-color.org)."""

from __future__ import annotations

import os
import re
from typing import TextIO

_RESET = "\033[0m"
_STYLES = {
    "SAFE": "\033[1;32m",
    "VIOLATION": "\033[1;31m",
    "INCONCLUSIVE": "\033[1;33m",
    "ERROR": "\033[1;31m",
    "error": "\033[31m",
    "warning": "\033[33m",
    "fix": "\033[36m",
}
_VERDICT = re.compile(r"^(SAFE|VIOLATION|INCONCLUSIVE|ERROR)(?=:)")
_SEVERITY = re.compile(r"^(  )(error|warning)(?=: )")
_FIX = re.compile(r"^(    )(fix)(?=: )")


def wanted(stream: TextIO) -> bool:
    """Whether a report written to `stream` should be coloured: a terminal, and no `NO_COLOR`."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def paint_report(report: str) -> str:
    """`report` (the text format's own lines) with its verdict words, severities and fix
    labels coloured."""
    out = []
    for line in report.split("\n"):
        line = _VERDICT.sub(lambda m: _STYLES[m[1]] + m[1] + _RESET, line)
        line = _SEVERITY.sub(lambda m: m[1] + _STYLES[m[2]] + m[2] + _RESET, line)
        line = _FIX.sub(lambda m: m[1] + _STYLES["fix"] + m[2] + _RESET, line)
        out.append(line)
    return "\n".join(out)
