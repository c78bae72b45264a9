"""Frontends: turn what the user hands semcheck (a model file, a kernel script) into
Protocols. Each frontend is one module; `load` picks it by looking at the file."""

from __future__ import annotations

import ast
import os

from semcheck.ir import Loc, Protocol


class LoadError(Exception):
    """The file cannot be turned into a protocol; says why, where, and what to do."""

    def __init__(self, message: str, loc: Loc | None = None, hint: str | None = None):
        super().__init__(message)
        self.message, self.loc, self.hint = message, loc, hint
        # A kernel whose lowering stopped part-way: its protocols up to the stop (threads
        # end in an `ir.Cut`), whose prefix is still checked (semcheck/prefix.py).
        self.prefixes: list[Protocol] = []

    def __str__(self) -> str:
        where = f"{self.loc}: " if self.loc else ""
        hint = f"\n  hint: {self.hint}" if self.hint else ""
        return f"{where}{self.message}{hint}"


def discover(paths: list[str]) -> list[str]:
    """Files to check: each file as given, each directory's .py files (recursively, sorted,
    skipping private files, tests and conftest)."""
    found: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
                for name in sorted(files):
                    if name.endswith(".py") and not name.startswith(("_", "test_", "conftest")):
                        found.append(os.path.join(root, name))
        else:
            found.append(path)
    return found


def kind_of(path: str) -> str:
    """'model' for a file that defines `model(devices)`, else 'kernel'."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except FileNotFoundError:
        raise LoadError(f"no such file: {path}") from None
    except SyntaxError as e:
        raise LoadError(f"syntax error: {e.msg}", Loc(path, e.lineno or 0)) from None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "model":
            return "model"
    return "kernel"


def load(path: str, devices: int, **options) -> list[Protocol | LoadError]:
    """The protocols `path` describes at `devices` devices, with the file's own
    `semcheck.assume(...)` bounds applied to their inputs (see assumptions.py). A kernel
    script gives a LoadError in place of each kernel that cannot be lowered."""
    from semcheck import assumptions

    with assumptions.collecting() as assumed:
        items = _load_unbounded(path, devices, **options)
    protocols = [p for p in items if isinstance(p, Protocol)]
    if not protocols:
        return items
    try:
        bounded = iter(assumptions.apply_all(protocols, assumed, source=path))
    except assumptions.AssumptionError as e:
        raise LoadError(str(e), hint="semcheck.assume names an input by its Input name") from None
    return [next(bounded) if isinstance(p, Protocol) else p for p in items]


def _load_unbounded(path: str, devices: int, **options) -> list[Protocol]:
    kind = kind_of(path)
    if kind == "model":
        from semcheck.frontends import model_file

        return [model_file.load(path, devices)]
    from semcheck.frontends import kernel_script

    return kernel_script.load(path, devices, **options)
