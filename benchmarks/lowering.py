"""What semcheck's own lowering of a captured TPU kernel costs (issue 28 part 4, issue 29 part 7).

    python benchmarks/lowering.py [--devices 2] [--baseline TREE] [--only NAME,...] [--cold] [--folder]

For each TPU example, the capture child (`python -m semcheck.frontends.capture`, as a capture
subprocess runs it) runs the script and lowers its kernels to protocols. The table gives the
CPU seconds of the child's lowering phase (`CaptureOutcome.cpu_seconds["lowering"]`, what the
`semcheck: captured ...` line calls lowering), of its script phase, and of the whole child
(user + system, from `wait4`), per tree. With `--baseline TREE` (a checkout of another commit,
e.g. `git archive main | tar -x -C TREE`) both trees run each example in turn, so that they
see the same load, and the last column says whether they lowered the same protocols: a
digest of the protocols, the lowering errors and the script error (each child runs from /, so
that paths print alike). A difference is printed, and the script exits 1.

JAX's persistent compilation cache (SEMCHECK_JAX_CACHE, frontends/capture.py) is warmed by an
untimed pass of every example first; `--cold` turns it off instead, as on a machine that has
none yet. `--folder` also runs `semcheck verify examples/tpu --devices N -j 1` once per tree,
with no capture cache (its CPU seconds include JAX's import, the scripts and the checks).

Measured 2026-12-06 on the shared 2-core development machine at load average 3 to 9 from
other sessions (CPU seconds are inflated by such load; the columns of one table were measured
interleaved), JAX 0.10.2, 2 devices, `--baseline` main bb096f2 (every example lowered to the
same protocols in both); docs/benchmarks.md ("Lowering a captured kernel") has the rest and
what the lowering's time goes to now. Lowering CPU seconds, this tree / main:

    warm cache, all 71 examples       10.97 / 16.44
      moe_dispatch_combine             0.61 / 1.06
      moe_expert_pipeline_shared_send  0.49 / 1.09
      moe_metadata_sem_unfenced        0.76 / 1.23
      allreduce_ring                   0.11 / 0.13
      smem_slot_double_buffer          0.14 / 0.31
    --cold, 12 examples (3 MoE)        8.20 / 11.58
    --folder (the whole run's CPU)     21.5, 22.1 / 31.1, 25.1
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "tpu")


def environment(tree: str, devices: int, cold: bool) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("SEMCHECK_CAPTURE_CACHE", "SEMCHECK_DEBUG", "SEMCHECK_CAPTURE_SERVER"):
        env.pop(name, None)
    env["PYTHONPATH"] = tree
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    if cold:
        env["SEMCHECK_JAX_CACHE"] = "off"
    return env


def capture(tree: str, path: str, devices: int, cold: bool) -> dict:
    """One capture child of `tree` on `path`: its phases' CPU seconds, the whole child's, and
    the digest of what it lowered."""
    with tempfile.TemporaryDirectory(prefix="semcheck-lowering-") as tmp:
        out = os.path.join(tmp, "outcome.pkl")
        proc = subprocess.Popen([sys.executable, "-m", "semcheck.frontends.capture", "--devices", str(devices),
                                 "--output", out, path], cwd="/", env=environment(tree, devices, cold),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, _, usage = os.wait4(proc.pid, 0)
        with open(out, "rb") as f:
            outcome = pickle.load(f)
    seen = repr((outcome.protocols, outcome.errors, outcome.script_error)).encode()
    return {"lowering": outcome.cpu_seconds.get("lowering", float("nan")),
            "script": outcome.cpu_seconds.get("script", float("nan")),
            "child": usage.ru_utime + usage.ru_stime, "digest": hashlib.sha256(seen).hexdigest()[:12],
            "error": outcome.script_error}


def folder_cpu(tree: str, devices: int, cold: bool) -> tuple[float, float]:
    """CPU and wall seconds of `semcheck verify examples/tpu --devices N -j 1` run from `tree`."""
    env = environment(tree, devices, cold)
    del env["XLA_FLAGS"], env["JAX_PLATFORMS"]  # as a user runs it: semcheck sets them for its children
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "semcheck", "verify", EXAMPLES, "--devices", str(devices), "-j", "1",
                             "-q", "--max-memory", "3000"], cwd="/", env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--baseline", metavar="TREE")
    parser.add_argument("--only", help="comma-separated example names (without .py)")
    parser.add_argument("--cold", action="store_true", help="without JAX's persistent compilation cache")
    parser.add_argument("--folder", action="store_true", help="also the whole folder as one `semcheck verify` run")
    args = parser.parse_args()
    names = sorted(n[:-3] for n in os.listdir(EXAMPLES) if n.endswith(".py"))
    if args.only:
        wanted = args.only.split(",")
        missing = set(wanted) - set(names)
        if missing:
            raise SystemExit(f"no such example: {', '.join(sorted(missing))}")
        names = wanted
    if not names:
        raise SystemExit("no TPU example selected")
    trees = {"this": ROOT} if not args.baseline else {"this": ROOT, "baseline": os.path.abspath(args.baseline)}
    if not args.cold:
        for name in names:
            for tree in trees.values():
                capture(tree, os.path.join(EXAMPLES, name + ".py"), args.devices, False)
    print(f"(load average {os.getloadavg()[0]:.1f}; {args.devices} devices; "
          f"{'no' if args.cold else 'a warm'} persistent compilation cache)\n")
    header = " | ".join(f"{label}: lowering | script | child" for label in trees)
    print(f"| example | {header} | same protocols |")
    print("|---|" + "---|" * (3 * len(trees) + 1))
    totals = {label: [0.0, 0.0, 0.0] for label in trees}
    different = []
    for name in names:
        runs = {label: capture(tree, os.path.join(EXAMPLES, name + ".py"), args.devices, args.cold)
                for label, tree in trees.items()}
        for label, run in runs.items():
            for k, key in enumerate(("lowering", "script", "child")):
                totals[label][k] += run[key]
        same = len({run["digest"] for run in runs.values()}) == 1
        if not same:
            different.append(name)
        cells = " | ".join(f"{run['lowering']:.2f} | {run['script']:.2f} | {run['child']:.2f}" for run in runs.values())
        print(f"| {name} | {cells} | {'yes' if same else 'NO'} |")
    cells = " | ".join(f"{t[0]:.2f} | {t[1]:.2f} | {t[2]:.2f}" for t in totals.values())
    print(f"| all {len(names)} | {cells} | {'yes' if not different else f'{len(different)} differ'} |")
    if args.folder:
        print(f"\n| `semcheck verify examples/tpu --devices {args.devices} -j 1` | CPU | wall |")
        print("|---|---|---|")
        for label, tree in trees.items():
            cpu, wall = folder_cpu(tree, args.devices, args.cold)
            print(f"| {label} | {cpu:.1f} s | {wall:.0f} s |")
    if different:
        print(f"\nlowered differently: {', '.join(different)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
