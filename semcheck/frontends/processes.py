"""The processes a user's file starts, found and ended: nothing a checked file starts may
outlive its check.

A process group (a session) holds what a script starts plainly; a process that leaves it
(`Popen(..., start_new_session=True)`, a daemon's double fork) is still a descendant, and
once its parent is gone it is re-parented to the nearest *subreaper* among its ancestors.
So every process that runs a user's file makes itself a subreaper (`become_subreaper`), and
whoever ends it ends its whole tree (`kill_tree`): every descendant, found through /proc,
frozen before it is killed so that none can fork past the walk.

Linux only (prctl and /proc); elsewhere the process group is all there is to kill.
"""

from __future__ import annotations

import os
import signal

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def become_subreaper() -> bool:
    """Orphaned descendants of this process are re-parented to it, not to init."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """`sig` is sent to this process when the thread that forked it ends (for a process
    forked by a single-threaded server: when the server ends)."""
    return _prctl(_PR_SET_PDEATHSIG, sig)


def children(pid: int) -> list[int]:
    """The direct children of `pid` (every thread's)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(p) for p in f.read().split()]
        except OSError:
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, parents before their children."""
    found: list[int] = []
    todo = children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo += children(child)
    return found


def kill_tree(root: int, *, include_root: bool = True) -> None:
    """SIGKILL `root`'s process group and every descendant of `root` (frozen first, until a
    walk finds none new), then `root` itself. None left, or not ours, is fine."""
    frozen: set[int] = set()
    for _ in range(100):  # a fork bomb cannot keep this going: a stopped process forks no more
        new = [p for p in descendants(root) if p not in frozen]
        if not new:
            break
        for pid in new:
            _send(pid, signal.SIGSTOP)
        frozen.update(new)
    try:
        os.killpg(root, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in frozen:
        _send(pid, signal.SIGKILL)
    if include_root:
        _send(root, signal.SIGKILL)
    # A SIGKILL is delivered when its target next runs: on a loaded machine a process can
    # still be running for a while after the kill returns. Whoever kills a tree is told it
    # is gone, so wait (briefly) until each has exited, as a zombie or reaped.
    _wait_gone(sorted(frozen) + ([root] if include_root else []), _KILL_WAIT)


_KILL_WAIT = 5.0  # seconds kill_tree waits for the processes it killed to exit


def _wait_gone(pids: list[int], limit: float) -> None:
    import time

    deadline = time.monotonic() + limit
    for pid in pids:
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.005)


def running(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie waiting for its parent to
    reap it has: it runs nothing and holds nothing but its entry)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):  # gone (ESRCH can come from the read, after the open)
        return False


def kill_descendants() -> None:
    """Kill every descendant of this process (a subreaper cleaning up before it exits)."""
    for child in children(os.getpid()):
        kill_tree(child)


def exit_with_parent(poll: float = 0.5) -> None:
    """A daemon thread ends this process, and everything below it, once its parent is gone
    (a sweep's worker whose sweep was killed outright: no handler of the sweep ran)."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        kill_descendants()
        os._exit(1)

    threading.Thread(target=watch, name="semcheck-parent-watch", daemon=True).start()


def _send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
