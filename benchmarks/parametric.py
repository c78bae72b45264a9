"""`--devices all` on the ring kernels: CPU seconds for a proof for every device count.

    python benchmarks/parametric.py [PATH...]

For each file (default: the ring all-gather model, the JAX guide's ring all-gather and
all-reduce, the other ring examples, and the guide's all-reduce with its capacity signal sent
the wrong way) one fresh subprocess runs `semcheck.parametric.family.every_count` with no
capture cache, and the table gives its verdict, the count N0 the proof starts at, its size
(pairs of steps ordered, certificates, z3 queries) and CPU seconds: the whole run (user +
system of the process and of every capture subprocess it waited for: loading at N = 2..8,
fitting, proving, the explicit checks below N0) and the proof alone. CPU, not wall-clock, so
a loaded machine reads the same. Issue 31's target: the ring all-gather model and the guide's
ring all-reduce proved in under 30 CPU seconds each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = [
    "models/ring_allgather.py",
    "examples/tpu/allgather_alln_guide.py",
    "examples/tpu/allreduce_alln_guide.py",
    "examples/tpu/allreduce_ring.py",
    "examples/tpu/allgather_bidirectional.py",
    "examples/tpu/reduce_scatter_bidirectional.py",
    "examples/tpu/allreduce_alln_capacity_to_right.py",
]


def one_run(path: str) -> dict:
    """Runs in the child: every device count of one file."""
    import resource
    import time

    sys.path.insert(0, ROOT)
    from semcheck.parametric.family import every_count

    started = time.monotonic()
    outcomes = every_count(path)
    rows = []
    for o in outcomes:
        proof = o.proof
        rows.append({
            "kernel": o.kernel, "verdict": o.verdict.value, "claim": o.claim, "smallest": o.smallest,
            "from_n": proof.from_n if proof else None, "pairs": proof.obligations if proof else None,
            "certificates": proof.certificates if proof else None, "queries": proof.queries if proof else None,
            "proof_s": round(proof.seconds, 2) if proof else None,
        })
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime
    return {"path": path, "rows": rows, "cpu": round(cpu, 1), "wall": round(time.monotonic() - started, 1)}


def measure(path: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SEMCHECK_CAPTURE_CACHE"}
    code = (f"import json, sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
            f"import parametric as b; print(json.dumps(b.one_run({path!r})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    paths = argv or DEFAULT
    missing = [p for p in paths if not os.path.exists(os.path.join(ROOT, p))]
    if missing:
        print(f"no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    header = f"{'file':<48} {'verdict':<13} {'N0':>3} {'pairs':>5} {'certs':>5} {'z3':>4} {'proof s':>7} {'CPU s':>6}"
    print(header)
    print("-" * len(header))
    measured = 0
    for path in paths:
        run = measure(path)
        for row in run["rows"]:
            verdict = row["verdict"] + (f" @{row['smallest']}" if row["smallest"] else "")
            cells = [row["from_n"], row["pairs"], row["certificates"], row["queries"], row["proof_s"]]
            shown = [("-" if c is None else str(c)) for c in cells]
            print(f"{path:<48} {verdict:<13} {shown[0]:>3} {shown[1]:>5} {shown[2]:>5} {shown[3]:>4} {shown[4]:>7} "
                  f"{run['cpu']:>6}")
            measured += 1
    if not measured:
        print("nothing was measured", file=sys.stderr)
        return 1
    print("\nCPU s: the whole run (captures at N = 2..8 included); proof s: fitting excluded, z3 and window runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
