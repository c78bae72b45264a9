"""What a run pays besides its checks: a model file's start-up, and a folder of kernel
scripts against its slowest capture (issue 28, part 4).

    python benchmarks/startup.py [--devices 2] [--files 20] [--models-only] [--repeat 5]

Every figure is CPU seconds of a whole `python -m semcheck verify ...` process, its children
included (os.wait4: user + system of the process and every descendant it waited for), so a
shared, loaded machine changes them little.

* **model file, start-up**: the whole process for one model file, less what the same load,
  check and report cost when repeated inside a warm process (`cli.main` called again): what
  a fresh process pays beyond the check. The least of `--repeat` runs.
* `--baseline TREE` runs a checkout of another commit beside this one, interleaved, so that
  the two columns see the same load (the machine is shared).
* **kernel folder**: `--files` TPU examples (the first ones of examples/tpu in name order)
  at one device count, as one `semcheck verify FOLDER` run (-j 1) and as one run with -j 2;
  beside it each file alone (one process each), the slowest of those, and the checks alone
  (every kernel's check_protocol, in this process, from a capture made beforehand). The
  target: the folder under 2x the slowest single file plus the checks.

Measured (`--repeat 5 --baseline` main 98a1bc9, this tree 3899a2d; 2 cores,
load average 2.7 at the start and 0.9 at the end, JAX 0.10.2, bytecode compiled):

| model file | whole process CPU | load + check + report, warm | start-up |
|---|---|---|---|
| ring_allgather.py at 3 (this tree) | 0.106 s | 0.014 s | 0.092 s |
| ring_allgather.py at 3 (main) | 0.100 s | 0.014 s | 0.086 s |
| double_buffer.py at 5 (this tree) | 0.108 s | 0.016 s | 0.093 s |
| double_buffer.py at 5 (main) | 0.106 s | 0.019 s | 0.087 s |
| nondec_poll.py at 21 (this tree) | 0.095 s | 0.012 s | 0.084 s |
| nondec_poll.py at 21 (main) | 0.102 s | 0.014 s | 0.088 s |

| 20 TPU examples at 2 devices | CPU | wall |
|---|---|---|
| one run of the folder, -j 1 (this tree) | 5.87 s | 11.2 s |
| one run of the folder, -j 2 (this tree) | 5.79 s | 6.2 s |
| each file alone, 20 runs summed (this tree) | 19.95 s | 22.9 s |
| slowest file alone, double_buffer_parallel_grid.py (this tree) | 1.39 s | 1.6 s |
| one run of the folder, -j 1 (main) | 17.21 s | 21.1 s |
| one run of the folder, -j 2 (main) | 15.86 s | 10.9 s |
| each file alone, 20 runs summed (main) | 20.20 s | 23.4 s |
| slowest file alone (main) | 1.59 s | 1.8 s |
| the checks alone, in one process | 0.33 s | |

A folder costs a third of what it did (JAX and Pallas imported once, by the capture server,
instead of once per capture: 0.35-0.4 CPU s each), and a single file what it did. Issue 28's
target, the folder under 2 x its slowest file + the checks (3.1 s here), is not met: what is
left per capture is JAX's own work in the child, about 0.22 CPU s (tracing and compiling the
script's jitted function, 0.13 s; the lowering's eager evaluation of the kernel's data, 0.04
to 0.3 s, each primitive at each shape a jit compile even when the persistent cache holds
the executable), which a fork cannot share: every child starts its own backend.

Start-up did not change, and is not under issue 28's 60 ms: of the 85-92 ms, Python's own
start is 16 (10 of it site-packages' .pth files, the editable install's finder among them),
and of the 61 ms the process then spends, creating semcheck's 67 dataclasses at import is 25
(26 of them in ir.py, 10 ms: `dataclasses` compiles each generated method from source). A model file is still loaded in
a forked child (3-5 ms of CPU): loaded in semcheck's process, a hang in C code or a thread
the file leaves running could not be stopped (docs/capture.md).

The persistent JAX compilation cache (SEMCHECK_JAX_CACHE) is left as the user has it and
warmed by a first run that is not counted; SEMCHECK_CAPTURE_CACHE is unset for every run.
Python's bytecode cache matters to start-up: a process that finds no __pycache__ (a checkout
run with PYTHONDONTWRITEBYTECODE, as in this project's sessions) compiles every module from
source, about 40 ms more; so each tree's semcheck is byte-compiled first, as pip does when it
installs a package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = [("ring_allgather", 3), ("double_buffer", 5), ("nondec_poll", 21)]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("SEMCHECK_CAPTURE_CACHE", "SEMCHECK_DEBUG", "SEMCHECK_CAPTURE_SERVER", "PYTHONPATH"):
        env.pop(name, None)
    return env


def process_cpu(tree: str, argv: list[str]) -> tuple[float, float, int]:
    """CPU seconds (user + system, descendants it waited for included), wall seconds and the
    exit code of `python -m semcheck ARGV` run from `tree` (a checkout: its semcheck is the
    one imported, `python -m` putting the working directory first)."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "semcheck", *argv], cwd=tree, env=environment(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - started, os.waitstatus_to_exitcode(status)


