"""Assertions for a project's own test suite; a failure's message is semcheck's text report.

    from semcheck.testing import assert_protocol_safe, assert_violation

    def test_ring_protocol():
        assert_protocol_safe("kernels/ring_allgather.py", devices=(2, 4, 8))

    def test_the_known_bug_is_still_caught():
        assert_violation(my_buggy_model, "unsatisfied_wait", devices=4)

    def test_every_kernel_as_declared():
        assert_as_declared("kernels/")

A target is a model function `model(devices) -> Protocol`, a `Protocol`, or a path (a model
file, a kernel script, or a folder of them). Each assertion returns the Results it checked,
for further asserts. Options (`engine`, `budget`, `reduce`, ...) go to the engine.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Union

from semcheck.run import expectations
from semcheck.api import check_protocol, verify_path
from semcheck.ir import Protocol
from semcheck.report import text
from semcheck.result import Result, Verdict

Target = Union[str, "os.PathLike[str]", Protocol, Callable[[int], Protocol]]


def check(target: Target, devices: int | Iterable[int] = (2, 4, 8), **options) -> list[Result]:
    """Every Result for `target` at every device count (a Protocol has its own count)."""
    counts = [devices] if isinstance(devices, int) else list(devices)
    if isinstance(target, Protocol):
        return [check_protocol(target, **options)]
    if isinstance(target, (str, os.PathLike)):
        return verify_path([os.fspath(target)], counts, **options)
    return [check_protocol(target(n), **options) for n in counts]


def assert_protocol_safe(
    target: Target, devices: int | Iterable[int] = (2, 4, 8), *, allow_warnings: bool = True, **options
) -> list[Result]:
    """Every check is verified safe (warnings such as `not_lowerable` are allowed unless
    `allow_warnings=False`)."""
    __tracebackhide__ = True  # pytest shows the caller's line, not this frame
    results = check(target, devices, **options)
    failed = [
        r for r in results
        if r.verdict is not Verdict.SAFE or (not allow_warnings and r.warnings)
    ]
    if failed:
        raise AssertionError(f"semcheck: not verified safe: {_headline(failed)}\n\n" + _report(failed))
    return results


def assert_violation(
    target: Target, kind: str, devices: int | Iterable[int] = (2, 4, 8), **options
) -> list[Result]:
    """Every check finds a violation of `kind` (e.g. a regression test that a known bug is
    still caught). The checks are exhaustive (the first counterexample may be of another kind)."""
    __tracebackhide__ = True
    results = check(target, devices, **{"exhaustive": True, **options})
    failed = [r for r in results if kind not in {v.kind for v in r.violations}]
    if failed:
        got = _headline(failed) if any(r.violations or r.verdict is not Verdict.SAFE for r in failed) else (
            f"safe at {_counts(failed)}")
        raise AssertionError(f"semcheck: expected {kind} at every device count, got {got}\n\n"
                             + _report(failed))
    return results


def assert_as_declared(paths: str | Iterable[str], devices: Iterable[int] = (2, 4, 8), **options) -> list[Result]:
    """Every check of the files under `paths` gets the verdict declared for it (`# semcheck:
    expect ...` or pyproject.toml; no declaration means safe), as `semcheck verify
    --expectations` judges it (exhaustively, as it does)."""
    __tracebackhide__ = True
    results = verify_path([paths] if isinstance(paths, str) else list(paths), devices,
                          **{"exhaustive": True, **options})
    if not results:
        raise AssertionError(f"semcheck: nothing to check in {paths}")
    judgements = expectations.judge_all(results)
    if not all(j.matched for j in judgements):
        unexpected = [(r, j) for r, j in zip(results, judgements) if not j.matched]
        report = _report([r for r, _ in unexpected], judgements=[j for _, j in unexpected])
        raise AssertionError(f"semcheck: not as declared: {_headline([r for r, _ in unexpected])}\n\n" + report)
    return results


def _report(results: list[Result], judgements=None) -> str:
    """The text report of a failed assertion, verbose: a test's reader cannot add `-v` to
    see every step the violation depends on and the modelling notes the verdict rests on,
    which the terse report only counts ("shown with -v")."""
    return text.render(results, judgements=judgements, verbose=True)


def _headline(results: list[Result]) -> str:
    """The first line of a failure: each problem by kind, file:line and the device counts it
    was found at, e.g. `unsatisfied_wait at ring.py:30 (2, 4, 8 devices)`."""
    from semcheck.report import groups

    parts = []
    for g in groups.group(results):
        where = f" at {g.key.location}" if g.key.location else ""
        # a root cause's group is named by the violation kinds it was found as, as the
        # report's summary names it: those are what docs/kinds and --expectations know
        kind = "+".join(groups.violation_kinds(results, g)) if g.key.cause is not None else g.key.kind
        parts.append(f"{kind}{where} ({groups.checks_text(results, g.refs)})")
    for r in results:
        if r.verdict in (Verdict.ERROR, Verdict.INCONCLUSIVE):
            parts.append(f"{r.verdict.value} for {r.kernel} at {r.devices} devices")
    return "; ".join(parts) or f"safe at {_counts(results)}"


def _counts(results: list[Result]) -> str:
    return ", ".join(dict.fromkeys(str(r.devices) for r in results)) + " devices"
