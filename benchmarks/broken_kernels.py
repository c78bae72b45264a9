"""A broken kernel's verdict against its correct twin's: CPU, states, report lines.

    python benchmarks/broken_kernels.py [--devices 8] [--only NAME] [--exhaustive] [--engine auto]

Most runs of a model checker are on a kernel that is still wrong, so a broken kernel must
be decided about as fast as the correct one (target: at most 2x its CPU) in a report that
fits a screen. Each row is one `semcheck verify FILE --devices N` run, as a user runs it,
in a process of its own with an empty capture cache: "CPU s" is that whole process's CPU
time with its capture subprocess (JAX's import and the script's trace included), "check s"
the check's own time (the JSON's stats.seconds), "lines" the text report's length.

Pairs (easy to extend: add to PAIRS or MUTANTS):

* PAIRS: the correct/broken examples of examples/tpu (each broken one documents its bug);
* MUTANTS: a correct kernel broken one line at a time as a user would (a capacity wait, a
  `.wait()` or a barrier dropped, the capacity signal sent to the wrong neighbour), written
  to a temporary folder at run time. A mutant whose line is not in its kernel any more is an
  error (exit 2), as is a run that selects nothing.

Exit 1 when a broken kernel comes out safe (it must not).

Measured on the shared 2-core machine (load 8-12 from other jobs; CPU time, not wall),
8 devices, `--engine auto`, each run with an empty capture cache. "before": main at
98a1bc9 (every finding of every kind, auto's fixed head start); "after": this branch
(first counterexample by default):

                                                 before (every finding)          after (first counterexample)
    broken kernel                                 CPU s   states lines  ratio   CPU s states lines ratio
    allreduce ring, capacity handshake            15.45   27,774   234  11.06x    1.49    223    49  0.95x
    allgather bidirectional                        1.39      609   802   1.11x    1.61    609   403  1.05x
    reduce-scatter capacity                        1.25       49    73   1.05x    1.42     49    73  1.02x
    reduce-scatter bidirectional                   4.27        0  3308   1.14x    2.45  2,137  1719  1.11x
    allgather ring capacity                        1.45    1,501    88   1.17x    1.36     93    40  1.03x
    ring permute                                   1.00       65    11   0.91x    1.07     37    11  1.07x
    allreduce: capacity wait dropped              21.27   38,344   884  15.22x    1.41    244    51  0.89x
    allreduce: first.wait() dropped                1.95    1,959  1638   1.39x    1.52     62    33  0.96x
    allreduce: local.wait() dropped                1.83      932   786   1.31x    1.53    131    53  0.97x
    allreduce: onward.wait_recv() dropped         55.16   81,665   928  39.47x    1.48    132    75  0.94x
    allreduce: capacity to the wrong neighbour    33.76   43,258   498  24.16x    1.65  2,385   123  1.04x
    allreduce: barrier wait dropped                2.15    9,263    34   1.54x    1.50     14    17  0.95x
    allgather ring: capacity wait dropped          1.72    1,737   320   1.38x    1.39    122    41  1.06x
    allgather ring: copy.wait() dropped            3.37      488   290   2.71x    1.27     58    34  0.96x
    allgather ring: capacity to the wrong neighb   1.88    4,495   120   1.51x    1.45    766    63  1.10x
    reduce-scatter: wait_recv() dropped            1.56      680   294   1.32x    1.18     61    31  0.85x
    reduce-scatter: barrier wait dropped          15.13  121,618    32  12.78x    1.25     20    16  0.89x
    ring permute: copy.wait() dropped              1.15       65    43   1.04x    1.03     65    23  1.03x

The correct kernels took 1.0-3.8 CPU s before and 1.0-2.2 after (the reduce-scatter
bidirectional one was decided by z3's counting probe before, by the search now). Every
ratio is now at most 1.11x (it was up to 39x); the long reports left are leftovers, whose
traces and site lists issue 27's report work folds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "tpu"


@dataclass(frozen=True)
class Pair:
    name: str
    correct: str  # a file under examples/tpu
    broken: str


@dataclass(frozen=True)
class Mutant:
    """`kernel` (under examples/tpu) with the line holding `line` replaced by `becomes`
    (None: dropped; its indentation is kept)."""

    name: str
    kernel: str
    line: str
    becomes: str | None = None


PAIRS = [
    Pair("allreduce ring, capacity handshake", "allreduce_ring.py", "allreduce_ring_no_capacity.py"),
    Pair("allgather bidirectional", "allgather_bidirectional.py", "allgather_bidirectional_missing_wait.py"),
    Pair("reduce-scatter capacity", "reduce_scatter_capacity.py", "reduce_scatter_capacity_deadlock.py"),
    Pair("reduce-scatter bidirectional", "reduce_scatter_bidirectional.py",
         "reduce_scatter_bidirectional_no_drain.py"),
    Pair("allgather ring capacity", "allgather_ring_capacity.py", "allgather_ring_overwrite.py"),
    Pair("ring permute", "ring_permute.py", "ring_permute_no_wrap.py"),
]

MUTANTS = [
    Mutant("allreduce: capacity wait dropped", "allreduce_ring.py",
           "pl.semaphore_wait(capacity, 1)  # my right neighbour's spare slot is free"),
    Mutant("allreduce: first.wait() dropped", "allreduce_ring.py", "first.wait()  # my block has left"),
    Mutant("allreduce: local.wait() dropped", "allreduce_ring.py", "    local.wait()"),
    Mutant("allreduce: onward.wait_recv() dropped", "allreduce_ring.py", "onward.wait_recv()  # the block"),
    Mutant("allreduce: capacity to the wrong neighbour", "allreduce_ring.py",
           "pl.semaphore_signal(capacity, 1, device_id=(left,))",
           "pl.semaphore_signal(capacity, 1, device_id=(right,))"),
    Mutant("allreduce: barrier wait dropped", "allreduce_ring.py", "    pl.semaphore_wait(barrier, 2)"),
    Mutant("allgather ring: capacity wait dropped", "allgather_ring_capacity.py",
           "pl.semaphore_wait(capacity, 1)  # the right neighbour has read its landing slot"),
    Mutant("allgather ring: copy.wait() dropped", "allgather_ring_capacity.py", "        copy.wait()"),
    Mutant("allgather ring: capacity to the wrong neighbour", "allgather_ring_capacity.py",
           "pl.semaphore_signal(capacity, 1, device_id=(left,))",
           "pl.semaphore_signal(capacity, 1, device_id=(right,))"),
    Mutant("reduce-scatter: wait_recv() dropped", "reduce_scatter_capacity.py", "copy.wait_recv()  # the partial"),
    Mutant("reduce-scatter: barrier wait dropped", "reduce_scatter_capacity.py", "    pl.semaphore_wait(barrier, 2)"),
    Mutant("ring permute: copy.wait() dropped", "ring_permute.py", "    copy.wait()"),
]


@dataclass
class Run:
    verdict: str
    kinds: str
    states: int
    lines: int
    cpu: float
    check: float


def mutate(mutant: Mutant, folder: str) -> Path:
    source = (EXAMPLES / mutant.kernel).read_text().splitlines(keepends=True)
    hits = [i for i, text in enumerate(source) if mutant.line in text]
    if len(hits) != 1:
        raise SystemExit(f"mutant {mutant.name!r}: {len(hits)} lines of {mutant.kernel} hold {mutant.line!r}; "
                         "expected exactly one (update MUTANTS)")
    i = hits[0]
    indent = source[i][: len(source[i]) - len(source[i].lstrip())]
    source[i] = (indent + "pass  # dropped\n" if mutant.becomes is None
                 else source[i].replace(mutant.line, mutant.becomes))
    path = Path(folder) / f"{Path(mutant.kernel).stem}__{_slug(mutant.name)}.py"
    path.write_text("".join(source))
    return path


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")[:60]


def check(path: Path, devices: int, engine: str, exhaustive: bool) -> Run:
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        report = Path(out) / "report.json"
        command = [sys.executable, "-m", "semcheck", "verify", str(path), "--devices", str(devices),
                   "--engine", engine, "--format", "json", "-o", str(report), "--max-memory", "3000"]
        if exhaustive:
            command.append("--exhaustive")
        env = {**os.environ, "SEMCHECK_CAPTURE_CACHE": cache}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        # run from elsewhere: `-m` puts the working folder first on the path (PYTHONPATH can pick
        # another semcheck, e.g. an older commit's to compare with)
        proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=out)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode not in (0, 1, 3):
            raise SystemExit(f"{path}: semcheck exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
        results = json.loads(report.read_text())["results"]
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    kinds = sorted({v["kind"] for r in results for v in r["violations"] if v["severity"] == "error"})
    verdicts = {r["verdict"] for r in results}
    verdict = next(v for v in ("error", "violation", "inconclusive", "safe") if v in verdicts)
    return Run(verdict, ",".join(kinds) or "-", sum(r["stats"]["states"] for r in results),
               len(proc.stdout.splitlines()), cpu, sum(r["stats"]["seconds"] for r in results))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--exhaustive", action="store_true", help="every finding (the old default)")
    parser.add_argument("--only", default=None, help="run the pairs and mutants whose name holds this text")
    args = parser.parse_args(argv)
    rows: list[tuple[str, Path, Path]] = []
    with tempfile.TemporaryDirectory() as folder:
        for pair in PAIRS:
            rows.append((pair.name, EXAMPLES / pair.correct, EXAMPLES / pair.broken))
        for mutant in MUTANTS:
            rows.append((mutant.name, EXAMPLES / mutant.kernel, mutate(mutant, folder)))
        if args.only:
            rows = [r for r in rows if args.only in r[0]]
        if not rows:
            print("no pair or mutant selected", file=sys.stderr)
            return 2
        print(f"{args.devices} devices, --engine {args.engine}{' --exhaustive' if args.exhaustive else ''}")
        print(f"{'pair':<46} {'variant':<7} {'verdict':<12} {'kinds':<34} {'states':>8} {'lines':>6} "
              f"{'check s':>8} {'CPU s':>7} {'ratio':>6}")
        correct_runs: dict[Path, Run] = {}
        unsound = []
        for name, correct, broken in rows:
            if correct not in correct_runs:
                correct_runs[correct] = check(correct, args.devices, args.engine, args.exhaustive)
            base = correct_runs[correct]
            bad = check(broken, args.devices, args.engine, args.exhaustive)
            for variant, run in (("correct", base), ("broken", bad)):
                ratio = f"{run.cpu / base.cpu:.2f}" if variant == "broken" else ""
                print(f"{name[:46]:<46} {variant:<7} {run.verdict:<12} {run.kinds[:34]:<34} {run.states:>8,} "
                      f"{run.lines:>6} {run.check:>8.2f} {run.cpu:>7.2f} {ratio:>6}", flush=True)
            if bad.verdict == "safe":
                unsound.append(name)
    if unsound:
        print(f"broken kernels found safe: {', '.join(unsound)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
