"""Frontends: turn what the user hands semcheck (a model file, a kernel script) into
Protocols. Each frontend is one module; `load` picks it by reading the file (`classify`),
and `walk` decides which files of a folder are the user's kernels at all (`discovery.py`).

Every user file runs where nothing it does can end semcheck: model files in a forked child
(`isolation.py`), kernel scripts in the capture subprocess (`frontends/capture.py`)."""

from __future__ import annotations

import ast
import enum
import os
from typing import TYPE_CHECKING

from semcheck.parsing import parse_python
from semcheck.errors import FileError, LoadError, NothingToCheck
from semcheck.frontends.discovery import Skipped, Walk, discover, walk
from semcheck.ir import Loc, Protocol
from semcheck.records import record

if TYPE_CHECKING:
    from semcheck.frontends.kernel_script import OnPhases


class FileKind(str, enum.Enum):
    MODEL = "model"
    KERNEL = "kernel"


@record(frozen=True)
class Classification:
    kind: FileKind
    reading: str | None = None  # why, when the file could be read either way (a result note)


def read_source(path: str) -> ast.Module:
    """The file parsed as Python reads it: bytes, so a BOM or a coding cookie is honoured."""
    import stat

    try:
        # Non-blocking, so that a named pipe with no writer is not waited on for ever.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise FileError(f"no such file: {path}") from None
    except OSError as e:
        raise FileError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise FileError(f"{path} is not a regular file (it is {not_regular(mode)})", Loc(path, 0))
            source = f.read()
    except OSError as e:
        raise FileError(f"cannot read {path}: {e.strerror or e}") from None
    if b"\0" in source:
        raise FileError(f"{path} is not a Python source file (it contains null bytes)", Loc(path, 0))
    _check_encoding(path, source)
    try:
        return parse_python(source, path)
    except SyntaxError as e:
        raise FileError(f"syntax error: {e.msg}", Loc(path, e.lineno or 0)) from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise FileError(f"{path} cannot be parsed as Python: {e}", Loc(path, 0)) from None


def not_regular(mode: int) -> str:
    """What a path that is not a regular file is, in words."""
    import stat

    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "not a regular file"


def _check_encoding(path: str, source: bytes) -> None:
    """Decode as `python FILE` does: UTF-8 unless a BOM or a coding cookie says otherwise,
    strictly (ast.parse and importlib let undecodable bytes in comments pass; Python's own
    command line does not)."""
    import io
    import tokenize

    hint = ("save it as UTF-8, or declare its encoding on its first line "
            "(`# -*- coding: latin-1 -*-`), as Python itself requires")
    not_utf8 = f"{path} is not valid UTF-8 and declares no other encoding"
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    except SyntaxError as e:  # undecodable first lines, or a cookie naming no known codec
        message = not_utf8 if "invalid or missing" in str(e) else f"{path}: {e}"
        raise FileError(message, Loc(path, 1), hint=hint) from None
    try:
        source.decode(encoding)
    except UnicodeDecodeError as e:
        line = source[: e.start].count(b"\n") + 1
        message = not_utf8 if encoding == "utf-8" else f"{path} is not valid {encoding}, as it declares"
        raise FileError(message, Loc(path, line), hint=hint) from None


def classify(path: str) -> Classification:
    """A model file defines `model(devices)` and builds its Protocol with semcheck's builder;
    a kernel script calls Pallas through JAX. A file that defines `model` and imports JAX but
    not semcheck's builder is a kernel script (its `model` is some other function)."""
    tree = read_source(path)
    defines_model = any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "model" for node in tree.body
    )
    if not defines_model:
        return Classification(FileKind.KERNEL)
    modules = set(_imported_modules(tree))
    imports_jax = any(m == "jax" or m.startswith("jax.") for m in modules)
    imports_builder = any(m == "semcheck" or m.startswith("semcheck.") for m in modules)
    if imports_jax and not imports_builder:
        return Classification(
            FileKind.KERNEL,
            "the file defines a top-level model() but imports JAX and not semcheck's builder, so "
            "it was checked as a kernel script (its model() was not called)",
        )
    if imports_jax:
        return Classification(
            FileKind.MODEL,
            "the file imports JAX but defines model() and imports semcheck, so it was checked as a "
            "model file (its model() was called; no kernel was captured)",
        )
    return Classification(FileKind.MODEL)


def _imported_modules(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module


def kind_of(path: str) -> str:
    """'model' for a model file, else 'kernel' (see `classify`)."""
    return classify(path).kind.value


def load(path: str, devices: int, *, classification: Classification | None = None,
         capture_timeout: float | None = None, assumed: tuple[str, ...] = (),
         on_phases: OnPhases | None = None, memory_mb: float | None = None) -> list[Protocol | LoadError]:
    """The protocols `path` describes at `devices` devices, with the file's own
    `semcheck.assume(...)` bounds applied to their inputs (see passes/assumptions.py). A kernel
    script gives a LoadError in place of each kernel that cannot be lowered.
    `classification`: how the file reads, when the caller knows (else `classify`);
    `capture_timeout`: seconds the file may take to load; `memory_mb`: the resident size a
    model file's child may reach; `assumed` and `on_phases`: a kernel script's
    (`kernel_script.load`)."""
    from semcheck.passes import assumptions

    classification = classification or classify(path)
    with assumptions.collecting() as made:
        items = _load_unbounded(path, devices, classification, capture_timeout, assumed, on_phases, memory_mb)
    if classification.reading:
        items = [_with_note(p, classification.reading) if isinstance(p, Protocol) else p for p in items]
    protocols = [p for p in items if isinstance(p, Protocol)]
    if not protocols:
        return items
    try:
        bounded = iter(assumptions.apply_all(protocols, made, source=path))
    except assumptions.AssumptionError as e:
        raise LoadError(str(e), hint="semcheck.assume names an input by its Input name") from None
    return [next(bounded) if isinstance(p, Protocol) else p for p in items]


def _with_note(protocol: Protocol, note: str) -> Protocol:
    import dataclasses

    return dataclasses.replace(protocol, notes=protocol.notes + (note,))


def _load_unbounded(path: str, devices: int, classification: Classification, capture_timeout: float | None,
                    assumed: tuple[str, ...], on_phases: OnPhases | None,
                    memory_mb: float | None) -> list[Protocol | LoadError]:
    if classification.kind is FileKind.MODEL:
        from semcheck.frontends import model_file

        return [model_file.load(path, devices, timeout=capture_timeout, memory_mb=memory_mb)]
    from semcheck.frontends import kernel_script

    return kernel_script.load(path, devices, capture_timeout=capture_timeout, assumed=assumed, on_phases=on_phases)


__all__ = [
    "Classification", "FileError", "FileKind", "LoadError", "NothingToCheck", "Skipped", "Walk",
    "classify", "discover", "kind_of", "load", "read_source", "walk",
]
