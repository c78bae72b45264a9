"""The user's own files a capture read: what a kept capture is bound to (capture_cache.py).

The script, and every module of the user's that the script imported (a sibling helper, a
module of the user's project); not the standard library, installed packages (their
versions bind the entry instead) or semcheck itself."""

from __future__ import annotations

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
