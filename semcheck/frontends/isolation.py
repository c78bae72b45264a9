"""Run a user's file where nothing it does can end semcheck or change its exit code.

A model file is Python that semcheck imports and calls. Imported in-process, its
`sys.exit(0)`, `os._exit(0)`, a `KeyboardInterrupt` it raises, or an `os.fork()` would end
(or duplicate) semcheck itself: a gate that exits 0 with no report. So each load runs in a
forked child (`call_isolated`): the fork costs a millisecond or two of CPU, since the child
inherits semcheck already imported, and the child's whole session is killed when the call
returns, so processes the file starts die with it (and those it started in sessions of
their own, while the child lives). The child's answer comes back pickled through a pipe,
read as it is written; a child that dies without answering (a signal, a real `os._exit`)
is an error naming how it ended. Ctrl-C and SIGTERM reach only semcheck (the
child has its own session), which then kills the child's session.

Where `os.fork` does not exist (Windows), the call runs in-process and catches
BaseException: `sys.exit` and `KeyboardInterrupt` are contained, `os._exit` is not.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
import traceback
from typing import Callable, TypeVar

from semcheck.errors import LoadError, LoadOutOfMemory, LoadTimedOut
from semcheck.frontends.processes import kill_descendants
from semcheck.ir import Loc
from semcheck.records import record

DEFAULT_TIMEOUT = 600.0  # seconds a model file may take to load

T = TypeVar("T")


@record(frozen=True)
class _Failed:
    """A failure in the child, in picklable form."""

    message: str
    file: str = ""
    line: int = 0
    hint: str | None = None

    def error(self) -> LoadError:
        return LoadError(self.message, Loc(self.file, self.line) if self.file else None, self.hint)


class _HardExit(BaseException):
    """`os._exit(code)` called by the user's code in the child, turned into an exception so
    that the call's failure can name the line."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def call_isolated(fn: Callable[..., T], *args, user_file: str, what: str, timeout: float | None = None,
                  memory_mb: float | None = None) -> T:
    """`fn(*args)` in a forked child; its value (picklable) or the LoadError it raised.

    Anything else the user's code does that would end a process (SystemExit,
    KeyboardInterrupt, `os._exit`, a signal, a fork) becomes a LoadError about `what`
    ("importing the model", ...) located at `user_file`'s line where known. A child whose
    resident size passes `memory_mb` is stopped (LoadOutOfMemory), as one that runs past
    `timeout` is (LoadTimedOut): left alone, a model too large to build grew until the
    machine ran out of memory and the child died of a signal."""
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    if not hasattr(os, "fork"):
        return _unwrap(_answer(fn, args, user_file, what), user_file, what)
    for stream in (sys.stdout, sys.stderr):  # or the child would print the parent's buffer again
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed or odd stream must not stop the load
            pass
    # The answer comes back through a pipe, read as it is written; its end (every copy of its
    # writing side closed) says the child is done.
    answers, answer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(answers)
        _child(fn, args, user_file, what, answer)
    os.close(answer)
    reaped = False
    try:
        data = _read_answer(answers, timeout, user_file, what, pid, memory_mb)
        _, status = os.waitpid(pid, 0)
        reaped = True
        if not data:
            raise LoadError(f"{what} ended the process ({_how_it_ended(status)}) before it returned",
                            Loc(user_file, 0))
        return _unwrap(pickle.loads(data), user_file, what)
    finally:
        os.close(answers)
        if not reaped:  # a timeout, Ctrl-C, SIGTERM: it may not even have reached setsid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        kill_group(pid)  # what the user's code started in the child's session
        if not reaped:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


# How often the parent reads a child's resident size while it waits for its answer (as the
# budget's own memory checks: engines/budget.py, Monitor.CHECK_INTERVAL).
MEMORY_CHECK_INTERVAL = 0.05