_WARM = """
import contextlib, io, resource, sys
from semcheck import cli
def cpu():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
best = float("inf")
for _ in range(int(sys.argv[1]) + 1):  # the first call warms (imports what the check needs)
    before = cpu()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli.main(sys.argv[2:])
    best = min(best, cpu() - before)
print(best)
"""


def warm_cpu(tree: str, argv: list[str], repeat: int) -> float:
    """CPU seconds of `cli.main(argv)` in a process that has run it before (the least of
    `repeat`), children included."""
    out = subprocess.run([sys.executable, "-c", _WARM, str(repeat), *argv], cwd=tree, env=environment(),
                         capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def model_rows(trees: dict[str, str], repeat: int) -> list[tuple]:
    rows = []
    for family, n in MODELS:
        argv = ["verify", os.path.join("models", f"{family}.py"), "--devices", str(n), "-q"]
        for label, tree in trees.items():
            whole = min(process_cpu(tree, argv)[0] for _ in range(repeat))
            check = warm_cpu(tree, argv, repeat)
            rows.append((f"{family}.py at {n}{label}", whole, check, whole - check))
    return rows


def kernel_files(count: int) -> list[str]:
    folder = os.path.join(ROOT, "examples", "tpu")
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".py"))[:count]


def checks_cpu(files: list[str], devices: int) -> float:
    """The checks of every kernel of `files`, in this process, captured beforehand."""
    from semcheck.run.checks import check_one
    from semcheck.frontends import load
    from semcheck.errors import LoadError

    protocols = []
    for path in files:
        for item in load(path, devices):
            protocols += item.prefixes if isinstance(item, LoadError) else [item]
    started = time.process_time()
    for protocol in protocols:
        check_one(protocol)
    return time.process_time() - started


def folder_rows(trees: dict[str, str], devices: int, count: int) -> tuple[list[tuple], float]:
    files = kernel_files(count)
    if len(files) < count:
        raise SystemExit(f"examples/tpu has {len(files)} files, not {count}")
    rows = []
    slowest_of_all = 0.0
    with tempfile.TemporaryDirectory(prefix="semcheck-startup-") as tmp:
        for path in files:
            shutil.copy(path, tmp)
        common = ["--devices", str(devices), "-q", "--max-memory", "3000"]
        for tree in trees.values():
            process_cpu(tree, ["verify", tmp, *common])  # warm the JAX compilation cache
        for label, tree in trees.items():
            singles = {os.path.basename(p): process_cpu(tree, ["verify", os.path.join(tmp, os.path.basename(p)),
                                                               *common]) for p in files}
            serial = process_cpu(tree, ["verify", tmp, *common])
            parallel = process_cpu(tree, ["verify", tmp, *common, "-j", "2"])
            slowest_name, slowest = max(singles.items(), key=lambda item: item[1][0])
            slowest_of_all = max(slowest_of_all, slowest[0])
            rows += [
                (f"{count} files, -j 1{label}", serial[0], serial[1], serial[2]),
                (f"{count} files, -j 2{label}", parallel[0], parallel[1], parallel[2]),
                (f"each file alone, summed{label}", sum(s[0] for s in singles.values()),
                 sum(s[1] for s in singles.values()), max(s[2] for s in singles.values())),
                (f"slowest file alone ({slowest_name}){label}", slowest[0], slowest[1], slowest[2]),
            ]
        checks = checks_cpu(files, devices)
    rows.append(("the checks alone, in one process", checks, float("nan"), 0))
    return rows, 2 * rows[3][1] + checks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--models-only", action="store_true")
    parser.add_argument("--baseline", metavar="TREE",
                        help="also run a checkout of another commit (e.g. `git archive main | tar -x -C TREE`), "
                             "interleaved with this one, so that both see the same load")
    args = parser.parse_args()
    trees = {"": ROOT}
    if args.baseline:
        trees = {" (this tree)": ROOT, " (baseline)": os.path.abspath(args.baseline)}
    for tree in trees.values():  # as an installed package has it (pip compiles on install)
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(tree, "semcheck")], check=True,
                       stdout=subprocess.DEVNULL)
    print(f"(load average {os.getloadavg()[0]:.1f})\n")
    print("| model file | whole process CPU | load + check + report, warm | start-up |")
    print("|---|---|---|---|")
    for name, whole, check, start in model_rows(trees, args.repeat):
        print(f"| {name} | {whole:.3f} s | {check:.3f} s | {start:.3f} s |")
    if args.models_only:
        return 0
    rows, target = folder_rows(trees, args.devices, args.files)
    print(f"\n| kernel scripts at {args.devices} devices | CPU | wall | exit |")
    print("|---|---|---|---|")
    for name, cpu, wall, code in rows:
        print(f"| {name} | {cpu:.2f} s | {wall:.1f} s | {code} |")
    folder = rows[0][1]
    print(f"\nfolder -j 1{next(iter(trees))}: {folder:.2f} CPU s; target 2 x its slowest file + checks = "
          f"{target:.2f} s: {'met' if folder <= target else 'NOT met'}")
    print(f"(load average {os.getloadavg()[0]:.1f} at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
