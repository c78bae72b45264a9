"""The unreduced explicit search on random protocols, as the reduction tests run it for their
reference (issue 29 part 7): CPU seconds, states, transitions and bytes a stored state.

    python benchmarks/packing.py [--examples 300] [--strategy mbarriers] [--repeat 2] [--baseline TREE]

The protocols are drawn from `tests/strategies.py` with hypothesis derandomized (the same
draws every run of one hypothesis version), and each is searched as `tests/test_reduction.py`
searches its reference: `ExplicitOptions(reduce=False, silence_reported_races=False)` within
200,000 states. Each tree's searches run in a child process of their own (`time.process_time`
of the searches alone); `--baseline TREE` runs another checkout's semcheck on the same
protocols, interleaved with this tree's `--repeat` times, so that both see the same load on a
shared machine. `digest` is a hash of every search's states, transitions, stored states,
store bytes, findings and their paths: two trees that search alike print the same one.

Measured 2026-12-06 on the shared 2-core development machine against main 7851e5b: the
figures are in docs/benchmarks.md, "Packing states".
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUDGET = 200_000  # tests/test_reduction.py's REFERENCE_BUDGET

# what a child searching pickled protocols starts with (benchmarks/closure.py's too)
CHILD_PREAMBLE = """
import hashlib, pickle, sys, time
from semcheck.engines.budget import Budget
from semcheck.engines.explicit import search
from semcheck.engines.options import ExplicitOptions
from semcheck.semantics import System

def plain(value):
    # findings' keys hold frozensets, whose order follows string hashing
    if isinstance(value, (frozenset, set)):
        return tuple(sorted(map(plain, value), key=repr))
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(map(plain, value))
    return value

protocols = pickle.load(open(sys.argv[1], "rb"))
"""

CHILD = CHILD_PREAMBLE + """
digest, cpu, states, transitions, stored, grown, exhausted = hashlib.sha1(), 0.0, 0, 0, 0, 0, 0
for protocol in protocols:
    system = System(protocol)
    started = time.process_time()
    found = search.explore(system, ExplicitOptions(reduce=False, silence_reported_races=False),
                           budget=Budget(max_states=int(sys.argv[2])))
    cpu += time.process_time() - started
    states, transitions, stored = states + found.states, transitions + found.transitions, stored + found.stored_states
    grown += found.store_bytes - found.store_fixed_bytes
    exhausted += found.exhausted is not None
    findings = sorted((repr(plain(key)), repr(actions)) for key, (_f, _i, actions) in found.findings.items())
    digest.update(repr((found.states, found.transitions, found.stored_states, found.store_bytes, findings)).encode())
print(f"{cpu:.1f}|{states}|{transitions}|{stored}|{grown / max(stored, 1):.1f}|{exhausted}|{digest.hexdigest()[:12]}")
"""


def draw(strategy: str, examples: int) -> list:
    """`examples` protocols of the strategy, the same ones every run."""
    from hypothesis import HealthCheck, given, settings

    from tests import strategies

    chosen = {"mbarriers": strategies.protocols(with_mbarriers=True), "plain": strategies.protocols(),
              "control-flow": strategies.control_flow_protocols(max_devices=2, max_blocks=3),
              "capacity-rings": strategies.capacity_ring_protocols(max_devices=3, max_steps=2)}[strategy]
    drawn: list = []

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(chosen)
    def collect(protocol):
        drawn.append(protocol)

    collect()
    return drawn


def run(tree: str, protocols_file: str, child: str = CHILD, budget: int = BUDGET, *more: str) -> list[str]:
    """`child` (run in `tree`, with `tree`'s semcheck) on the pickled protocols: its fields."""
    proc = subprocess.run([sys.executable, "-c", child, protocols_file, str(budget), *more], capture_output=True,
                          text=True, cwd=tree, env=dict(os.environ, PYTHONPATH=tree))
    if proc.returncode:
        sys.exit(f"{tree}: the searches failed:\n{proc.stderr[-2000:]}")
    return proc.stdout.strip().split("|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=300, help="protocols drawn (default 300)")
    parser.add_argument("--strategy", default="mbarriers", choices=["mbarriers", "plain", "control-flow", "capacity-rings"])
    parser.add_argument("--repeat", type=int, default=2, help="runs of each tree, interleaved (default 2)")
    parser.add_argument("--baseline", metavar="TREE", help="another checkout to run beside this one")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    protocols = draw(args.strategy, args.examples)
    if not protocols:
        sys.exit("no protocol drawn")
    trees = {"this tree": ROOT}
    if args.baseline:
        trees["baseline"] = os.path.abspath(args.baseline)
    with tempfile.NamedTemporaryFile(suffix=".pkl") as scratch:
        pickle.dump(protocols, scratch)
        scratch.flush()
        print(f"{len(protocols)} protocols ({args.strategy}), unreduced, {BUDGET:,} states each at most\n")
        print("| tree | CPU s | states | transitions | stored | B/state | exhausted | digest | load |")
        print("|---|---|---|---|---|---|---|---|---|")
        for _ in range(args.repeat):
            for name, tree in trees.items():
                cpu, states, transitions, stored, per_state, exhausted, digest = run(tree, scratch.name)
                load = os.getloadavg()[0]
                print(f"| {name} | {cpu} | {int(states):,} | {int(transitions):,} | {int(stored):,} | {per_state} | "
                      f"{exhausted} | {digest} | {load:.1f} |", flush=True)


if __name__ == "__main__":
    main()
