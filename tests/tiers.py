"""Random (hypothesis) tests in both tiers: a few examples in the fast tier, many in the slow
one, from one test body.

    @pytest.mark.parametrize("examples", example_counts(fast=5, slow=25))
    def test_reduction_keeps_every_finding(examples):
        run_examples(reduction_keeps_every_finding, protocols(), examples=examples)

runs as `test_...[5-examples]` in the fast tier and `test_...[25-examples]` (marked slow,
tests/conftest.py) in the slow one; both assert the same thing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis.strategies import SearchStrategy


def example_counts(fast: int, slow: int) -> list:
    """The `examples` parameter of a random test: `fast` in the fast tier, `slow` in the slow tier."""
    assert fast < slow
    return [pytest.param(fast, id=f"{fast}-examples"),
            pytest.param(slow, id=f"{slow}-examples", marks=pytest.mark.slow)]


def run_examples(check: Callable[..., None], *strategies: SearchStrategy, examples: int, **options) -> None:
    """`check` on `examples` random draws of `strategies`, with no deadline (no test may depend
    on the machine's speed); `options` are hypothesis settings (suppress_health_check=...)."""
    settings(max_examples=examples, deadline=None, **options)(given(*strategies)(check))()