def _read_answer(fd: int, timeout: float, user_file: str, what: str, pid: int = 0,
                 memory_mb: float | None = None) -> bytes:
    """Everything the child writes to `fd` until it closes it, within `timeout` seconds and,
    with `memory_mb`, while child `pid` stays within that resident size."""
    import select

    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        wait = left if memory_mb is None else min(left, MEMORY_CHECK_INTERVAL)
        ready = left > 0 and select.select([fd], [], [], max(wait, 0))[0]
        if not ready and memory_mb is not None and _resident_mb(pid) > memory_mb:
            raise LoadOutOfMemory(f"{what} grew past {memory_mb:,.0f} MB, so semcheck stopped it",
                                  Loc(user_file, 0), limit_mb=memory_mb)
        if not ready and time.monotonic() >= deadline:
            raise LoadTimedOut(f"{what} did not finish within {timeout:g} s, so semcheck stopped it",
                               Loc(user_file, 0))
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _resident_mb(pid: int) -> float:
    """Resident memory of process `pid` (Linux); 0 where unknown or gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def _child(fn, args, user_file, what, answer_fd: int) -> None:
    real_exit = os._exit
    code = 0
    try:
        os.setsid()  # its own session: a terminal's Ctrl-C is semcheck's to handle
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        me = os.getpid()
        end_with_parent(os.getppid(), real_exit)

        def refuse_exit(status=0):
            raise _HardExit(status)

        os._exit = refuse_exit
        answer = _answer(fn, args, user_file, what)
        os._exit = real_exit
        if os.getpid() != me:  # a process the user's code forked: only the child answers
            real_exit(0)
        try:
            data = pickle.dumps(answer)
        except Exception as e:  # noqa: BLE001 - a value that cannot cross the boundary is the file's error
            data = pickle.dumps(_Failed(f"{what} returned something semcheck cannot use ({type(e).__name__}: {e})",
                                        user_file))
        with open(answer_fd, "wb", closefd=True) as f:
            f.write(data)
        kill_descendants()  # what the user's code started outside its session (a daemon)
    except BaseException:  # noqa: BLE001 - the child must end here, whatever happened
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        real_exit(code)


def end_with_parent(parent: int, real_exit) -> None:
    """If semcheck dies without killing this child (SIGKILL, or SIGTERM outside the CLI),
    the child's session ends too: a daemon thread watches the parent. (The capture child
    and a model file's child both use it.)"""
    import threading

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        try:
            kill_descendants()
            os.killpg(0, signal.SIGKILL)
        finally:
            real_exit(1)

    threading.Thread(target=watch, name="semcheck-parent-watch", daemon=True).start()


def _answer(fn, args, user_file, what):
    """("ok", value) or a _Failed: fn's outcome in a form that crosses a process boundary."""
    try:
        return ("ok", fn(*args))
    except LoadError as e:
        return _Failed(e.message, e.loc.file if e.loc else "", e.loc.line if e.loc else 0, e.hint)
    except BaseException as e:  # noqa: BLE001 - whatever the user's file does is reported
        loc = user_frame(e, user_file)
        return _Failed(f"{what} {_ended_by(e)}", loc.file if loc else user_file, loc.line if loc else 0,
                       "semcheck loads a model file by calling model(devices); it must return a Protocol, "
                       "not exit")


def _ended_by(e: BaseException) -> str:
    if isinstance(e, _HardExit):
        return f"called os._exit({e.code!r})"
    if isinstance(e, SystemExit):
        return f"exited (SystemExit({e.code!r}), e.g. sys.exit)"
    if isinstance(e, KeyboardInterrupt):
        return "raised KeyboardInterrupt"
    return f"raised {type(e).__name__}: {e}"


def _unwrap(answer, user_file, what):
    if isinstance(answer, _Failed):
        raise answer.error()
    kind, value = answer
    return value


def kill_group(leader: int) -> None:
    """SIGKILL every process of the group (session) that `leader` started; none left is fine."""
    try:
        os.killpg(leader, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _how_it_ended(status: int) -> str:
    code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def user_frame(error: BaseException, path: str) -> Loc | None:
    """The deepest frame of the traceback that lies in the user's file."""
    target = os.path.abspath(path)
    loc = None
    for frame in traceback.extract_tb(error.__traceback__):
        if os.path.abspath(frame.filename) == target:
            loc = Loc(frame.filename, frame.lineno or 0)
    return loc
