"""`--devices all` on kernel scripts: JAX's distributed TPU guide's ring kernels written out as
examples, the ring examples the issue names, and one-line mutants of the guide's kernels made
in a temporary folder, each held to the explicit search on the kernel captured at each count.
Slow: every file is captured at N = 2..8 (and the explicit search captures more)."""

from __future__ import annotations

import functools
import os

import pytest

from semcheck.api import check_protocol
from semcheck.frontends import load
from semcheck.ir import Protocol
from semcheck.parametric.family import every_count
from semcheck.result import Verdict

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TPU = os.path.join(ROOT, "examples", "tpu")


@functools.cache
def _explicit(path: str, n: int) -> tuple[Verdict, frozenset[str]]:
    (protocol,) = [p for p in load(path, n) if isinstance(p, Protocol)]
    result = check_protocol(protocol, engine="explicit", stop_at_first=True)
    return result.verdict, frozenset(v.kind for v in result.errors)


def _agrees(path: str, expected, up_to: int):
    (outcome,) = every_count(path)
    if expected == "safe":
        assert outcome.verdict is Verdict.SAFE, outcome.claim
        assert outcome.claim == "safe for every device count N >= 2"
        for n in range(2, up_to + 1):
            assert _explicit(path, n)[0] is Verdict.SAFE, n
    elif expected == "not parametric":
        assert outcome.verdict is Verdict.INCONCLUSIVE and "not parametric" in outcome.claim, outcome.claim
        for n in range(2, 9):
            assert _explicit(path, n)[0] is Verdict.SAFE, n
    else:
        kind, smallest = expected
        assert outcome.verdict is Verdict.VIOLATION and outcome.smallest == smallest, outcome.claim
        for n in range(2, smallest):
            assert _explicit(path, n)[0] is Verdict.SAFE, n
        verdict, kinds = _explicit(path, smallest)
        assert verdict is Verdict.VIOLATION and kind in kinds
    return outcome


@pytest.mark.parametrize("name, expected, up_to", [
    ("allreduce_alln_guide.py", "safe", 16),
    ("allgather_alln_guide.py", "safe", 16),
    ("allreduce_alln_capacity_to_right.py", ("data_race", 3), 3),
    ("token_ring_alln.py", "not parametric", 8),
    ("allreduce_ring.py", "safe", 10),
    ("allgather_bidirectional.py", "safe", 10),
    ("reduce_scatter_capacity.py", "safe", 10),
    ("reduce_scatter_bidirectional.py", "safe", 10),
    ("allreduce_ring_no_capacity.py", ("data_race", 2), 2),
    ("allgather_ring_overwrite.py", ("data_race", 3), 3),
])
def test_example_at_every_count(name, expected, up_to):
    _agrees(os.path.join(TPU, name), expected, up_to)


def test_guide_allreduce_is_proved_from_three():
    (outcome,) = every_count(os.path.join(TPU, "allreduce_alln_guide.py"))
    assert outcome.proof is not None and outcome.proof.from_n == 3
    assert outcome.checked == {2: Verdict.SAFE}
    assert outcome.template is not None and (outcome.template.trip_a, outcome.template.trip_b) == (1, 0)


def test_guide_allreduce_is_safe_at_64():
    assert _explicit(os.path.join(TPU, "allreduce_alln_guide.py"), 64)[0] is Verdict.SAFE


def test_token_ring_names_where_device_1_differs():
    (outcome,) = every_count(os.path.join(TPU, "token_ring_alln.py"))
    assert "device 1 does not run device 0's program" in outcome.claim
    assert "token_ring_alln.py:" in outcome.claim
    assert outcome.claim.endswith("no violation at N = 2..8 (explicit search)")


# One-line mutants of the guide's kernels: (file, the line as written, the line instead, expected).
KERNEL_MUTANTS = {
    "no_capacity_wait": ("allreduce_alln_guide.py", "    pl.semaphore_wait(capacity, 1)\n", "", ("data_race", 2)),
    "onward_into_working_slot": ("allreduce_alln_guide.py", "dst_ref=hbm_slots.at[receiving]",
                                 "dst_ref=hbm_slots.at[working]", ("data_race", 2)),
    "no_local_wait": ("allreduce_alln_guide.py", "    local.wait()\n", "", ("data_race", 2)),
    "single_barrier": ("allreduce_alln_guide.py", "        pl.semaphore_wait(again, 2)\n",
                       "        pl.semaphore_wait(again, 0)\n", ("semaphore_leftover", 2)),
    "shared_receive_semaphore": ("allgather_alln_guide.py", "recv_sem=recv_sems.at[step]", "recv_sem=recv_sems.at[0]",
                                 ("data_race", 3)),
    "no_onward_wait": ("allgather_alln_guide.py", "    onward.wait()\n", "", ("semaphore_leftover", 2)),
}


@pytest.mark.parametrize("name", sorted(KERNEL_MUTANTS))
def test_kernel_mutant_at_every_count(name, tmp_path):
    source, old, new, expected = KERNEL_MUTANTS[name]
    with open(os.path.join(TPU, source), encoding="utf-8") as f:
        text = f.read()
    assert text.count(old) == 1, f"{old!r} is not one line of {source}"
    path = tmp_path / f"{name}.py"
    path.write_text(text.replace(old, new), encoding="utf-8")
    _agrees(str(path), expected, 2)
