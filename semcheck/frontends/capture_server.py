"""The capture server: JAX imported once per run, a fresh isolated child per capture.

Importing JAX and Pallas costs a capture most of its CPU (0.4 s of 0.7 for a small TPU
example). A run that captures many scripts (a folder, `-j N`, the gate, pre-commit, a test
session) starts one server process, which imports JAX, Pallas and semcheck's lowering once
and starts no backend; each capture is a child it forks, which sets the device count
(`XLA_FLAGS`, read when the child's backend starts, so the fork must come first) and then
runs exactly what a capture subprocess runs (`capture.child_main`). The child is isolated as
a subprocess was: a session of its own, stdin on /dev/null, its output in files, the
requester's working directory and environment, killed with everything it started (it and
the server are subreapers, `processes.py`) when it ends, when its requester stops waiting
(closes the connection: a timeout, Ctrl-C, a killed worker), or when the server ends.

Requests come over a Unix socket in a private folder, one connection per capture, as one
line of JSON (no pickle crosses it); the server answers a line with the child's pid once it
has forked it (`start` gives the requester a `Child` to watch by it: tests/interpreter_forks.py
runs JAX's TPU interpreter this way), and a last line with its exit code. The server ends
when the process that started it closes the pipe on its stdin (exits, or is killed).

Whoever captures first in a process starts a server of its own (`_own`), unless
`SEMCHECK_CAPTURE_SERVER` names one to share (a sweep hands its server to its `-j` workers
this way, and tests/conftest.py one to the whole test session) or is `off`. A server
imported JAX under its own environment: it serves only requests whose environment agrees on
what is read at import (`_IMPORT_TIME`); any other request, and every request where no
server can run (no fork), is answered `Unavailable`, and the caller runs the capture in a
subprocess of its own, as before.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from semcheck.frontends import processes

ADDRESS_ENVIRONMENT = "SEMCHECK_CAPTURE_SERVER"
_OFF = ("off", "0", "no", "false")
# What Python, JAX, jaxlib or NumPy read when they start or are imported; a child forked
# from a server that started under other values would not run as `python FILE` does.
_IMPORT_TIME = ("JAX_", "JAXLIB_", "PYTHON", "LD_", "TF_", "OMP_", "OPENBLAS_", "MKL_", "NUMPY_")
_START_TIMEOUT = 60.0  # seconds for the server to start Python and listen
_MAX_REQUEST = 16 << 20
_CANCEL_WAIT = 5.0  # seconds a requester that stops waiting waits for its capture to be killed


class Unavailable(Exception):
    """No server can run this capture: run it in a subprocess of its own."""


def fingerprint(env: dict[str, str]) -> dict:
    """What a child forked from a server shares with the server, for a request in `env`."""
    return {"python": sys.executable, "semcheck": _package_root(),
            "env": {k: v for k, v in sorted(env.items()) if k.startswith(_IMPORT_TIME)}}


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# --- asking for a capture ------------------------------------------------------------------


def run(entry: str, argv: list[str], env: dict[str, str], *, preload: tuple[str, ...], stdout: str, stderr: str,
        limit: float, imports: tuple[str, ...] = ()) -> tuple[int, float]:
    """Run `entry` ("module:function", called with `argv`; it must end the process) in a
    child forked by the server, in `env` and this working directory; its exit code, and the
    seconds the server spent importing while this request waited. TimeoutError after
    `limit` seconds (the child is killed). A server this process starts imports `preload`
    (module names; `package.*` is every module of the package, a trailing `?` one that may
    be missing) and runs in `env`. `imports`: modules of JAX the child will import (the
    script's own imports); the server imports those it has not yet, before it forks, so
    that later children inherit them too (only `jax.*` and `jaxlib.*`: a library imports
    without side effects, a user's module might not)."""
    address = shared_address(env, preload)
    if address is None:
        raise Unavailable("no capture server")
    deadline = time.monotonic() + limit
    child = start(address, entry, argv, env, stdout=stdout, stderr=stderr, imports=imports, deadline=deadline)
    try:
        code = child.wait(deadline - time.monotonic())
    except BaseException:  # a timeout, Ctrl-C, SIGTERM: the child must be gone before this returns
        child.kill()
        raise
    return code, child.import_seconds


def start(address: str, entry: str, argv: list[str], env: dict[str, str], *, stdout: str, stderr: str,
          cwd: str | None = None, imports: tuple[str, ...] = (), deadline: float | None = None) -> Child:
    """Ask the server at `address` to fork a child that runs `entry` as `run` says (in `cwd`,
    this working directory by default), and return once it has: the child, by its pid, to
    watch, wait for and kill. Unavailable where the server cannot run it."""
    request = {"entry": entry, "argv": argv, "env": env, "cwd": cwd or os.getcwd(), "stdout": stdout,
               "stderr": stderr, "fingerprint": fingerprint(env), "imports": list(imports)}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(address)
        conn.sendall(json.dumps(request).encode() + b"\n")
    except OSError as e:
        conn.close()
        raise Unavailable(f"the capture server at {address} cannot be reached: {e}") from None
    child = Child(conn)
    try:
        started = child.answer(deadline)
    except BaseException:  # the server is still importing: the child it may fork must not outlive this
        child.kill()
        raise
    if started is None:
        child.close()
        _forget_own()
        raise Unavailable("the capture server ended")
    if "refused" in started:
        child.close()
        raise Unavailable(started["refused"])
    child.pid = int(started["pid"])
    return child


class Child:
    """A child the server forked for one request: its pid (for watching it, as /proc shows
    it), and its exit code once the server reaped it. The connection stays open while it
    runs: closing this side of it is how the server learns to kill the child."""

    def __init__(self, conn: socket.socket):
        self.conn = conn
        self.pid = 0
        self.returncode: int | None = None
        self.import_seconds = 0.0  # what the server spent importing while this request waited
        self._buffer = b""

    def wait(self, timeout: float | None = None) -> int:
        """The child's exit code; TimeoutError when it still runs after `timeout` seconds.
        Unavailable if the server ended while it ran."""
        if self.returncode is None:
            ended = self.answer(None if timeout is None else time.monotonic() + timeout)
            self.close()
            if ended is None:  # the server ended (or was killed) while the child ran
                _forget_own()
                raise Unavailable("the capture server ended")
            self.returncode = int(ended["exit"])
            self.import_seconds = float(ended.get("import_seconds", 0.0))
        return self.returncode

    def kill(self) -> None:
        """End the child and all it started (the server does, on seeing this side of the
        connection end), waiting a little for the server to say they are gone."""
        if self.returncode is not None:
            return
        try:
            self.conn.shutdown(socket.SHUT_WR)
            ended = self.answer(time.monotonic() + _CANCEL_WAIT)
        except (OSError, TimeoutError):
            ended = None
        self.close()
        self.returncode = int(ended["exit"]) if ended and "exit" in ended else -signal.SIGKILL

    def close(self) -> None:
        self.conn.close()

    def answer(self, deadline: float | None) -> dict | None:
        """The server's next line (None once it closed the connection); TimeoutError after
        `deadline` (time.monotonic(); None: no limit)."""
        while b"\n" not in self._buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            self.conn.settimeout(1.0 if left is None else min(left, 1.0))
            try:
                chunk = self.conn.recv(4096)
            except socket.timeout:
                continue
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)


def shared_address(env: dict[str, str], preload: tuple[str, ...]) -> str | None:
    """The server this process's captures go to: the one SEMCHECK_CAPTURE_SERVER names, or
    one of its own (started now if need be, in `env`, importing `preload`); None when off
    or none can start."""
    chosen = os.environ.get(ADDRESS_ENVIRONMENT, "").strip()
    if chosen:
        return None if chosen.lower() in _OFF else chosen
    server = _own(env, preload)
    return server.address if server is not None else None


class Server:
    """A server this process started, and ends (when it exits, at the latest)."""

    def __init__(self, env: dict[str, str], preload: tuple[str, ...]):
        self.folder = tempfile.mkdtemp(prefix="semcheck-captures-")
        self.address = os.path.join(self.folder, "socket")
        self.owner = os.getpid()
        debug = bool(os.environ.get("SEMCHECK_DEBUG"))
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER_MAIN, self.address, *preload], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=None if debug else subprocess.DEVNULL, start_new_session=True)
        assert self.process.stdout is not None
        ready = _read_with_timeout(self.process.stdout.fileno(), _START_TIMEOUT)
        self.process.stdout.close()
        if ready != b"ready\n":
            self.close()
            raise Unavailable("the capture server did not start")

    def close(self) -> None:
        """End the server (it kills what it still runs) and wait for it."""
        if os.getpid() != self.owner:  # a forked worker inherited this handle: not its to end
            return
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            processes.kill_tree(self.process.pid)
            self.process.wait()
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


