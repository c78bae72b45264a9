"""Captures kept on disk for a process tree that checks the same scripts many times (a test
session): `SEMCHECK_CAPTURE_CACHE=DIR` names the folder; unset, every capture runs the script.

A capture is a fresh JAX process per (script, device count), seconds each; a test suite that
checks every example from several modules, serially and from `-j N` workers, would otherwise
run each script many times. The key is everything the capture child can see that may change
what it records: the script's path, the text of every `.py` file in its folder (a script may
import a sibling), the device count, and the environment's SEMCHECK_*, XLA_* and JAX_*
variables. Only a capture given the full default time is kept: an outcome cut short by a
smaller budget depends on the machine's speed. A lock per key makes a second process that
wants the same capture wait for the first instead of running the script again.

Meant for suites over files that do not change while they run; the folder is the caller's to
create and remove (tests/conftest.py makes one per session)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle

ENVIRONMENT = "SEMCHECK_CAPTURE_CACHE"
_SEEN_PREFIXES = ("SEMCHECK_", "XLA_", "JAX_")


def capture(path: str, devices: int, *, timeout: float | None = None, assumed: tuple[str, ...] = ()):
    """`capture.capture_script(path, devices, timeout=timeout, assumed=assumed)`, from the
    cache when one is set (keyed by the assumed names too: they change what is captured)."""
    from semcheck.frontends import capture as capturing

    folder = os.environ.get(ENVIRONMENT)
    full_time = timeout is None or timeout >= capturing.DEFAULT_TIMEOUT
    if not folder or not full_time:
        return capturing.capture_script(path, devices, timeout=timeout, assumed=assumed)
    key = os.path.join(folder, _key(os.path.abspath(path), devices, assumed))
    with _locked(key + ".lock"):
        if os.path.exists(key + ".pickle"):
            with open(key + ".pickle", "rb") as f:
                return pickle.load(f)
        outcome = capturing.capture_script(path, devices, timeout=timeout, assumed=assumed)
        if not outcome.timed_out:
            partial = f"{key}.{os.getpid()}.tmp"
            with open(partial, "wb") as f:
                pickle.dump(outcome, f)
            os.replace(partial, key + ".pickle")  # readers never see half a file
        return outcome


def _key(path: str, devices: int, assumed: tuple[str, ...] = ()) -> str:
    digest = hashlib.sha256()
    folder = os.path.dirname(path)
    for part in (path, str(devices), *assumed):
        digest.update(part.encode() + b"\0")
    for name in sorted(n for n in os.listdir(folder) if n.endswith(".py")):
        digest.update(name.encode() + b"\0")
        with open(os.path.join(folder, name), "rb") as f:
            digest.update(hashlib.sha256(f.read()).digest())
    for name in sorted(os.environ):
        if name.startswith(_SEEN_PREFIXES) and name != ENVIRONMENT:
            digest.update(f"{name}={os.environ[name]}".encode() + b"\0")
    return digest.hexdigest()


@contextlib.contextmanager
def _locked(lock_path: str):
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no advisory locks: two processes may both capture
        yield
        return
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
