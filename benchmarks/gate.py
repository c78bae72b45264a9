"""The CI gate's wall time, serial against parallel, and the size of its SARIF.

    python benchmarks/gate.py [--devices 2,4,8] [--jobs 2] [PATH ...]   (default: models/ examples/)

Runs `semcheck verify PATH... --devices D --expectations` as the CI gate does, as a
subprocess (start-up included), once with -j 1 and once with -j N, checks that the two
JSON reports are the same but for their time fields, and prints a table of wall times.
Then prints the size of the SARIF of examples/ alone (code scanning's budget: 200 KB): the
serial run's SARIF less the results and notifications of other files (findings are per
file, so that is what a run over examples/ alone writes, byte for byte but for the
invocation's notifications).
Wall-clock numbers on a shared machine are noisy: say how loaded it was (the load average
is printed with them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMES = re.compile(r'"seconds": [0-9.e+-]+')


def gate(paths: list[str], devices: str, jobs: int, out: str, sarif: str | None = None) -> tuple[float, int]:
    argv = [sys.executable, "-m", "semcheck", "verify", *paths, "--devices", devices, "--expectations",
            "-j", str(jobs), "--format", "json", "-o", out, "-q"]
    if sarif:
        argv += ["--sarif", sarif]
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    code = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL).returncode
    return time.perf_counter() - start, code


def examples_only(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    run = doc["runs"][0]

    def ours(item) -> bool:
        uris = [loc["physicalLocation"]["artifactLocation"].get("uri", "") for loc in item.get("locations", [])]
        return any(uri.startswith("examples/") for uri in uris)

    run["results"] = [r for r in run["results"] if ours(r)]
    for invocation in run["invocations"]:
        if "toolExecutionNotifications" in invocation:
            invocation["toolExecutionNotifications"] = [n for n in invocation["toolExecutionNotifications"] if ours(n)]
    return json.dumps(doc, separators=(",", ":"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["models/", "examples/"])
    parser.add_argument("--devices", default="2,4,8")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        reports = {}
        sarif = os.path.join(tmp, "gate.sarif")
        for jobs in (1, args.jobs):
            out = os.path.join(tmp, f"j{jobs}.json")
            load = os.getloadavg()[0]
            seconds, code = gate(args.paths, args.devices, jobs, out, sarif if jobs == 1 else None)
            with open(out, encoding="utf-8") as f:
                reports[jobs] = TIMES.sub('"seconds": 0', f.read())
            rows.append((f"-j {jobs}", seconds, code, load))
            print(f"  (-j {jobs}: {seconds:.1f} s, exit {code}, load {load:.1f} at start)", file=sys.stderr, flush=True)
        sarif_bytes = len(examples_only(sarif).encode())
    print(f"semcheck verify {' '.join(args.paths)} --devices {args.devices} --expectations "
          f"({os.cpu_count()} cores)")
    print(f"{'run':<8}{'wall':>10}{'exit':>6}{'load at start':>16}")
    for name, seconds, code, load in rows:
        print(f"{name:<8}{seconds:>9.1f}s{code:>6}{load:>16.1f}")
    print(f"speed-up: {rows[0][1] / rows[1][1]:.2f}x; reports identical but for times: "
          f"{'yes' if reports[1] == reports[args.jobs] else 'NO'}")
    print(f"SARIF of examples/ at --devices {args.devices}: {sarif_bytes / 1000:.0f} KB "
          f"({'under' if sarif_bytes < 200_000 else 'OVER'} 200 KB)")
    return 0 if reports[1] == reports[args.jobs] else 1


if __name__ == "__main__":
    raise SystemExit(main())
