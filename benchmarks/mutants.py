"""Mutants of every safe TPU example, checked by semcheck and run under JAX's TPU interpreter.

    python benchmarks/mutants.py [--devices 2] [--only NAME] [--workers 2] [--max-per-example N]

The safe examples are those of `examples/tpu/` whose `# semcheck: expect` declarations
(read by `semcheck.expectations`, as the gate reads them) give no error kind to any check at
the device count: `expect safe`, or only warnings such as `lowered_as_decrementing`.
A mutant deletes one synchronization statement of such an example (a semaphore signal or
wait, a DMA wait or start, a `pltpu.core_barrier`), leaving `pass` in its place: the first
`--max-per-example` of them in line order. Every mutant is checked by one `semcheck verify
--engine explicit` run (a check stops at its first counterexample: all a mutant needs is "an
error found or not"), and run in JAX's TPU interpreter (`pltpu.InterpretParams(
detect_races=True)`, two cores for a parallel grid) under the differential test's watcher
(`tests/test_tpu_differential.py`: hung once its CPU time stops with a thread in a semaphore
wait; a 0-byte wait before any signal mended). The interpreter runs one schedule; semcheck
covers all of them, so:

* UNSOUND: the interpreter hangs, reports a race or fails, and semcheck finds no error;
* ok: semcheck finds an error whenever the interpreter does (semcheck may find more: a
  schedule the interpreter did not take, or a leftover semaphore it only prints);
* rejected: the interpreter refuses the original kernel (non-decrementing waits,
  `semaphore_read`), so its mutants are not compared;
* inconclusive: semcheck ran out of budget and the interpreter did not finish;
* no interpreter verdict: the interpreter stalled in XLA's runtime or ran past its limit.

Exits 1 if any row is UNSOUND, 2 if nothing was selected (a check of nothing must not
pass). Slow: each mutant's interpreter run starts JAX (a few seconds each).

Measured at 77f19d3 on the shared 2-core machine (load 5-11 from other jobs):
`--devices 2` (the first 6 statements of each example): 191 mutants of 42 safe examples in
19 minutes: 183 agree (the interpreter hung on 90, semcheck found a hang in all 90; it
reported a race or failed on 32, semcheck found an error in all; it finished 61, and
semcheck found an error in 57 of them: leftovers and early arrivals the interpreter only
prints or cannot see; the other 4 remove a wait of a ring step that never runs at 2 devices),
8 are kernels the interpreter refuses (non-decrementing waits, `semaphore_read`), none
unsound. `--devices 4 --only capacity`, where a ring's later-step waits run: 12 mutants of 2
examples, all agree (a removed capacity wait is a `data_race` in both), 76 s.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from semcheck import expectations  # noqa: E402
from tests.test_tpu_differential import run_interpreter  # noqa: E402

EXAMPLES = ROOT / "examples" / "tpu"

# Statements whose removal changes the protocol.
SYNC_CALL = re.compile(
    r"\b(semaphore_signal|semaphore_wait|wait_send|wait_recv|wait|start|core_barrier)\s*\("
)
INTERPRETER_REFUSES = ("Non-decrementing wait is not supported", "semaphore_read")


@dataclass(frozen=True)
class Mutant:
    example: str
    line: int
    statement: str
    source: str


@dataclass
class Row:
    mutant: Mutant
    semcheck: str  # "safe" or the error kinds found
    interpreter: str  # finished / hung / race / failed / stalled / timed out
    status: str


def declared_errors(path: Path, devices: int) -> set[str]:
    """The error kinds the file's `# semcheck: expect` declarations (or its pyproject.toml's)
    give any of its checks at `devices` devices in one invocation, as the gate reads them
    (`semcheck.expectations`). A TPU kernel is checked on one core, and on two for a parallel
    grid: a file safe on one core and declared racy on two is not a safe example. A kernel no
    declaration names stands for the file's other kernels."""
    declarations = expectations.declarations_for(str(path))
    errors: set[str] = set()
    for kernel in {d.kernel for d in declarations} | {None}:
        for cores in (1, 2):
            errors |= expectations.declared_errors(expectations.declaration_for(declarations, kernel, devices, cores))
    return errors


def safe_examples(devices: int) -> list[Path]:
    """Examples of `examples/tpu/` declared safe (warnings allowed) for every check at `devices`."""
    return [path for path in sorted(EXAMPLES.glob("*.py")) if not declared_errors(path, devices)]


