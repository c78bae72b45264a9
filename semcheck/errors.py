"""The errors every layer may raise: the bottom of the import order (it imports only `ir`).

`LoadError`: a user's file cannot be turned into a protocol (frontends and lowering).
`ProtocolError`: a protocol is malformed (the semantics finds it while building a System).
"""

from __future__ import annotations

from semcheck.ir import Loc, Protocol


class LoadError(Exception):
    """The file cannot be turned into a protocol; says why, where, and what to do."""

    def __init__(self, message: str, loc: Loc | None = None, hint: str | None = None):
        super().__init__(message)
        self.message, self.loc, self.hint = message, loc, hint
        # A kernel whose lowering stopped part-way: its protocols up to the stop (threads
        # end in an `ir.Cut`), whose prefix is still checked (semcheck/run/prefix.py).
        self.prefixes: list[Protocol] = []
        self.kernel: str | None = None  # the kernel it is about, when a script had several
        # The devices of that kernel's mesh, when the capture knew it (a smaller mesh than
        # --devices checks fewer devices than were asked for).
        self.devices: int | None = None

    def __str__(self) -> str:
        where = f"{self.loc}: " if self.loc else ""
        hint = f"\n  hint: {self.hint}" if self.hint else ""
        return f"{where}{self.message}{hint}"


class ProtocolError(Exception):
    """The protocol is malformed (undeclared semaphore, undefined register, bad jump)."""

    def __init__(self, message: str, loc: Loc | None = None):
        super().__init__(f"{loc}: {message}" if loc else message)
        self.loc = loc


class FileError(LoadError):
    """The file itself cannot be read as Python (missing, binary, badly encoded, a syntax
    error): one error for the file, whatever the device count."""


class LoadTimedOut(LoadError):
    """Loading the file (a model file's `model()`) did not finish in the time it was given."""


class LoadOutOfMemory(LoadError):
    """Loading the file (a model file's `model()`, in its own process) grew past the memory it
    was given."""

    def __init__(self, message: str, loc: Loc | None = None, *, limit_mb: float):
        super().__init__(message, loc)
        self.limit_mb = limit_mb


class NothingToCheck(LoadError):
    """A kernel script ran to completion and compiled no kernel (a helper module, a test
    file): skipped with a note rather than reported as an error."""

