"""Interpreter runs forked from one process that imported JAX once.

Each run of JAX's TPU interpreter (tests/test_tpu_differential.py) was a fresh
`python -c RUNNER`, of which importing JAX and Pallas took 0.8 of its 1.4 CPU seconds on
a small example. A test process now starts one semcheck capture server
(semcheck/frontends/capture_server.py) that imports them and starts no backend; each run is a
child it forks, which sets the device count (`XLA_FLAGS`, read when the child's backend
starts) and runs what `python -c RUNNER` runs (`run_source`), isolated as a capture is. The
requester watches the child by its pid as it watched a subprocess (its CPU time, /proc), and
kills it through the server, which kills it with all it started.

The server is the test process's own, not the session's capture server: it runs in the
interpreter runs' environment (JAX_PLATFORMS, PYTHONPATH, which the capture server compares
with each request's), and ends with the test process."""

from __future__ import annotations

import atexit
import json
import os
import threading

from semcheck.frontends import capture_server

# What every interpreter run imports (imported once, by the server, before any fork).
PRELOAD = (
    "jax.experimental.pallas.tpu",
    "jax._src.pallas.mosaic.interpret.interpret_pallas_call",
    "jax._src.pallas.mosaic.interpret.shared_memory",
)
_ENTRY = "tests.interpreter_forks:run_source"

_lock = threading.Lock()
_servers: dict[str, capture_server.Server] = {}  # by the environment they imported JAX in

Child = capture_server.Child


def start(runner: str, argv: list[str], env: dict[str, str], cwd: str, stdout: str, stderr: str) -> Child:
    """Fork a run of `runner` (as `python -c runner *argv`) in `env` (whose XLA_FLAGS the
    child's backend reads; its PYTHONPATH must reach this repository), writing its output
    into the files `stdout` and `stderr`."""
    return capture_server.start(_address(env), _ENTRY, [runner, *argv], env, stdout=stdout, stderr=stderr, cwd=cwd)


def _address(env: dict[str, str]) -> str:
    """A server that imported JAX under `env`'s values of what JAX reads at import (the
    capture server refuses other requests): a test of this process may change one."""
    server_env = {k: v for k, v in env.items() if k not in ("XLA_FLAGS", capture_server.ADDRESS_ENVIRONMENT)}
    key = json.dumps(capture_server.fingerprint(server_env))
    with _lock:
        server = _servers.get(key)
        if server is None or server.process.poll() is not None:
            server = _servers[key] = capture_server.Server(server_env, PRELOAD)
            atexit.register(server.close)  # it kills what runs still live (a hung one would wait for ever)
        return server.address


def run_source(argv: list[str]) -> None:
    """In the forked child: run `argv[0]` as `python -c argv[0] *argv[1:]` runs it, and end
    as Python does: wait for the threads that are not daemons (a kernel's device thread
    stuck in a wait keeps `python -c` from exiting: that is how a hang shows), then run the
    exit functions (JAX's included)."""
    import sys
    import traceback

    runner, sys.argv = argv[0], ["-c", *argv[1:]]
    sys.path.insert(0, "")  # as `python -c` has it: the script's folder (the cwd) imports its neighbours
    code = 0
    try:
        exec(compile(runner, "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported as `python -c` reports it
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
