"""The relay-in-pieces pair (examples/tpu/relay_in_pieces*.py): a block that arrives in two
chunks is passed one hop further in pieces, pipelined with the arrival. The pattern, and the
slip of the buggy example (a piece started after the chunk of its own index, not the chunk
it lies in), come from a public all-gather for a 2x2 TPU v5p (benchmarks/public_kernels.md,
"TPU-Collectives"). Verdicts and state counts at 2 and 4 devices, the reduced search
against the unreduced one, and the racing pair named."""

from __future__ import annotations

import os

import pytest

from semcheck.engines.explicit import search as explicit
from semcheck.engines.options import ExplicitOptions
from semcheck.frontends import capture_cache
from semcheck.passes import core_entry
from semcheck.semantics import System
from tests.tpu_support import EXAMPLES, results

SAFE = os.path.join(EXAMPLES, "relay_in_pieces.py")
EARLY = os.path.join(EXAMPLES, "relay_in_pieces_early.py")


@pytest.mark.parametrize("devices, states", [(2, 56), (4, 110)])
def test_relaying_each_piece_after_the_chunk_it_lies_in_is_safe(devices, states):
    [r] = results(SAFE, devices)
    assert r.verdict.value == "safe", [v.message for v in r.violations]
    assert r.stats.states == states


@pytest.mark.parametrize("devices", [2, 4])
def test_relaying_a_piece_before_its_chunk_landed_races_with_that_chunk(devices):
    [r] = results(EARLY, devices)
    assert r.verdict.value == "violation"
    assert {v.kind for v in r.violations} == {"data_race"}
    [race] = r.violations
    # The left neighbour's copy of chunk 1 writes rows 8..16 of the slot that the relay of
    # piece 0 (rows 8..12) reads: the two racing accesses are the hop's start (line 51) and
    # the relay's start (line 54), whichever the counterexample ran last.
    assert race.location.line in (51, 54)
    assert "8:16" in race.message and "8:12" in race.message, race.message


@pytest.mark.parametrize("path", [SAFE, EARLY], ids=os.path.basename)
def test_the_reduced_search_finds_what_the_unreduced_one_finds(path):
    outcome = capture_cache.capture(path, 2)
    assert not outcome.errors, outcome.errors
    [captured] = outcome.protocols
    protocol = core_entry.apply(captured, True)
    full = explicit.explore(System(protocol), ExplicitOptions(reduce=False, silence_reported_races=False))
    reduced = explicit.explore(System(protocol), ExplicitOptions(reduce=True, silence_reported_races=False))
    assert full.exhausted is None and reduced.exhausted is None
    assert set(reduced.findings) == set(full.findings)
    assert bool(full.findings) == (path == EARLY)
    assert reduced.states <= full.states
