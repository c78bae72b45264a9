"""Ctrl-C, SIGTERM and SIGHUP end a run cleanly: children killed, finished results kept.

SIGINT already raises KeyboardInterrupt; `terminating_raises` makes SIGTERM and SIGHUP (a
closed terminal, a stopped CI job) raise `Terminated` (a KeyboardInterrupt), so the same
`finally` blocks kill capture and model children and `-j` workers (which run in sessions of
their own, or would wait for their tasks) and the CLI prints and writes what finished. The
exit code is the shell's: 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM, 129 for
SIGHUP), never a verdict's: a partial run must not pass a gate.
"""

from __future__ import annotations

import contextlib
import signal
import threading


class Terminated(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def exit_code(interrupt: KeyboardInterrupt) -> int:
    return 128 + (interrupt.signum if isinstance(interrupt, Terminated) else signal.SIGINT)


def signal_name(interrupt: KeyboardInterrupt) -> str:
    return signal.Signals(interrupt.signum).name if isinstance(interrupt, Terminated) else "Ctrl-C"


@contextlib.contextmanager
def terminating_raises():
    """Within the block, SIGTERM and SIGHUP raise Terminated in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(signum)

    signals = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


def partial_note(interrupt: KeyboardInterrupt, finished: int) -> str:
    """The note every finished result of an interrupted run carries."""
    return (
        f"partial run: semcheck was interrupted ({signal_name(interrupt)}) after {finished} check(s) "
        "had finished; this check's verdict is complete, but the checks after it were not run"
    )


def collect(results):
    """Every Result of the iterable, and the interrupt that stopped it early (or None). An
    interrupt before the first Result propagates; after it, each finished Result gets the
    partial-run note and the caller reports them."""
    finished = []
    try:
        for result in results:
            finished.append(result)
    except KeyboardInterrupt as e:
        if not finished:
            raise
        for result in finished:
            result.notes.append(partial_note(e, len(finished)))
        return finished, e
    return finished, None
