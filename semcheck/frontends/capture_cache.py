"""Captures kept on disk for a process tree that checks the same scripts many times (a test
session, CI's tiers and gate): `SEMCHECK_CAPTURE_CACHE=DIR` names the folder; unset, every
capture runs the script.

An entry is bound to what it was made from, and checked against it before anything in it
is unpickled:

* its name is a digest of the request: the script's path, the device count, the names
  `--assume` bounds, the environment's XLA_* and JAX_* variables as the capture child sees
  them and those of semcheck's own that change what a capture records (`CAPTURE_VARIABLES`),
  semcheck's version and the digest of its own source files, and JAX's and jaxlib's
  versions;
* its header repeats that request, lists every user file the capture read (the script and
  each module of the user's it imported, `sources.user_sources`) with the digest of its content,
  every environment variable the script read with the digest of its value
  (`sources.environment_reads`), and holds the digest of the pickled outcome that follows.

On load, the header must name the same request, every listed file must still have its
digest, every variable read must still have its value (as the capture child would see it),
and the outcome must have its digest; anything else (another script's entry copied
over this one, a truncated or garbage file, a file of another version) is discarded with a
one-line warning and the script is captured again. Only a capture that finished is kept (an
outcome cut short by its time depends on the machine's speed); it serves a caller with at
least the time it took. A lock per entry makes a second process that wants the same capture
wait for the first instead of running the script again.

The folder is made (with its parents) the first time it is named, as JAX's compilation
cache folder is; a path that is a file, or where no folder can be made or written, is
refused. The cache trusts whoever can write in it no more than the checks above.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import pickle
import sys

from semcheck.errors import LoadError
from semcheck.frontends.sources import file_digest, value_digest

ENVIRONMENT = "SEMCHECK_CAPTURE_CACHE"
_SEEN_PREFIXES = ("XLA_", "JAX_")
# semcheck's own variables that change what a capture child records (the error text it
# keeps). Every other SEMCHECK_* one bounds or reports the check, or belongs to whoever runs
# semcheck (a test session's folders): naming them all here, as this cache once did the other
# way round, let one new variable of the test session's split CI's captures three ways (the
# fast tier, the slow tier and the gate each captured every script again). A test holds every
# SEMCHECK_* name semcheck reads to one of the two lists.
CAPTURE_VARIABLES = frozenset({"SEMCHECK_DEBUG"})
CHECK_VARIABLES = frozenset({
    ENVIRONMENT, "SEMCHECK_TIMEOUT", "SEMCHECK_MAX_STATES", "SEMCHECK_MAX_MEMORY_MB",
    "SEMCHECK_SARIF_SCHEMA", "SEMCHECK_JAX_CACHE", "SEMCHECK_CAPTURE_SERVER", "SEMCHECK_CAPTURE_TIMEOUT",
})
_MAGIC = b"semcheck capture cache 3\n"


class CacheFolderError(LoadError):
    """SEMCHECK_CAPTURE_CACHE names no folder (the CLI says so before any work)."""


def folder_problem(value: str) -> str | None:
    """Why `value` cannot be the cache's folder, or None; a folder that is not there yet is
    made (a user naming the cache for the first time means "keep captures here")."""
    if not os.path.exists(value):
        try:
            os.makedirs(value, exist_ok=True)
        except OSError as e:
            return f"the folder {value!r} does not exist and cannot be made ({e.strerror or e})"
    if not os.path.isdir(value):
        return f"{value!r} is not a folder"
    if not os.access(value, os.W_OK | os.X_OK):
        return f"the folder {value!r} is not writable"
    return None


def capture(path: str, devices: int, *, timeout: float | None = None, assumed: tuple[str, ...] = ()):
    """`capture.capture_script(path, devices, timeout=timeout, assumed=assumed)`, from the
    cache when one is set.

    A kept capture is one that finished (it was not stopped at its time); it serves a
    caller whose time is at least what that capture took, since with that much time the
    script would have finished too."""
    from semcheck.frontends import capture as capturing

    folder = os.environ.get(ENVIRONMENT)
    if not folder:
        return capturing.capture_script(path, devices, timeout=timeout, assumed=assumed)
    problem = folder_problem(folder)
    if problem:
        raise CacheFolderError(f"{ENVIRONMENT}: {problem}")
    from semcheck.frontends.capture_process import child_environment

    env = child_environment(devices)  # as the child sees it: a parent's device count is replaced
    request = _request(os.path.abspath(path), devices, assumed, env)
    entry = os.path.join(folder, hashlib.sha256(_canonical(request)).hexdigest())
    with _locked(entry + ".lock"):
        kept = _load(entry + ".capture", request, env)
        if kept is not None and (timeout is None or timeout >= sum(kept.seconds.values())):
            return dataclasses.replace(kept, kept=True)
        outcome = capturing.capture_script(path, devices, timeout=timeout, assumed=assumed)
        if not outcome.timed_out:
            _store(entry + ".capture", request, outcome)
        return outcome


def _request(path: str, devices: int, assumed: tuple[str, ...], env: dict[str, str]) -> dict:
    seen = {k: v for k, v in sorted(env.items()) if k.startswith(_SEEN_PREFIXES) or k in CAPTURE_VARIABLES}
    return {"script": path, "devices": devices, "assumed": list(assumed), "environment": seen,
            "semcheck": _semcheck_version(), "jax": _jax_version()}


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


@functools.cache
def _semcheck_version() -> str:
    """semcheck's version and a digest of its own source: a checkout between two releases
    lowers differently from one commit to the next."""
    from semcheck.version import __version__

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for root, folders, files in os.walk(package):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                digest.update(os.path.relpath(os.path.join(root, name), package).encode() + b"\0")
                with open(os.path.join(root, name), "rb") as f:
                    digest.update(hashlib.sha256(f.read()).digest())
    return f"{__version__}+{digest.hexdigest()[:16]}"


@functools.cache
def _jax_version() -> str:
    from importlib import metadata

    versions = []
    for name in ("jax", "jaxlib"):
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"no {name}")
    return ", ".join(versions)


def _store(file: str, request: dict, outcome) -> None:
    payload = pickle.dumps(outcome)
    sources = dict(getattr(outcome, "sources", {}) or {})
    header = {"request": request, "sources": sources, "environment": dict(outcome.environment),
              "payload": hashlib.sha256(payload).hexdigest(), "size": len(payload)}
    partial = f"{file}.{os.getpid()}.tmp"
    with open(partial, "wb") as f:
        f.write(_MAGIC + _canonical(header) + b"\n" + payload)
    os.replace(partial, file)  # readers never see half a file


def _load(file: str, request: dict, env: dict[str, str]):
    """The outcome kept in `file` if it is sound and made for `request` in the capture
    child's environment `env`; else None (a bad entry is removed, with a one-line warning)."""
    try:
        with open(file, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        return _discard(file, f"it cannot be read ({e.strerror or e})")
    if not data.startswith(_MAGIC):
        return _discard(file, "it is not a capture of this semcheck")
    head, newline, payload = data[len(_MAGIC):].partition(b"\n")
    try:
        header = json.loads(head) if newline else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        return _discard(file, "its header is damaged")
    if header.get("request") != request:
        return _discard(file, "it was made for another script, device count, environment or version")
    if header.get("size") != len(payload) or header.get("payload") != hashlib.sha256(payload).hexdigest():
        return _discard(file, "its content does not match its digest (truncated or damaged)")
    sources = header.get("sources")
    if not isinstance(sources, dict) or not sources:
        return _discard(file, "it lists no source files")
    changed = [name for name, digest in sources.items() if file_digest(name) != digest]
    if changed:
        return None  # a file the script read has changed: an ordinary miss, captured again
    read = header.get("environment")
    if not isinstance(read, dict):
        return _discard(file, "its header is damaged")
    if any(value_digest(env.get(name)) != digest for name, digest in read.items()):
        return None  # a variable the script read has another value: an ordinary miss
    try:
        return pickle.loads(payload)  # verified above: written by this cache, for this request
    except Exception as e:  # noqa: BLE001 - a class that changed shape under the same version
        return _discard(file, f"it cannot be read back ({type(e).__name__})")


def _discard(file: str, why: str) -> None:
    print(f"semcheck: warning: discarded the kept capture {file}: {why}; capturing again", file=sys.stderr)
    with contextlib.suppress(OSError):
        os.unlink(file)
    return None


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
