"""Python's parser, one call at a time in this process.

CPython 3.11 before 3.11.8 keeps the AST constructor's recursion depth in state that two
threads parsing at once corrupt: `ast.parse` then fails with "SystemError: AST constructor
recursion depth mismatch" (python/cpython gh-106905). semcheck parses scripts in the
threads of a sweep (and in-process API calls from a user's threads), so every parse goes
through one lock."""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse_python(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, never beside another parse of this process."""
    with _LOCK:
        return ast.parse(source, filename=filename)
