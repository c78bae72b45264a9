"""Compare the explicit and z3 engines: seconds and peak memory per model and device count.

    python benchmarks/engines.py                 # the default table (several minutes)
    python benchmarks/engines.py --ring 2,4,8,16 --timeout 120
    python benchmarks/engines.py --examples ""   # models only, no kernel scripts

Every case runs in a fresh subprocess, so each peak memory (ru_maxrss) is that engine's own
and one case cannot warm another's caches. The child prints one JSON line; this script
prints the table. "work" is states for explicit, encoded events / solver queries for z3.
Kernel scripts (the TPU examples by default) are captured in the child too; the capture is
not counted in "seconds", and a script with several kernels is timed on its first.
"seconds" is the check alone (importing z3 costs about 0.3 s once per process).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")

OTHER_MODELS = [
    "ring_allgather_missing_signal", "circular_wait", "double_buffer", "dma_wait_mismatch",
    "nondec_poll", "nondec_poll_leak", "remote_out_of_range", "moe_dispatch_capacity",
]
# The MoE model with its token count widened to every int32: one start state per value for
# the explicit engine (it gives up on its state budget), one query per question for z3.
WIDE = ("moe_dispatch_capacity", "tokens=0..2147483647")


def run_case(model: str, devices: int, engine: str, assume: str | None, timeout: float) -> dict:
    """Run one case in a child process; returns what it reported, or why it did not."""
    cmd = [sys.executable, __file__, "--child", model, str(devices), engine, assume or "", str(timeout)]
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"verdict": "killed", "seconds": time.monotonic() - started}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"verdict": f"crashed ({done.returncode})", "seconds": time.monotonic() - started,
                "error": done.stderr.strip().splitlines()[-1:] }
    return json.loads(lines[-1])


def child(model: str, devices: int, engine: str, assume: str, timeout: float) -> None:
    sys.path.insert(0, ROOT)
    from semcheck.passes import assumptions
    from semcheck.api import check_protocol
    from semcheck.engines import explicit, smt  # noqa: F401  (imports are not engine time)
    from semcheck.engines.budget import Budget
    from semcheck.frontends import load

    path = os.path.join(ROOT, model) if model.endswith(".py") else os.path.join(MODELS, model + ".py")
    protocol = next(p for p in load(path, devices) if not isinstance(p, Exception))
    bounds = [assumptions.parse(assume)] if assume else []
    started = time.monotonic()
    result = check_protocol(
        protocol, engine=engine, budget=Budget(timeout=timeout, max_states=2_000_000), assume=bounds
    )
    seconds = time.monotonic() - started
    if result.stats.solver_queries is not None:
        work = f"{result.stats.encoded_events or 0:,} ev / {result.stats.solver_queries} q"
    else:
        work = f"{result.stats.states:,} states"
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    kinds = sorted({v.kind for v in result.errors})
    print(json.dumps({
        "verdict": result.verdict.value, "kinds": kinds, "seconds": seconds,
        "peak_mb": peak_kb / 1024, "work": work,
    }))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ring", default="2,4,8,16,32", help="device counts for ring_allgather")
    parser.add_argument("--devices", type=int, default=8, help="device count for the other models")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    parser.add_argument("--examples", default="examples/tpu",
                        help="a folder of kernel scripts to time at --devices too (\"\" for none)")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model, devices, engine, assume, timeout = args.child
        child(model, int(devices), engine, assume, float(timeout))
        return

    cases = [("ring_allgather", int(n), None) for n in args.ring.split(",")]
    cases += [(m, args.devices, None) for m in OTHER_MODELS]
    cases.append((WIDE[0], args.devices, WIDE[1]))
    if args.examples:
        folder = os.path.join(ROOT, args.examples)
        cases += [
            (os.path.join(args.examples, name), args.devices, None)
            for name in sorted(os.listdir(folder)) if name.endswith(".py") and not name.startswith("_")
        ]
    header = ("model", "N", "inputs", "engine", "verdict", "seconds", "peak MB", "work")
    rows = [header]
    print(f"{len(cases) * 2} cases, each in its own process (timeout {args.timeout:g} s)", file=sys.stderr)
    for model, devices, assume in cases:
        for engine in ("explicit", "z3"):
            r = run_case(model, devices, engine, assume, args.timeout)
            verdict = r["verdict"] + (f" ({', '.join(r['kinds'])})" if r.get("kinds") else "")
            rows.append((
                model, str(devices), assume.split("=")[1] if assume else "-", engine, verdict,
                f"{r['seconds']:.2f}", f"{r['peak_mb']:.0f}" if "peak_mb" in r else "-", r.get("work", "-"),
            ))
            print(f"  {model} N={devices} {engine}: {verdict} in {r['seconds']:.1f} s", file=sys.stderr)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