def mutants_of(path: Path, limit: int) -> list[Mutant]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    lines = source.splitlines()
    out = []
    for node in ast.walk(tree):
        # A statement of its own that is a call (or `x = call(...)` for a DMA start).
        if not isinstance(node, ast.Expr) or not isinstance(node.value, ast.Call):
            continue
        if node.lineno != node.end_lineno:
            continue
        text = lines[node.lineno - 1]
        if not SYNC_CALL.search(text):
            continue
        indent = text[: len(text) - len(text.lstrip())]
        mutated = lines[: node.lineno - 1] + [f"{indent}pass  # mutant: removed {text.strip()}"] + lines[node.lineno:]
        out.append(Mutant(path.name, node.lineno, text.strip(), "\n".join(mutated) + "\n"))
    return sorted(out, key=lambda m: m.line)[:limit]


def run_semcheck(folder: Path, devices: int) -> dict[str, str]:
    """Every mutant in `folder`, checked by one `semcheck verify` (JAX imported once, each
    capture a fork of its capture server): file name -> "safe", the error kinds found, or why
    there is no verdict. A check stops at its first counterexample (the default): a mutant
    needs only "an error found or not"."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "semcheck", "verify", str(folder), "--devices", str(devices), "--engine", "explicit",
         "--format", "json", "-q", "--timeout", "600", "--max-memory", "3000"],
        capture_output=True, text=True, env=env)
    try:
        results = json.loads(proc.stdout)["results"]
    except (json.JSONDecodeError, KeyError):
        return {path.name: f"no report (exit {proc.returncode})" for path in folder.glob("*.py")}
    by_file: dict[str, list[dict]] = {}
    for result in results:
        by_file.setdefault(Path(result["file"]).name, []).append(result)
    return {name: summary(checks) for name, checks in by_file.items()}


def summary(results: list[dict]) -> str:
    if any(r["verdict"] == "error" for r in results):
        return "error: " + next(r["error"] for r in results if r["verdict"] == "error").splitlines()[0][:60]
    kinds = sorted({v["kind"] for r in results for v in r["violations"] if v["severity"] == "error"})
    if any(r["verdict"] == "inconclusive" for r in results) and not kinds:
        return "inconclusive"
    return ", ".join(kinds) or "safe"


def mutant_file(mutant: Mutant) -> str:
    return f"{Path(mutant.example).stem}_L{mutant.line}.py"


def judge(mutant: Mutant, found: str, folder: Path, devices: int, parallel_grid: bool) -> Row:
    params = {"detect_races": True} | ({"num_cores_or_threads": 2} if parallel_grid else {})
    outcome, text = run_interpreter(str(folder / mutant_file(mutant)), devices, params, tail=None)
    if outcome == "finished" and "RACE DETECTED" in text:
        outcome = "race"
    if outcome == "failed" and any(r in text for r in INTERPRETER_REFUSES):
        status = "rejected"
    elif found.startswith(("error", "no report")):
        status = "semcheck error"
    elif outcome in ("stalled", "timed out"):
        status = "no interpreter verdict"
    elif outcome != "finished" and found in ("safe", "inconclusive"):
        status = "UNSOUND" if found == "safe" else "inconclusive"
    else:
        status = "ok"
    return Row(mutant, found, outcome, status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--only", default="", help="examples whose name contains this")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-per-example", type=int, default=6)
    args = parser.parse_args()
    examples = [p for p in safe_examples(args.devices) if args.only in p.name]
    work = []
    for path in examples:
        text = path.read_text(encoding="utf-8")
        parallel = "parallel" in text and "dimension_semantics" in text
        work.extend((m, parallel) for m in mutants_of(path, args.max_per_example))
    print(f"{len(work)} mutants of {len(examples)} safe examples at {args.devices} devices", file=sys.stderr)
    if not work:
        # A check of nothing must not pass: a changed declaration format or a typo in --only.
        print(f"mutants: nothing to check: {len(examples)} examples of {EXAMPLES} are declared safe at "
              f"{args.devices} devices (`# semcheck: expect safe`) and match --only {args.only!r}, "
              "with no synchronization statement to remove", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="semcheck-mutants-") as tmp:
        folder = Path(tmp)
        for mutant, _ in work:
            (folder / mutant_file(mutant)).write_text(mutant.source, encoding="utf-8")
        found = run_semcheck(folder, args.devices)
        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            rows = list(pool.map(
                lambda w: judge(w[0], found.get(mutant_file(w[0]), "no report"), folder, args.devices, w[1]), work))
    header = ("mutant", "removed", "semcheck", "interpreter", "status")
    cells = [(f"{r.mutant.example}:{r.mutant.line}", r.mutant.statement[:48], r.semcheck[:40], r.interpreter, r.status)
             for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(x.ljust(w) for x, w in zip(c, widths)))
    counts = {s: sum(r.status == s for r in rows) for s in sorted({r.status for r in rows})}
    print(f"\n{len(rows)} mutants: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if counts.get("UNSOUND") else 0


if __name__ == "__main__":
    sys.exit(main())
