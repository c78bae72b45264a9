"""Validation of `semcheck verify`'s arguments and environment, before any work is done.

A gate must not run for minutes and then lose its report to a typo: a malformed budget
(`--timeout nan`, `--max-states -5`, `SEMCHECK_TIMEOUT=abc`), a path that does not exist,
or an `-o` / `--graph` file that cannot be written is a usage error (exit 2) with a message
that names the value, checked before the first file is loaded.
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Callable


class UsageError(Exception):
    """Bad usage, found before any work: the CLI prints it and exits 2."""


def did_you_mean(word: str, candidates: list[str]) -> str:
    """ "; did you mean --devices?" for a word close to one of `candidates`, else "". """
    import difflib

    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


# --- single values (argparse `type=` functions and environment variables share them) --------


def _number(text: str, convert: Callable[[str], float]) -> float:
    try:
        return convert(text.strip())
    except (ValueError, AttributeError):
        raise ValueError(f"expected a number, got {text!r}") from None


def positive_int(text: str) -> int:
    value = _number(text, int)
    if value < 1:
        raise ValueError(f"expected a positive whole number, got {text!r}")
    return int(value)


def non_negative_int(text: str) -> int:
    value = _number(text, int)
    if value < 0:
        raise ValueError(f"expected a whole number >= 0, got {text!r}")
    return int(value)


def positive_seconds(text: str) -> float:
    """Seconds: positive, `inf` for no limit; never nan."""
    value = _number(text, float)
    if math.isnan(value) or value <= 0:
        raise ValueError(f"expected a positive number of seconds, got {text!r}")
    return value


def positive_megabytes(text: str) -> float:
    value = _number(text, float)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"expected a positive, finite number of megabytes, got {text!r}")
    return value


def for_argparse(check: Callable[[str], object]) -> Callable[[str], object]:
    """`check` as an argparse type: its ValueError becomes argparse's usage error (exit 2)."""

    def convert(text: str):
        try:
            return check(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = check.__name__
    return convert


def capture_cache_folder(text: str) -> str:
    """An existing, writable folder, or empty (no cache)."""
    if text:
        from semcheck.frontends.capture_cache import folder_problem

        problem = folder_problem(text)
        if problem:
            raise ValueError(problem)
    return text


# Every environment variable semcheck reads, with what it must hold.
ENVIRONMENT: dict[str, Callable[[str], object]] = {
    "SEMCHECK_MAX_STATES": positive_int,
    "SEMCHECK_TIMEOUT": positive_seconds,
    "SEMCHECK_MAX_MEMORY_MB": positive_megabytes,
    "SEMCHECK_CAPTURE_TIMEOUT": positive_seconds,
    "SEMCHECK_CAPTURE_CACHE": capture_cache_folder,
}


def check_environment(environ=None) -> None:
    environ = os.environ if environ is None else environ
    problems = []
    for name, check in ENVIRONMENT.items():
        if name in environ:
            try:
                check(environ[name])
            except ValueError as e:
                problems.append(f"environment variable {name}={environ[name]!r}: {e}")
    if problems:
        raise UsageError("; ".join(problems))


# --- paths ---------------------------------------------------------------------------------


def check_inputs(paths: list[str]) -> None:
    """Every PATH exists and is a file or a folder: a typo is one usage error, not a fake
    result per device count, and a named pipe is not read (and waited on) for ever."""
    import stat

    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise UsageError("no such file or folder: " + ", ".join(missing))
    for path in paths:
        mode = os.stat(path).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            from semcheck.frontends import not_regular

            raise UsageError(f"{path} is {not_regular(mode)}, not a kernel script, model file or folder")


def check_writable(path: str, what: str) -> None:
    """`path` can be created or overwritten: its folder exists and is writable, and it is not
    itself a folder (nor a named pipe that nobody reads, which would block the write)."""
    if os.path.isdir(path):
        raise UsageError(f"{what} {path!r} is a folder; give a file name")
    _check_fifo_has_a_reader(path, what)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"{what} {path!r}: the folder {os.path.dirname(path) or '.'!r} does not exist")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"{what} {path!r} exists and is not writable")
    if not os.path.exists(path) and not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {path!r}: the folder {os.path.dirname(path) or '.'!r} is not writable")


def _check_fifo_has_a_reader(path: str, what: str) -> None:
    import errno
    import stat

    try:
        if not stat.S_ISFIFO(os.stat(path).st_mode):
            return
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return
    except OSError as e:
        if e.errno == errno.ENXIO:
            raise UsageError(f"{what} {path!r} is a named pipe (FIFO) that nothing reads") from None
        return
    os.close(fd)


def check_all(args) -> None:
    """Everything that can be checked before work starts; raises UsageError."""
    check_environment()
    check_inputs(args.paths)
    for option, what in (("output", "-o"), ("graph", "--graph"), ("summary", "--summary"), ("sarif", "--sarif")):
        if getattr(args, option, None):
            check_writable(getattr(args, option), what)
    from semcheck.cli.gate import SUMMARY_VARIABLE

    if os.environ.get(SUMMARY_VARIABLE):  # appended to after the run, as CI's job summary
        check_writable(os.environ[SUMMARY_VARIABLE], f"the file ${SUMMARY_VARIABLE} names,")