def _read_with_timeout(fd: int, timeout: float) -> bytes:
    import select

    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 64)
        if not chunk:
            break
        data += chunk
    return data


_own_server: Server | None = None
_own_failed = False
_own_lock = threading.Lock()


def _own(env: dict[str, str], preload: tuple[str, ...]) -> Server | None:
    global _own_server, _own_failed
    if not hasattr(os, "fork"):
        return None
    with _own_lock:
        if _own_server is not None and _own_server.owner == os.getpid() and _own_server.process.poll() is None:
            return _own_server
        if _own_failed:
            return None
        try:
            _own_server = Server(env, preload)
        except (Unavailable, OSError):
            _own_failed = True  # capture in subprocesses, as without a server
            return None
        return _own_server


def _forget_own() -> None:
    global _own_server, _own_failed
    with _own_lock:
        if _own_server is not None and _own_server.process.poll() is not None:
            _own_server.close()
            _own_server, _own_failed = None, True


def close_own() -> None:
    """End the server this process started, if any (at exit at the latest)."""
    global _own_server
    with _own_lock:
        if _own_server is not None and _own_server.owner == os.getpid():
            _own_server.close()
            _own_server = None


atexit.register(close_own)


# --- the server ----------------------------------------------------------------------------

_SERVER_MAIN = ("import sys; del sys.path[0]; "
                "from semcheck.frontends.capture_server import serve; serve(sys.argv[1], sys.argv[2:])")


