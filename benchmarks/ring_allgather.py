"""Explicit engine on models/ring_allgather.py, with and without the partial-order reduction.

    python benchmarks/ring_allgather.py [--limit SECONDS]

Prints states, transitions, CPU seconds and peak memory for N = 2, 4, 8, 16, 32, ... with the
reduction (doubling N while a run stays under the limit), and for N = 2, 3, 4, ... without it
(until one run hits the limit, which ends it as inconclusive). Each run is a fresh
subprocess, so peak memory (ru_maxrss) and CPU seconds (user + system, the whole process:
imports, loading the model, building the System and the search, as issue 12's targets
count them) are that run's own; CPU, not wall-clock, so a loaded machine reads the same. For scale: SPIN verifies the same
protocol at N = 5 in 1.8 s (2.6 M states) and does not finish N = 6 in 60 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "ring_allgather.py")


def one_run(devices: int, reduce: bool, limit: float) -> dict:
    """Runs in the child: check the model once and report."""
    import resource

    sys.path.insert(0, ROOT)
    from semcheck.engines.explicit import search as explicit
    from semcheck.engines.budget import Budget
    from semcheck.engines.options import ExplicitOptions
    from semcheck.frontends import model_file
    from semcheck.semantics import System

    protocol = model_file.load(MODEL, devices)
    exploration = explicit.explore(
        System(protocol), ExplicitOptions(reduce=reduce), budget=Budget(max_states=50_000_000, timeout=limit)
    )
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "devices": devices,
        "reduce": reduce,
        "states": exploration.states,
        "transitions": exploration.transitions,
        "seconds": usage.ru_utime + usage.ru_stime,
        "peak_mb": usage.ru_maxrss / 1024,
        "verdict": "inconclusive" if exploration.exhausted else ("violation" if exploration.findings else "safe"),
    }


def measure(devices: int, reduce: bool, limit: float) -> dict:
    code = (
        f"import json, sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
        f"import ring_allgather as b; print(json.dumps(b.one_run({devices}, {reduce}, {limit})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=float, default=120.0, help="seconds per run (default 120)")
    parser.add_argument("--max-devices", type=int, default=256)
    args = parser.parse_args()

    rows = []
    n = 2
    while n <= args.max_devices:
        row = measure(n, True, args.limit)
        rows.append(row)
        _print_row(row, header=len(rows) == 1)
        if row["seconds"] > args.limit / 2 or row["verdict"] == "inconclusive":
            break
        n *= 2
    n = 2
    while True:
        row = measure(n, False, args.limit)
        rows.append(row)
        _print_row(row)
        if row["verdict"] == "inconclusive":
            break
        n += 1


def _print_row(row: dict, header: bool = False) -> None:
    if header:
        print(f"{'reduction':<10} {'N':>4} {'states':>12} {'transitions':>12} {'CPU s':>9} {'peak MB':>8}  verdict")
    print(
        f"{'on' if row['reduce'] else 'off':<10} {row['devices']:>4} {row['states']:>12,} "
        f"{row['transitions']:>12,} {row['seconds']:>9.2f} {row['peak_mb']:>8.0f}  {row['verdict']}",
        flush=True,
    )


if __name__ == "__main__":
    main()
