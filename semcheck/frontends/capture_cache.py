"""Captures kept on disk for a process tree that checks the same scripts many times (a test
session): `SEMCHECK_CAPTURE_CACHE=DIR` names the folder; unset, every capture runs the script.

A capture is a fresh JAX process per (script, device count), seconds each; a test suite that
checks every example from several modules, serially and from `-j N` workers, would otherwise
run each script many times. The key is everything the capture child can see that may change
what it records: the script's path, the text of every `.py` file in its folder (a script may
import a sibling), the device count, and the environment's SEMCHECK_*, XLA_* and JAX_*
variables (but those that only bound or report the check, `_UNSEEN`). Only a capture that
finished is kept: an outcome cut short by its time depends on the machine's speed. A lock per key makes a second process that
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
# What bounds or reports the check, never what the capture child records: a test session
# (SEMCHECK_TIMEOUT out of reach) and a CI gate after it (the default budget) share captures.
_UNSEEN = frozenset({
    ENVIRONMENT, "SEMCHECK_TIMEOUT", "SEMCHECK_MAX_STATES", "SEMCHECK_MAX_MEMORY_MB",
    "SEMCHECK_SARIF_SCHEMA", "SEMCHECK_JAX_CACHE",
})


def capture(path: str, devices: int, *, timeout: float | None = None, assumed: tuple[str, ...] = ()):
    """`capture.capture_script(path, devices, timeout=timeout, assumed=assumed)`, from the
    cache when one is set (keyed by the assumed names too: they change what is captured).

    A kept capture is one that finished (it was not stopped at its time); it serves a
    caller whose time is at least what that capture took, since with that much time the
    script would have finished too."""
    from semcheck.frontends import capture as capturing

    folder = os.environ.get(ENVIRONMENT)
    if not folder:
        return capturing.capture_script(path, devices, timeout=timeout, assumed=assumed)
    key = os.path.join(folder, _key(os.path.abspath(path), devices, assumed))
    with _locked(key + ".lock"):
        if os.path.exists(key + ".pickle"):
            with open(key + ".pickle", "rb") as f:
                kept = pickle.load(f)
            if timeout is None or timeout >= sum(kept.seconds.values()):
                return kept
        outcome = capturing.capture_script(path, devices, timeout=timeout, assumed=assumed)
        if not outcome.timed_out:
            partial = f"{key}.{os.getpid()}.tmp"
            with open(partial, "wb") as f:
                pickle.dump(outcome, f)
            os.replace(partial, key + ".pickle")  # readers never see half a file
        return outcome


# What a kept capture holds: a capture made before a change of this is never served. 2: the
# protocols carry JAX's own TPU lowering's answer (lower/jax_tpu_lowering.py).
CAPTURE_FORMAT = "2"


def _key(path: str, devices: int, assumed: tuple[str, ...] = ()) -> str:
    digest = hashlib.sha256()
    folder = os.path.dirname(path)
    for part in (CAPTURE_FORMAT, path, str(devices), *assumed):
        digest.update(part.encode() + b"\0")
    for name in sorted(n for n in os.listdir(folder) if n.endswith(".py")):
        digest.update(name.encode() + b"\0")
        with open(os.path.join(folder, name), "rb") as f:
            digest.update(hashlib.sha256(f.read()).digest())
    from semcheck.frontends.capture import child_environment

    env = child_environment(devices)  # as the child sees it: a parent's device count is replaced
    for name in sorted(env):
        if name.startswith(_SEEN_PREFIXES) and name not in _UNSEEN:
            digest.update(f"{name}={env[name]}".encode() + b"\0")
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
