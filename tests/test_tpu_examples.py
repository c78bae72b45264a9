"""Every example kernel script gives the verdict its docstring documents, at 2, 4 and 8
devices, through the same path as `semcheck verify FILE --devices N` (a subprocess per
device count), and every report points at a line of the example itself."""

from __future__ import annotations

import os

import pytest

from tests.tpu_support import DEVICE_COUNTS, MEGACORE, device_counts, example_paths, expectation, config_of, prefetch, results

EXAMPLES = example_paths()
CHECKS = [(p, n) for p in EXAMPLES for n in device_counts(p)]


@pytest.fixture(scope="module", autouse=True)
def _all_results():
    prefetch(EXAMPLES)


def test_there_is_a_correct_and_a_buggy_example_for_each_protocol():
    verdicts = [expectation(p).verdicts for p in EXAMPLES]
    safe = [v for v in verdicts if all(verdict == "safe" for verdict, _ in v.values())]
    buggy = [v for v in verdicts if any(verdict == "violation" for verdict, _ in v.values())]
    assert len(EXAMPLES) >= 16 and len(safe) >= 8 and len(buggy) >= 8


@pytest.mark.parametrize("path, devices", CHECKS, ids=lambda v: os.path.basename(v) if isinstance(v, str) else str(v))
def test_example_gives_its_documented_verdict(path, devices):
    exp = expectation(path)
    found = results(path, devices)
    assert {config_of(r) for r in found} == exp.cores_configs(), [r.kernel for r in found]
    for r in found:
        verdict, kinds = exp.verdict_for(config_of(r), devices)
        assert r.verdict.value == verdict, (r.kernel, r.error, [v.message for v in r.violations])
        assert {v.kind for v in r.errors} == kinds
        assert {v.kind for v in r.warnings} == exp.warnings
        assert r.devices == devices
        assert r.backend == "tpu" and r.semantics == "tpu"


REPEATED = [
    (p, k, n) for p in EXAMPLES for k in sorted(expectation(p).invocation_counts()) if k > 1 for n in device_counts(p)
]


def test_some_example_documents_what_repeated_calls_do():
    assert REPEATED


@pytest.mark.parametrize("path, invocations, devices", REPEATED, ids=lambda v: os.path.basename(v) if isinstance(v, str) else str(v))
def test_example_called_repeatedly_gives_its_documented_verdict(path, invocations, devices):
    """`semcheck verify --invocations K`: the kernel runs K times back to back."""
    exp = expectation(path)
    for r in results(path, devices, invocations):
        verdict, kinds = exp.verdict_for(config_of(r), devices, invocations)
        assert r.verdict.value == verdict, (r.kernel, r.error, [v.message for v in r.violations])
        assert {v.kind for v in r.errors} == kinds
        assert r.invocations == invocations and r.kernel.endswith(f" x{invocations}")


@pytest.mark.parametrize("path, devices", CHECKS, ids=lambda v: os.path.basename(v) if isinstance(v, str) else str(v))
def test_every_report_points_at_the_kernels_own_line(path, devices):
    exp = expectation(path)
    for r in [r for k in sorted(exp.invocation_counts()) for r in results(path, devices, k)]:
        assert os.path.samefile(r.file, path)
        for v in r.violations:
            assert v.location is not None and os.path.samefile(v.location.file, path), v.message
            # Each violation is located at the line the example marks for its kind.
            assert v.location.line in exp.markers.get(v.kind, set()), (v.kind, v.location, exp.markers)
            for step in v.trace:
                assert step.location is None or os.path.samefile(step.location.file, path)


@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_docstring_and_gate_declaration_agree(path):
    """The docstring tells a reader the verdict; the `# semcheck: expect` comment tells the
    CI gate (`semcheck verify --expectations`). They must say the same thing, for every
    cores config, device count and invocation count the docstring documents."""
    from semcheck import expectations
    from semcheck.result import Result, Verdict

    documented = expectation(path)
    declared = expectations.declared_in_file(path)
    assert declared, f"{path} has no `# semcheck: expect` comment"
    for condition, _ in documented.conditions():
        cores = 2 if condition.cores == MEGACORE else 1
        for devices in DEVICE_COUNTS:
            check = Result(kernel="", file=path, line=0, backend="tpu", semantics="tpu", devices=devices,
                           cores=cores, engine="explicit", verdict=Verdict.SAFE,
                           invocations=condition.invocations)
            gate = expectations.expectation_for(check, declared)
            assert gate is not None, (condition, devices)
            _verdict, kinds = documented.verdict_for(condition.cores, devices, condition.invocations)
            assert gate.outcomes - documented.warnings == kinds, (condition, devices, gate.where)
            assert documented.warnings <= gate.outcomes