def serve(address: str, preload: list[str]) -> None:
    """The server process: listen at `address`, say `ready` on stdout, import `preload`, then
    fork a capture child per request until stdin closes or a signal ends it."""
    mine = fingerprint(dict(os.environ))
    processes.become_subreaper()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(128)
    server = _Serving(listener, mine)
    os.write(1, b"ready\n")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    try:
        server.preload(preload)
        server.loop()
    finally:
        server.shutdown()
        os._exit(0)


def _import(names: list[str]) -> None:
    """Import what every child would (see `run`); importing starts no JAX backend."""
    import importlib
    import pkgutil

    for name in names:
        optional = name.endswith("?")
        name = name.rstrip("?")
        try:
            if name.endswith(".*"):
                package = importlib.import_module(name[:-2])
                for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
                    importlib.import_module(module.name)
            else:
                importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a child imports it (and fails) itself
            if not optional:
                raise


def _stock_for_children() -> None:
    """Make once what every later child would make again (frontends/mlir_contexts.py); not
    before the second child, so that a run of one capture does not pay for it."""
    if "jax._src.interpreters.mlir" not in sys.modules:
        return
    try:
        from semcheck.frontends import mlir_contexts

        mlir_contexts.stock()
    except Exception:  # noqa: BLE001 - then each child makes its own, as before
        pass


