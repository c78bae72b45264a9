"""How a capture child is run: forked by the run's capture server (capture_server.py), or
where none serves, a `python` subprocess of its own; either way in the environment
`child_environment` makes, and killed with everything it started when it ends, after its
time, or when this process stops waiting (Ctrl-C, SIGTERM). What the child does is
`capture.child_main`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

from semcheck.parsing import parse_python
from semcheck.errors import LoadError

# The child is started with `-c` rather than `-m`: `python -m` puts the working directory
# first on sys.path, so a `jax.py` there would be imported instead of JAX (`python FILE`
# puts the script's folder first, not the cwd); `-c` puts "" there, which the child removes
# before importing anything.
_CHILD = "import sys; del sys.path[0]; from semcheck.frontends.capture import child_main; child_main()"


# What the capture server imports once for all its children (frontends/capture_server.py),
# and the function each child runs: every module a TPU capture child imports after the fork
# (tests/test_capture_server.py asserts none is left), so no child pays for it again. Those
# JAX imports lazily: Mosaic TPU's lowering of pallas_call (jax/_src/pallas/pallas_call.py,
# `tpu_lowering`, JAX 0.10.2) with what it pulls in, and MLIR's builtin dialect.
# (Mosaic GPU is not among them: 0.11 CPU s that a TPU script never needs; a script that
# imports it has the server import it before its child is forked, see `_jax_imports`.)
SERVER_PRELOAD = ("jax", "jax.experimental.pallas", "jax.experimental.pallas.tpu", "jaxlib.mlir.dialects.mhlo?",
                  "jax._src.pallas.mosaic.pallas_call_registration?", "jaxlib.mlir.dialects.builtin?",
                  "jaxlib.mlir.extras.meta?", "semcheck.frontends.capture", "semcheck.lower.*", "semcheck.semantics",
                  "semcheck.semantics.ordering", "semcheck.frontends.operands", "semcheck.frontends.provenance",
                  "semcheck.frontends.placing",
                  "semcheck.passes.assumptions",
                  "semcheck.frontends.isolation", "semcheck.frontends.sources")
_ENTRY = "semcheck.frontends.capture:child_main"


def capture_server_address() -> str | None:
    """The capture server this process's captures go to (started now if need be), for
    processes that share it (a sweep's workers); None when there is none."""
    from semcheck.frontends import capture_server

    return capture_server.shared_address(child_environment(1), SERVER_PRELOAD)


def run_child(argv, env, stdout_path: str, stderr_path: str, limit: float, path: str,
                       devices: int) -> tuple[int, float]:
    """The capture child's exit code, and the seconds spent importing JAX for it apart from
    its own phases: a child forked by the capture server (capture_server.py), or where none
    can serve, a subprocess of its own. Either is killed with everything it started when it
    ends, after `limit` seconds, or when this process stops waiting (Ctrl-C, SIGTERM)."""
    from semcheck.frontends import capture_server

    try:
        return capture_server.run(_ENTRY, argv, env, preload=SERVER_PRELOAD, stdout=stdout_path,
                                  stderr=stderr_path, limit=limit, imports=_jax_imports(path))
    except capture_server.Unavailable:
        pass
    except TimeoutError:
        raise LoadError(f"running {path} with {devices} devices did not finish within {limit:.0f} s") from None
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        return _run_child([sys.executable, "-c", _CHILD, *argv], env, out, err, limit, path, devices), 0.0


def _jax_imports(path: str) -> tuple[str, ...]:
    """The modules of JAX the script's import statements name (for `from a.b import c`, also
    `a.b.c`, which may be a module)."""
    import ast

    try:
        with open(path, "rb") as f:
            tree = parse_python(f.read())
    except (OSError, SyntaxError, ValueError):
        return ()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*")
    return tuple(sorted(n for n in names if n.startswith(("jax.", "jaxlib."))))


def _run_child(command, env, out, err, limit: float, path: str, devices: int) -> int:
    """Start the capture child, wait up to `limit` seconds, and kill it and everything it
    started whatever happens."""
    from semcheck.frontends.processes import kill_tree

    proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                            start_new_session=True)
    try:
        return proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        raise LoadError(f"running {path} with {devices} devices did not finish within {limit:.0f} s") from None
    finally:
        kill_tree(proc.pid)  # the script's own children too, even when it ended normally
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def last_words(stderr_path: str) -> str:
    """The last line the child printed, unless it is part of a traceback (which says nothing
    without the rest); the whole stderr with SEMCHECK_DEBUG."""
    try:
        with open(stderr_path, encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return ""
    if os.environ.get("SEMCHECK_DEBUG"):
        return ":\n" + "\n".join(lines[-40:])
    if not lines or lines[-1].startswith((" ", "Traceback")):
        return ""
    return f"; its last words: {lines[-1][:200]}"


def child_environment(devices: int) -> dict[str, str]:
    """The environment the capture child runs in: this one, with semcheck importable, the
    device count set and JAX on the CPU unless told otherwise."""
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [env.get("PYTHONPATH")] if p])
    env["XLA_FLAGS"] = with_device_count(env.get("XLA_FLAGS", ""), devices)
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def with_device_count(flags: str, devices: int) -> str:
    flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "", flags).strip()
    return f"{flags} --xla_force_host_platform_device_count={devices}".strip()
