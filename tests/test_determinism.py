"""A check's answer depends on its protocol alone, never on what the same process checked
before: a serial sweep, `-j` workers and Ray workers (each with its own history) must give
the same report. Z3 picks its model by the terms its context has seen, so every z3 check
starts in a fresh context (semcheck/engines/z3/terms.py, fresh_context)."""

import glob
import os

from semcheck.api import check_protocol
from semcheck.frontends import load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def answer(protocol):
    r = check_protocol(protocol, engine="z3")
    return r.verdict, [(v.kind, v.device, v.message, sorted(v.inputs.items()), len(v.trace)) for v in r.violations]


def test_a_z3_counterexample_does_not_depend_on_earlier_checks():
    [probe] = load(os.path.join(ROOT, "models", "ring_allgather_shared_recv.py"), 4)
    first = answer(probe)
    assert first[1] and first[1][0][0] == "data_race"
    for path in sorted(glob.glob(os.path.join(ROOT, "models", "*.py"))):  # a history of other checks
        for protocol in load(path, 4):
            answer(protocol)
    assert answer(probe) == first
