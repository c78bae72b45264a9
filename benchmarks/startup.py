"""What a run pays besides its checks: a model file's start-up, and a folder of kernel
scripts against its slowest capture (issue 28, part 4).

    python benchmarks/startup.py [--devices 2] [--files 20] [--models-only] [--repeat 5]

Every figure is CPU seconds of a whole `python -m semcheck verify ...` process, its children
included (os.wait4: user + system of the process and every descendant it waited for), so a
shared, loaded machine changes them little.

* **model file, start-up**: the whole process for one model file, less what the same load,
  check and report cost when repeated inside a warm process (`cli.main` called again): what
  a fresh process pays beyond the check. The least of `--repeat` runs.
* **kernel folder**: `--files` TPU examples (the first ones of examples/tpu in name order)
  at one device count, as one `semcheck verify FOLDER` run (-j 1) and as one run with -j 2;
  beside it each file alone (one process each), the slowest of those, and the checks alone
  (every kernel's check_protocol, in this process, from a capture made beforehand). The
  target: the folder under 2x the slowest single file plus the checks.

The persistent JAX compilation cache (SEMCHECK_JAX_CACHE) is left as the user has it and
warmed by a first run that is not counted; SEMCHECK_CAPTURE_CACHE is unset for every run.
Python's bytecode cache matters to start-up: a run with PYTHONDONTWRITEBYTECODE and no
__pycache__ compiles every module from source (about 40 ms more); the table says which.
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
MODELS = [("ring_allgather", 3), ("double_buffer", 5), ("nondecrementing_poll", 21)]


def environment() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SEMCHECK_CAPTURE_CACHE", None)
    env.pop("SEMCHECK_DEBUG", None)
    return env


def process_cpu(argv: list[str]) -> tuple[float, float, int]:
    """CPU seconds (user + system, descendants it waited for included), wall seconds and the
    exit code of `python -m semcheck ARGV`."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "semcheck", *argv], cwd=ROOT, env=environment(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - started, proc.returncode


def warm_cpu(argv: list[str], repeat: int) -> float:
    """CPU seconds of `cli.main(argv)` in this process once it is warm (the least of `repeat`),
    children included."""
    import contextlib
    import io
    import resource

    from semcheck import cli

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    best = float("inf")
    for _ in range(repeat + 1):  # the first call warms (imports what the check needs)
        before = cpu()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            cli.main(list(argv))
        best = min(best, cpu() - before)
    return best


def model_rows(repeat: int) -> list[tuple]:
    rows = []
    for family, n in MODELS:
        argv = ["verify", os.path.join("models", f"{family}.py"), "--devices", str(n), "-q"]
        whole = min(process_cpu(argv)[0] for _ in range(repeat))
        check = warm_cpu(argv, repeat)
        rows.append((f"{family}.py at {n}", whole, check, whole - check))
    return rows


def kernel_files(count: int) -> list[str]:
    folder = os.path.join(ROOT, "examples", "tpu")
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".py"))[:count]


def checks_cpu(files: list[str], devices: int) -> float:
    """The checks of every kernel of `files`, in this process, captured beforehand."""
    from semcheck.checks import check_protocol
    from semcheck.frontends import load
    from semcheck.errors import LoadError

    protocols = []
    for path in files:
        for item in load(path, devices):
            protocols += item.prefixes if isinstance(item, LoadError) else [item]
    started = time.process_time()
    for protocol in protocols:
        check_protocol(protocol)
    return time.process_time() - started


def folder_rows(devices: int, count: int) -> list[tuple]:
    files = kernel_files(count)
    if len(files) < count:
        raise SystemExit(f"examples/tpu has {len(files)} files, not {count}")
    with tempfile.TemporaryDirectory(prefix="semcheck-startup-") as tmp:
        for path in files:
            shutil.copy(path, tmp)
        common = ["--devices", str(devices), "-q", "--max-memory", "3000"]
        process_cpu(["verify", tmp, *common])  # warm the JAX compilation cache
        singles = {os.path.basename(p): process_cpu(["verify", os.path.join(tmp, os.path.basename(p)), *common])
                   for p in files}
        serial = process_cpu(["verify", tmp, *common])
        parallel = process_cpu(["verify", tmp, *common, "-j", "2"])
        checks = checks_cpu(files, devices)
    slowest_name, slowest = max(singles.items(), key=lambda item: item[1][0])
    rows = [
        (f"{count} files, -j 1", serial[0], serial[1], serial[2]),
        (f"{count} files, -j 2", parallel[0], parallel[1], parallel[2]),
        (f"each file alone, summed ({count} processes)", sum(s[0] for s in singles.values()),
         sum(s[1] for s in singles.values()), max(s[2] for s in singles.values())),
        (f"slowest file alone ({slowest_name})", slowest[0], slowest[1], slowest[2]),
        ("the checks alone, in one process", checks, float("nan"), 0),
    ]
    target = 2 * slowest[0] + checks
    return rows, target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--models-only", action="store_true")
    args = parser.parse_args()
    bytecode = "no bytecode cache" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "bytecode cache"
    print(f"({bytecode}; load average {os.getloadavg()[0]:.1f})\n")
    print("| model file | whole process CPU | load + check + report, warm | start-up |")
    print("|---|---|---|---|")
    for name, whole, check, start in model_rows(args.repeat):
        print(f"| {name} | {whole:.3f} s | {check:.3f} s | {start:.3f} s |")
    if args.models_only:
        return 0
    rows, target = folder_rows(args.devices, args.files)
    print(f"\n| kernel scripts at {args.devices} devices | CPU | wall | exit |")
    print("|---|---|---|---|")
    for name, cpu, wall, code in rows:
        print(f"| {name} | {cpu:.2f} s | {wall:.1f} s | {code} |")
    folder = rows[0][1]
    print(f"\nfolder -j 1: {folder:.2f} CPU s; target 2 x slowest + checks = {target:.2f} s: "
          f"{'met' if folder <= target else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