class _Serving:
    def __init__(self, listener: socket.socket, mine: dict):
        self.listener, self.mine = listener, mine
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, self._stop)
        self.selector.register(listener, selectors.EVENT_READ, self._accept)
        self.selector.register(0, selectors.EVENT_READ, self._control)
        self.selector.register(self.wake_r, selectors.EVENT_READ, self._woken)
        self.reading: dict[socket.socket, bytearray] = {}
        self.running: dict[int, socket.socket] = {}  # capture child -> its requester
        self.child_of: dict[socket.socket, int] = {}
        self.stopping = False
        self.import_seconds = 0.0  # the preload's, told to the first requester, who waited for it
        self.waited: dict[int, float] = {}  # capture child -> seconds its request waited for imports
        self.tried: set[str] = set()  # names a request asked to import
        self.forked = 0

    def _stop(self, *_) -> None:
        self.stopping = True

    def preload(self, names: list[str]) -> None:
        started = time.monotonic()
        _import(names)
        self.import_seconds = time.monotonic() - started

    def loop(self) -> None:
        while not self.stopping:
            for key, _ in self.selector.select(timeout=5.0):
                key.data(key.fileobj)
            self._reap()

    def _accept(self, listener) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        conn.setblocking(False)
        self.reading[conn] = bytearray()
        self.selector.register(conn, selectors.EVENT_READ, self._readable)

    def _control(self, fd) -> None:
        try:
            data = os.read(0, 4096)
        except OSError:
            data = b""
        if not data:  # whoever started the server is gone, or done with it
            self.stopping = True

    def _woken(self, fd) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except (BlockingIOError, OSError):
            pass

    def _readable(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if conn in self.child_of:  # the requester stopped waiting: end its capture
            if not data:  # (it waits for the answer, sent once the child is reaped)
                self.selector.unregister(conn)
                processes.kill_tree(self.child_of[conn])
            return
        if not data:
            self._drop(conn)
            return
        buffer = self.reading[conn]
        buffer += data
        if len(buffer) > _MAX_REQUEST:
            self._drop(conn)
        elif b"\n" in buffer:
            del self.reading[conn]
            try:
                request = json.loads(bytes(buffer[:buffer.index(b"\n")]))
            except ValueError:
                self._drop(conn)
                return
            self._start(conn, request)

    def _start(self, conn: socket.socket, request: dict) -> None:
        if request.get("fingerprint") != self.mine:
            self._answer(conn, {"refused": "the request's environment differs from the server's where JAX reads it"})
            return
        started = time.monotonic()
        wanted = [name for name in request.get("imports", ()) if isinstance(name, str)
                  and name.startswith(("jax.", "jaxlib.")) and name not in sys.modules and name not in self.tried]
        _import([f"{name}?" for name in wanted])
        self.tried.update(wanted)  # (`from jax import numpy` names jax.numpy; `from jax import jit`, no module)
        waited = time.monotonic() - started if wanted else 0.0
        if self.forked == 1:
            _stock_for_children()
        pid = os.fork()
        if pid == 0:
            self._become_capture(request)  # never returns
        self.forked += 1
        self.waited[pid] = waited + self.import_seconds
        self.import_seconds = 0.0
        self.running[pid] = conn
        self.child_of[conn] = pid
        self._tell(conn, {"pid": pid})

    def _tell(self, conn: socket.socket, message: dict) -> None:
        """A line to a requester whose child runs (the connection stays open)."""
        try:
            conn.setblocking(True)
            conn.settimeout(5.0)
            conn.sendall(json.dumps(message).encode() + b"\n")
            conn.setblocking(False)
        except OSError:
            pass

    def _become_capture(self, request: dict) -> None:
        """In the forked child: leave the server behind and run the capture."""
        code = 70
        try:
            server = os.getppid()
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.selector.close()
            for conn in [self.listener, *self.reading, *self.child_of]:
                conn.close()
            for fd in (self.wake_r, self.wake_w):
                os.close(fd)
            os.setsid()
            processes.die_with_parent()
            if os.getppid() != server:
                os._exit(1)
            processes.become_subreaper()
            _redirect(0, os.devnull, os.O_RDONLY)
            _redirect(1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            _redirect(2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update({k: v for k, v in request["env"].items() if k != ADDRESS_ENVIRONMENT})
            import importlib

            module, function = request["entry"].split(":")
            getattr(importlib.import_module(module), function)(list(request["argv"]))  # exits
        except BaseException as e:  # noqa: BLE001 - the child must never return into the server's loop
            try:  # the capture's stderr, whose last line the requester reports
                os.write(2, f"semcheck's capture server could not run the capture: {type(e).__name__}: {e}\n".encode())
            except OSError:
                pass
        os._exit(code)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid not in self.running:
                continue  # an orphan of an ended capture, killed below
            conn = self.running.pop(pid)
            self._kill_strays()  # what the child left behind was re-parented here
            del self.child_of[conn]
            answer: dict[str, float] = {"exit": os.waitstatus_to_exitcode(status)}
            waited = self.waited.pop(pid, 0.0)
            if waited:
                answer["import_seconds"] = waited
            self._answer(conn, answer)

    def _kill_strays(self) -> None:
        for pid in processes.children(os.getpid()):
            if pid not in self.running:
                processes.kill_tree(pid)

    def _answer(self, conn: socket.socket, answer: dict) -> None:
        """The last line to a requester: the connection ends with it."""
        self._tell(conn, answer)
        self._drop(conn)

    def _drop(self, conn: socket.socket) -> None:
        self.reading.pop(conn, None)
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()

    def shutdown(self) -> None:
        """Kill every capture still running, and everything they started; reap them."""
        for pid in list(self.running):
            processes.kill_tree(pid)
        self._kill_strays()
        deadline = time.monotonic() + 10
        while self.running and time.monotonic() < deadline:
            try:
                pid, _ = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            self.running.pop(pid, None)
        try:
            os.unlink(self.listener.getsockname())
        except OSError:
            pass


def _redirect(fd: int, path: str, flags: int) -> None:
    opened = os.open(path, flags, 0o600)
    if opened != fd:
        os.dup2(opened, fd)
        os.close(opened)
