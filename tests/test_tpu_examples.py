"""Every example kernel script gives the verdict its `# semcheck: expect` comments declare, at 2, 4 and 8
devices, through the same path as `semcheck verify FILE --devices N` (a subprocess per
device count), and every report points at a line of the example itself."""

from __future__ import annotations

import os

import pytest

from tests.tpu_support import config_of, device_counts, example_paths, expectation, prefetch, results

EXAMPLES = example_paths()
CHECKS = [(p, n) for p in EXAMPLES for n in device_counts(p)]


@pytest.fixture(scope="module", autouse=True)
def _all_results():
    prefetch(EXAMPLES)


def test_there_is_a_correct_and_a_buggy_example_for_each_protocol():
    buggy = [expectation(p).is_buggy() for p in EXAMPLES]
    assert len(EXAMPLES) >= 16 and buggy.count(False) >= 8 and buggy.count(True) >= 8


@pytest.mark.parametrize("path, devices", CHECKS, ids=lambda v: os.path.basename(v) if isinstance(v, str) else str(v))
def test_example_gives_its_declared_verdict(path, devices):
    exp = expectation(path)
    found = results(path, devices)
    if exp.core_counts():  # the one-core and the 2-TensorCore checks, each declared
        assert {r.cores for r in found} == exp.core_counts(), [r.kernel for r in found]
    else:  # no 2-TensorCore split that the comments do not declare
        assert all(config_of(r) == "" for r in found), [r.kernel for r in found]
    for r in found:
        errors, warnings = exp.kinds_for(r)
        assert r.verdict.value == ("violation" if errors else "safe"), (r.kernel, r.error, [v.message for v in r.violations])
        assert {v.kind for v in r.errors} == errors
        assert {v.kind for v in r.warnings} == warnings
        assert r.devices == devices
        assert r.frontend == "tpu" and r.backend == "tpu"


REPEATED = [
    (p, k, n) for p in EXAMPLES for k in sorted(expectation(p).invocation_counts()) if k > 1 for n in device_counts(p)
]


def test_some_example_declares_what_repeated_calls_do():
    assert REPEATED


@pytest.mark.parametrize("path, invocations, devices", REPEATED, ids=lambda v: os.path.basename(v) if isinstance(v, str) else str(v))
def test_example_called_repeatedly_gives_its_declared_verdict(path, invocations, devices):
    """`semcheck verify --invocations K`: the kernel runs K times back to back."""
    exp = expectation(path)
    for r in results(path, devices, invocations):
        errors, _warnings = exp.kinds_for(r)
        assert r.verdict.value == ("violation" if errors else "safe"), (r.kernel, r.error, [v.message for v in r.violations])
        assert {v.kind for v in r.errors} == errors
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
def test_every_example_declares_its_verdict_once(path):
    """The `# semcheck: expect` comments are the one statement of what an example should
    give (the gate reads them, and so do these tests); a docstring states no second one."""
    import ast

    assert expectation(path).declarations
    with open(path, encoding="utf-8") as f:
        docstring = ast.get_docstring(ast.parse(f.read())) or ""
    assert "Expected verdict" not in docstring and "Expected warnings" not in docstring
