"""What a capture read besides JAX: what a kept capture is bound to (capture_cache.py).

The script, and every module of the user's that the script imported (a sibling helper, a
module of the user's project); not the standard library, installed packages (their
versions bind the entry instead) or semcheck itself. And every environment variable read
while the script ran (`os.environ[...]`, `os.getenv`, `in os.environ`; all of them if it
went through the whole environment): a script that picks its sizes or its kernel by a
variable is another capture when that variable changes. Values are kept as digests, so a
token in the environment is never written to the cache."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys


def file_digest(path: str) -> str | None:
    """The SHA-256 of the file's content, or None if it cannot be read."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def user_sources(script: str) -> dict[str, str]:
    """The digest of `script` and of every user module this process has imported (in the
    capture child, after the script ran)."""
    import sysconfig

    installed = tuple({os.path.abspath(sysconfig.get_path(kind)) + os.sep
                       for kind in ("stdlib", "platstdlib", "purelib", "platlib")}
                      | {os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep})  # and semcheck
    files = {os.path.abspath(script)}
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if isinstance(name, str) and name.endswith(".py") and not os.path.abspath(name).startswith(installed):
            files.add(os.path.abspath(name))
    return {name: digest for name in sorted(files) if (digest := file_digest(name)) is not None}


def value_digest(value: str | None) -> str | None:
    """What a kept capture holds of a variable's value (None: the variable was not set)."""
    return None if value is None else hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()


class EnvironmentReads:
    """The variables read from `os.environ` while `environment_reads` was recording."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.everything = False  # the whole environment was gone through (copied, listed)

    def digests(self) -> dict[str, str | None]:
        names = set(os.environ) if self.everything else set(self.names)
        return {name: value_digest(os.environ.get(name)) for name in sorted(names)}


@contextlib.contextmanager
def environment_reads():
    """Record which variables are read from `os.environ` in this block (the capture child
    runs the user's script inside it; the child is a process of its own, so patching the
    environment's class is seen by nothing else)."""
    environ_type = type(os.environ)
    reads = EnvironmentReads()
    getitem, iterate = environ_type.__getitem__, environ_type.__iter__

    def recorded_getitem(self, key):
        if self is os.environ and isinstance(key, str):  # (os.get_exec_path also tries b"PATH")
            reads.names.add(key)
        return getitem(self, key)

    def recorded_iter(self):
        if self is os.environ:
            reads.everything = True
        return iterate(self)

    environ_type.__getitem__ = recorded_getitem  # type: ignore[method-assign]
    environ_type.__iter__ = recorded_iter  # type: ignore[method-assign]
    try:
        yield reads
    finally:
        environ_type.__getitem__ = getitem  # type: ignore[method-assign]
        environ_type.__iter__ = iterate  # type: ignore[method-assign]
