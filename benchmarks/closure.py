"""The reduced explicit search on random protocols, as `tests/test_one_path.py` runs it: CPU
seconds, states, transitions, and a digest of every stubborn set chosen (issue 28, issue 29
part 7: these searches are most of CI's slow tier, and the stubborn-set closure most of them).

    python benchmarks/closure.py [--examples 300] [--repeat 2] [--baseline TREE]

The protocols are drawn from `tests/strategies.py` as `test_one_path.py` draws them
(`protocols() | ring_protocols() | capacity_ring_protocols()`, hypothesis derandomized: the
same draws every run of one hypothesis version), and each is searched reduced with both of
that test's options (`ExplicitOptions()` and `ExplicitOptions(silence_reported_races=False,
symmetry=False)`) within 20,000 states. Each tree's searches run in a child process of their
own (`time.process_time` of the searches alone); `--baseline TREE` (e.g. `git archive main |
tar -x -C TREE`) runs another checkout's semcheck on the same protocols, interleaved with this
tree's `--repeat` times, so that both see the same load on a shared machine.

`digest` hashes every search's states, transitions, stored states, findings and their paths;
`sets` (an untimed pass of its own) hashes every state's chosen actions, as
`reduction.isolated_action` and `reduction.stubborn_subset` return them, in order. Two trees
that choose the same stubborn sets print the same two; where they differ, the script exits 1.

Measured 2026-12-06 on the shared 2-core development machine, 200 protocols (400 searches),
against main c8f9fc9, interleaved at load 2.1-2.6: 41.9, 41.1 CPU s against 47.8, 47.1; both
330,263 states, 370,777 transitions, digests d8386b71e2e0 and fb731020f460 (docs/benchmarks.md,
"The reduced search's closure").
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from packing import CHILD_PREAMBLE, run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUDGET = 20_000  # tests/test_one_path.py's BUDGET

CHILD = CHILD_PREAMBLE + """
check_sets = sys.argv[3] == "sets"
sets = hashlib.sha1()
if check_sets:
    def recording(choose):
        def chosen(*args, **kwargs):
            found = choose(*args, **kwargs)
            sets.update(repr(found).encode())
            return found
        return chosen
    search.isolated_action = recording(search.isolated_action)
    search.stubborn_subset = recording(search.stubborn_subset)
OPTIONS = (ExplicitOptions(), ExplicitOptions(silence_reported_races=False, symmetry=False))
digest, cpu, states, transitions, exhausted = hashlib.sha1(), 0.0, 0, 0, 0
for protocol in protocols:
    for options in OPTIONS:
        system = System(protocol)
        started = time.process_time()
        found = search.explore(system, options, budget=Budget(max_states=int(sys.argv[2])))
        cpu += time.process_time() - started
        states, transitions = states + found.states, transitions + found.transitions
        exhausted += found.exhausted is not None
        findings = sorted((repr(plain(key)), repr(actions)) for key, (_f, _i, actions) in found.findings.items())
        digest.update(repr((found.states, found.transitions, found.stored_states, findings)).encode())
print(f"{cpu:.1f}|{states}|{transitions}|{exhausted}|{digest.hexdigest()[:12]}|{sets.hexdigest()[:12] if check_sets else '-'}")
"""


def draw(examples: int) -> list:
    """`examples` protocols, the same ones every run."""
    from hypothesis import HealthCheck, given, settings

    from tests.strategies import capacity_ring_protocols, protocols, ring_protocols

    drawn: list = []

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(protocols() | ring_protocols() | capacity_ring_protocols())
    def collect(protocol):
        drawn.append(protocol)

    collect()
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=300, help="protocols drawn (default 300)")
    parser.add_argument("--repeat", type=int, default=2, help="timed runs of each tree, interleaved (default 2)")
    parser.add_argument("--baseline", metavar="TREE", help="another checkout to run beside this one")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    protocols = draw(args.examples)
    if not protocols:
        sys.exit("no protocol drawn")
    trees = {"this tree": ROOT}
    if args.baseline:
        trees["baseline"] = os.path.abspath(args.baseline)
    seen: dict[str, set[tuple[str, ...]]] = {"digest": set(), "sets": set()}
    with tempfile.NamedTemporaryFile(suffix=".pkl") as scratch:
        pickle.dump(protocols, scratch)
        scratch.flush()
        print(f"{len(protocols)} protocols, reduced, both options of test_one_path.py, "
              f"{BUDGET:,} states each at most\n")
        print("| tree | CPU s | states | transitions | exhausted | digest | sets | load |")
        print("|---|---|---|---|---|---|---|---|")
        for name, tree in trees.items():  # the untimed pass that hashes the stubborn sets
            *_rest, digest, sets = run(tree, scratch.name, CHILD, BUDGET, "sets")
            seen["sets"].add((sets,))
            print(f"| {name} (sets) | | | | | {digest} | {sets} | |", flush=True)
        for _ in range(args.repeat):
            for name, tree in trees.items():
                cpu, states, transitions, exhausted, digest, _sets = run(tree, scratch.name, CHILD, BUDGET, "timed")
                seen["digest"].add((states, transitions, exhausted, digest))
                load = os.getloadavg()[0]
                print(f"| {name} | {cpu} | {int(states):,} | {int(transitions):,} | {exhausted} | {digest} | | "
                      f"{load:.1f} |", flush=True)
    if len(seen["digest"]) > 1 or len(seen["sets"]) > 1:
        sys.exit("the trees searched differently")


if __name__ == "__main__":
    main()
