"""Mutants of every safe TPU example, checked by semcheck and run under JAX's TPU interpreter.

    python benchmarks/mutants.py [--devices 2] [--only NAME] [--workers 2] [--max-per-example N]

A mutant deletes one synchronization statement of a safe example in `examples/tpu/` (a
semaphore signal or wait, a DMA wait or start, a `pltpu.core_barrier`), leaving `pass` in its
place. Each mutant is checked with `semcheck verify --engine explicit` and run in JAX's TPU
interpreter (`pltpu.InterpretParams(detect_races=True)`, under a timeout, since it hangs
forever on a deadlock). The interpreter runs one schedule; semcheck covers all of them, so:

* UNSOUND: the interpreter hangs, reports a race or fails, and semcheck finds no error;
* ok: semcheck finds an error whenever the interpreter does (semcheck may find more: a
  schedule the interpreter did not take, or a leftover semaphore it only prints);
* rejected: the interpreter refuses the original kernel (non-decrementing waits,
  `semaphore_read`), so its mutants are not compared.

Exits 1 if any row is UNSOUND. Slow: each mutant starts JAX twice (a few seconds each).
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
EXAMPLES = ROOT / "examples" / "tpu"
TIMEOUT = 60.0  # an interpreter run that has not finished by then hangs (examples take ~3-10 s)

RUNNER = """
import json, runpy, sys
from jax.experimental.pallas import tpu as pltpu
pltpu.set_tpu_interpret_mode(pltpu.InterpretParams(**json.loads(sys.argv[2])))
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

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
    interpreter: str  # finished / hung / race / failed
    status: str


def safe_examples() -> list[Path]:
    """Examples whose docstring promises `safe` for every documented check."""
    found = []
    for path in sorted(EXAMPLES.glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        verdicts = re.findall(r"^Expected verdict[^:]*: (\w+)", doc, re.M)
        if verdicts and set(verdicts) == {"safe"}:
            found.append(path)
    return found


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
        mutated = lines[: node.lineno - 1] + [f"{indent}pass  # semcheck mutant: removed {text.strip()}"] + lines[node.lineno:]
        out.append(Mutant(path.name, node.lineno, text.strip(), "\n".join(mutated) + "\n"))
    return sorted(out, key=lambda m: m.line)[:limit]


def run_semcheck(path: Path, devices: int) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "semcheck", "verify", str(path), "--devices", str(devices), "--engine", "explicit",
         "--format", "json", "-q"], capture_output=True, text=True, env=env, timeout=900)
    try:
        results = json.loads(proc.stdout)["results"]
    except (json.JSONDecodeError, KeyError):
        return f"no report (exit {proc.returncode})"
    if any(r["verdict"] == "error" for r in results):
        return "error: " + next(r["error"] for r in results if r["verdict"] == "error").splitlines()[0][:60]
    kinds = sorted({v["kind"] for r in results for v in r["violations"] if v["severity"] == "error"})
    if any(r["verdict"] == "inconclusive" for r in results) and not kinds:
        return "inconclusive"
    return ", ".join(kinds) or "safe"


def run_interpreter(path: Path, devices: int, parallel_grid: bool) -> tuple[str, str]:
    params = {"detect_races": True}
    if parallel_grid:
        params["num_cores_or_threads"] = 2
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu",
               PYTHONPATH=str(ROOT))
    try:
        proc = subprocess.run([sys.executable, "-c", RUNNER, str(path), json.dumps(params)], env=env,
                              capture_output=True, text=True, timeout=TIMEOUT, cwd=path.parent)
    except subprocess.TimeoutExpired:
        return "hung", ""
    text = (proc.stdout or "") + (proc.stderr or "")
    if "RACE DETECTED" in text:
        return "race", text
    return ("finished" if proc.returncode == 0 else "failed"), text


def judge(mutant: Mutant, folder: Path, devices: int, parallel_grid: bool) -> Row:
    path = folder / f"{Path(mutant.example).stem}_L{mutant.line}.py"
    path.write_text(mutant.source, encoding="utf-8")
    found = run_semcheck(path, devices)
    outcome, text = run_interpreter(path, devices, parallel_grid)
    if outcome == "failed" and any(r in text for r in INTERPRETER_REFUSES):
        status = "rejected"
    elif found.startswith(("error", "no report")):
        status = "semcheck error"
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
    examples = [p for p in safe_examples() if args.only in p.name]
    work = []
    for path in examples:
        text = path.read_text(encoding="utf-8")
        parallel = "parallel" in text and "dimension_semantics" in text
        work.extend((m, parallel) for m in mutants_of(path, args.max_per_example))
    print(f"{len(work)} mutants of {len(examples)} safe examples at {args.devices} devices", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="semcheck-mutants-") as tmp, \
            ThreadPoolExecutor(max_workers=args.workers) as pool:
        rows = list(pool.map(lambda w: judge(w[0], Path(tmp), args.devices, w[1]), work))
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
