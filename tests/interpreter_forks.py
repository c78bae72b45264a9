"""Interpreter runs forked from one process that imported JAX once.

Each run of JAX's TPU interpreter (tests/test_tpu_differential.py) was a fresh
`python -c RUNNER`, of which importing JAX and Pallas took 0.8 of its 1.4 CPU seconds on
a small example. A test process now starts one server that imports them and starts no
backend; each run is a child it forks, which sets the device count (`XLA_FLAGS`, read when
the child's backend starts) and runs exactly what `python -c RUNNER` runs, in a session of
its own, its output in the requester's files, with the requester's working directory. The
requester watches the child by its pid as it watched a subprocess (its CPU time, /proc), and
kills it by that pid; the server reaps it and answers its exit code. semcheck's own capture
server (semcheck/frontends/capture_server.py) does the same for captures.

Requests and answers are lines of JSON on the server's stdin and stdout; the server ends
when its stdin closes (the test process exits)."""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import threading

SERVER = r"""
import json, os, sys, threading, traceback
from jax.experimental.pallas import tpu as pltpu  # imported once, before any fork
from jax._src.pallas.mosaic.interpret import interpret_pallas_call, shared_memory

answers = threading.Lock()

def answer(**fields):
    with answers:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

def child(request):
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, name in ((1, request["stdout"]), (2, request["stderr"])):
        os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-c", *request["argv"]]
    code = 0
    try:
        exec(compile(request["runner"], "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    # and ends as Python does: it waits for the threads that are not daemons (a kernel's
    # device thread stuck in a wait keeps `python -c` from exiting: that is how a hang
    # shows), then runs the exit functions (JAX's included)
    threading._shutdown()
    import atexit
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

live = set()

def reap(request_id, pid):
    _, status = os.waitpid(pid, 0)
    live.discard(pid)
    answer(id=request_id, code=os.waitstatus_to_exitcode(status))

for line in sys.stdin:
    request = json.loads(line)
    with answers:  # no reaper is half way through writing to stdout when the child is forked
        pid = os.fork()
        if pid == 0:
            child(request)
        live.add(pid)
    answer(id=request["id"], pid=pid)
    threading.Thread(target=reap, args=(request["id"], pid), daemon=True).start()
for pid in list(live):  # the test process is gone: so are its runs (a hung one would wait for ever)
    try:
        os.killpg(pid, 9)
    except ProcessLookupError:
        pass
"""

_lock = threading.Lock()
_server: subprocess.Popen | None = None
_waiting: dict[int, queue.Queue] = {}
_next_id = [0]


class Child:
    """A forked run: its pid, and its exit code once the server reaped it."""

    def __init__(self, pid: int, answers: queue.Queue):
        self.pid = pid
        self._answers = answers
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                self.returncode = self._answers.get(timeout=timeout)["code"]
            except queue.Empty:
                raise subprocess.TimeoutExpired("interpreter run", timeout) from None
        return self.returncode

    def kill(self) -> None:
        import signal

        try:
            os.killpg(self.pid, signal.SIGKILL)  # the child leads a session of its own
        except ProcessLookupError:
            pass


def start(runner: str, argv: list[str], env: dict[str, str], cwd: str, stdout: str, stderr: str) -> Child:
    """Fork a run of `runner` (as `python -c runner *argv`) in `env` (whose XLA_FLAGS the
    child's backend reads), writing its output into the files `stdout` and `stderr`."""
    with _lock:
        answers = _answers_of(_next_id[0], env)
        request_id, _next_id[0] = _next_id[0], _next_id[0] + 1
        assert _server is not None and _server.stdin is not None
        _server.stdin.write(json.dumps({"id": request_id, "runner": runner, "argv": argv, "env": env, "cwd": cwd,
                                        "stdout": stdout, "stderr": stderr}) + "\n")
        _server.stdin.flush()
    return Child(answers.get()["pid"], answers)


def _answers_of(request_id: int, env: dict[str, str]) -> queue.Queue:
    global _server
    if _server is None or _server.poll() is not None:
        server_env = {k: v for k, v in env.items() if k != "XLA_FLAGS"}
        _server = subprocess.Popen([sys.executable, "-c", SERVER], env=server_env, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, bufsize=1)
        threading.Thread(target=_dispatch, args=(_server,), daemon=True).start()
        atexit.register(_close, _server)
    answers: queue.Queue = queue.Queue()
    _waiting[request_id] = answers
    return answers


def _dispatch(server: subprocess.Popen) -> None:
    assert server.stdout is not None
    for line in server.stdout:
        message = json.loads(line)
        _waiting[message["id"]].put(message)


def _close(server: subprocess.Popen) -> None:
    """End the server with the test process: it kills what runs still live, and is reaped
    here (so its CPU time, its runs' included, counts as this process's)."""
    assert server.stdin is not None
    server.stdin.close()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
