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

* `--instructions` counts, under valgrind's callgrind, the instructions of the first model's
  whole `semcheck verify` process (the forked child that loads the model apart) and of
  `python -c pass`: a figure no load moves, and the share of it spent compiling source text
  that `dataclasses` and `namedtuple` generate.
* `--python PY` runs another interpreter, still from the tree's root (so the tree's
  semcheck): e.g. a virtual environment where semcheck is installed from a wheel, whose
  start imports no editable install's finder (pathlib, urllib, ipaddress: `python -c pass`
  takes 88 M instructions with the finder, 38 M without).

Measured 2026-12-06 on the shared 2-core development machine (JAX 0.10.2, Python 3.11.7,
bytecode compiled), this tree against main 7851e5b interleaved (`--baseline`); CPU seconds
at load average 4.3 to 4.9 from other sessions, which inflates them (and main's with them):

| model file (`--repeat 15`, editable install) | whole process CPU | load + check + report, warm | start-up |
|---|---|---|---|
| ring_allgather.py at 3 (this tree) | 0.071 s | 0.013 s | 0.059 s |
| ring_allgather.py at 3 (main) | 0.108 s | 0.012 s | 0.096 s |
| double_buffer.py at 5 (this tree) | 0.070 s | 0.018 s | 0.053 s |
| double_buffer.py at 5 (main) | 0.120 s | 0.015 s | 0.104 s |
| nondec_poll.py at 21 (this tree) | 0.072 s | 0.011 s | 0.061 s |
| nondec_poll.py at 21 (main) | 0.108 s | 0.011 s | 0.097 s |

| model file (`--repeat 15 --python` a venv with semcheck installed from a wheel) | whole process CPU | warm | start-up |
|---|---|---|---|
| ring_allgather.py at 3 (this tree) | 0.070 s | 0.015 s | 0.054 s |
| ring_allgather.py at 3 (main) | 0.112 s | 0.015 s | 0.097 s |
| double_buffer.py at 5 (this tree) | 0.071 s | 0.016 s | 0.055 s |
| double_buffer.py at 5 (main) | 0.117 s | 0.019 s | 0.098 s |
| nondec_poll.py at 21 (this tree) | 0.073 s | 0.011 s | 0.062 s |
| nondec_poll.py at 21 (main) | 0.115 s | 0.014 s | 0.101 s |

| the process (callgrind; a forked child apart) | modules | instructions | of them compiling generated source |
|---|---|---|---|
| python -c pass, editable / wheel | 0 | 88 M / 38 M | - |
| semcheck verify ring_allgather.py --devices 3, editable (this tree) | 203 | 362 M | 5 M (1%) |
| the same, editable (main) | 207 | 683 M | 272 M (40%) |
| the same, wheel (this tree) | 197 | 347 M | 6 M (2%) |
| the same, wheel (main) | 201 | 666 M | 276 M (41%) |

Measured again at load 0.8 with nothing else running (main b4f26e9, bytecode compiled, three
runs of `--models-only --repeat 15`): start-up 0.052-0.056 s (ring), 0.054-0.059 s (double
buffer), 0.055-0.057 s (poll), whole processes 0.062-0.075 s: issue 28's target, a model
file under 60 ms of start-up, is met. (With PYTHONDONTWRITEBYTECODE set and a module edited
since its bytecode was written, every run compiles it again: 0.056-0.059 s in the first run.)
Before that, it could not be shown on an idle machine: the machine never was. At load 4 to 5 the column varies between runs of the same
tree, 0.053-0.066 s (a third run: 0.059 / 0.066 / 0.060), while main in the same runs takes
0.096-0.111 s, so this tree takes 0.55-0.6 of main's start-up; main measured 0.090-0.092 s at
load 2.5 (this branch then 0.054-0.057 s) and 0.091 s at load 0.7, which puts this tree at
about 0.050-0.055 s idle. In instructions, the measure no load moves, it is 53% of main's.
What changed, in instructions of the ring's whole process (wheel: 666 M -> 347 M):

* Every data type of the package is a `semcheck.records.record`: a `dataclasses.dataclass`
  whose methods are closures over its field names instead of source text compiled at
  import (0.3 ms a class; 273 M instructions for the 85 classes a model run defines, now
  none). Its annotations are shown to `dataclass` as placeholders, which spares a regular
  expression matched three times a field (9 M). The price is at run time: see records.py.
* `semcheck.cli.main` imports the command's modules with the garbage collector paused and
  freezes what they made (cli/__init__.py): no collection scans them again, at exit
  included (25 M).
* A check that found nothing imports nothing of the violation path (engines/violations.py,
  the trace, the causal analysis, the diagnosis: 4 M; tests/test_startup.py).

What is left of the 347 M: Python's own start and exit (29 M and 11 M); importing 197
modules (262 M: unmarshalling their bytecode 44 M, creating their classes 68 M, records and
enums included, their other statements and the import system the rest); the CLI, the fork,
the check and the report (about 45 M); the garbage collector, mostly before the freeze,
17 M of all these. The largest module left is tomllib (18 M with `string` and `datetime`),
read because the tree's pyproject.toml has a [tool.semcheck] table; then the report's
violation half in report/text.py (under 2 M); exiting without finalizing (`os._exit`,
11 M) is not taken: it would skip atexit handlers and the joining of threads. Python 3.12 and 3.13 added more instructions than
3.11 for the same imports (678 M and 648 M on the tree before records).

The model file is loaded in a forked child (issue 30), which stays: at the least / median
of 100 loads in a warm process, 5.5 / 8.6 ms of CPU (parent and child) for ring_allgather.py
at 3 against 0.4 ms loaded in-process; a bare fork and exit is 1.4 ms, a call of nothing
isolated 2.7 / 5.6 ms (the child's session, signals and watcher thread, the pipe). In a fresh
process it costs more: the whole process of the ring at 3 took 63 ms with the fork and 56
without (least of 30, load 3), with 6,285 minor page faults against 3,138, the pages the
parent and the child write after the fork. The start-up column subtracts a warm run that
forks too, so the child is mostly outside it; the whole-process column and `spin.py`'s
ratio pay it.

| 20 TPU examples at 2 devices | fa42e3e, load 5-6 | 833e53c, load 1.3-2.3 |
|---|---|---|
| one run of the folder, -j 1 | 7.61 s | 4.52 s (five runs: 4.33-4.87, median 4.45) |
| one run of the folder, -j 2 | 8.20 s | 4.67 s |
| each file alone, 20 runs summed | 22.82 s | 15.86 s |
| slowest file alone | 1.37 s | 0.89 s (allreduce_ring_no_capacity_wait.py) |
| the checks alone, in one process | 0.21 s | 0.16 s |

(CPU seconds; the fa42e3e column predates the lowering's one request to JAX per view,
branch `eval`.) At 833e53c the folder is 4.5 CPU s against a target of 2 x 0.89 + 0.16 =
1.94 s: not met, and not within reach of one fresh process per capture. Where the 4.5 s go:
the capture server's start and preload, 0.45 s; the parent (semcheck, the 20 checks, the
report), about 0.3 s; the 20 forked capture children, 3.8 s, 0.15-0.24 s each (running the
script 55%, lowering its kernels 40%). A capture run in a process that has just captured
another script takes 0.08 s: the other 0.11 s of each child is its first capture in a fresh
process, JAX's own work that needs the backend, so the server (which starts none: XLA's
threads must not be forked) cannot do it for its children. It is 14 more jit compilations
of one primitive each (jax/_src/dispatch.py, apply_primitive: the script's eager operations
and the lowering's folds of scalars), each a lowering to HLO in a fresh MLIR context (4.5
ms, 2.5 of them `mlir.make_ir_context`) and a read of JAX's persistent cache (2.5 ms), and
the CPU backend's start (5 ms). Both captures also compile the script's program once, which
is never cached (it carries semcheck's operand callback, and JAX writes no cache entry for a
program with host callbacks: jax/_src/compiler.py, `_cache_write`, JAX 0.10.2): 8-36 ms.
Even 20 captures as warm as that would leave 0.45 + 20 x 0.08 + 0.3 = 2.35 s, above the
target: meeting it needs captures that share one process's backend and compiled
executables, which the isolation of a capture (one child per script and device count)
rules out. (The target moves with the slowest file: 2 x 1.37 + 0.21 = 2.94 s at fa42e3e.)
The server preloads every module a TPU capture child would import after the fork (833e53c:
19 of them, semcheck.semantics and Mosaic TPU's lowering of pallas_call among them; about 7
ms a child, 3% of the folder: five runs interleaved with main c8f9fc9, median 4.45 against
4.60 CPU s). Profiled in one child (allreduce_ring.py, 0.38 CPU s, fa42e3e): running the script 42%, lowering the captured kernel 56%,
most of both JAX dispatching one primitive at a time (22 jit compilations, each a lowering
to HLO and a persistent-cache lookup; without the cache two scripts take 2.2 CPU s instead
of 1.6), the CPU backend's start 2.5%.

* `--captures` runs only the folder's capture children, forked one per file as the capture
  server forks them from a process that imported what the server imports, and prints their
  CPU (user, system), minor page faults and the CPU of their phases (script, lowering),
  summed over the files, `--repeat` times per tree (interleaved with `--baseline`).

Per capture (branch `fold`, 2026-12-06, load 6-7 from other sessions, JAX 0.10.2), against
main fa7bb6a interleaved, `--captures --repeat 3`:

| 20 capture children at 2 devices | CPU (user + sys) | sys | minor page faults | script | lowering |
|---|---|---|---|---|---|
| main fa7bb6a, three runs | 3.79-4.00 s | 0.92-1.00 s | 300,020-301,483 | 2.13-2.22 s | 1.40-1.52 s |
| folds batched (lower/folds.py) | 3.41-3.56 s | 0.83-0.97 s | 276,074-279,142 | 2.11-2.20 s | 1.04-1.09 s |
| main 990187a (prov merged), load 2-3 | 3.87-4.44 s | 0.93-1.08 s | 300,546-305,488 | 2.16-2.45 s | 1.43-1.70 s |
| the same with this branch merged | 3.51-3.80 s | 1.01-1.06 s | 276,780-280,497 | 2.19-2.34 s | 1.05-1.17 s |

and the whole folder (`semcheck verify FOLDER -j 1`, CPU of the process tree from
`perf stat` task-clock, three runs interleaved): main 4.82 / 5.05 / 5.20 s, 339,000-342,000
page faults; folds batched 4.46 / 4.56 / 5.05 s, 312,000-316,000. This script's own table,
`--baseline` main fa7bb6a, `--repeat 3`, load 5.7-6.0:

| kernel scripts at 2 devices | CPU | minor page faults |
|---|---|---|
| 20 files, -j 1, folds batched / main | 5.08 s / 5.50 s | 315,867 / 341,239 |
| 20 files, -j 2, folds batched / main | 4.91 s / 5.45 s | 326,351 / 348,000 |
| each file alone, summed, folds batched / main | 16.45 s / 16.01 s | 807,256 / 830,744 |
| slowest file alone, folds batched / main | 0.94 s / 0.93 s | 41,737 / 43,458 |
| the checks alone, in one process | 0.18 s | |

(target 2 x 0.94 + 0.18 = 2.07 s: not met). A file alone gains little: a one-kernel script
folds few distinct primitives, and its fold program is one compilation of its own.

What changed: the lowering folds a kernel's scalar arithmetic through JAX, and binding a
primitive eagerly compiled a program of that primitive alone (a jit trace, a lowering in a
fresh MLIR context, a persistent-cache read): 341 folds in the 20 children, 5-7 ms each
where JAX had not compiled that primitive in the child yet, 0.58 CPU s. Now the integer
folds (and the element-placing ones of any dtype: broadcast, reshape, slice, select) of a
kernel are slots of one program per kernel (lower/folds.py, which says why the values are
the eager ones): 0.19 CPU s for the same folds.

Measured and not taken:

* One MLIR context for all of a capture child's lowerings instead of JAX's fresh one per
  lowering (`make_ir_context`, 1.5-2.5 ms each, about 15 a child): 0.5-0.75 CPU s less over
  the 20 children and 47,000 fewer page faults, but JAX 0.10.2 depends on a fresh context:
  with one, the eager `argmax` of the MoE examples failed in JAX's pass pipeline ("symbol's
  parent must have the SymbolTable trait" on an earlier program's module), turning four
  verdicts into errors. Reverted (5923dc5).
* XLA flags for the child's compilations (`--xla_backend_optimization_level=0`,
  `--xla_llvm_disable_expensive_passes`, `--xla_cpu_parallel_codegen_split_count=1`, the
  old runtime): the one program never cached, the script's own with the operand callback
  (35-45 ms), moved within the noise, 25-36 ms at best at level 0; and a lower LLVM level can
  change float results (XLA's CPU backend always allows FMA contraction, `AllowFPOpFusion =
  Fast` in xla/service/cpu/cpu_compiler.cc, so fused multiply-adds form or not with the
  level): not exact, not taken.
* glibc malloc tunables for the server, inherited by its children
  (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, `arena_max=1`, a high mmap and trim
  threshold): page faults 3-26% fewer, CPU unchanged within the noise (huge pages cost
  their zeroing). Where a child's faults come from (smaps of one child, allreduce_ring.py,
  17,000 faults): about 6,900 pages copied on write from the server (the Python heap and its
  obmalloc arenas, whose reference counts every object the child touches writes, and
  libpython's data), 8,400 fresh (the backend's and the compilers' heap); `gc.freeze()`
  changes neither.
* A warm-up lowering in the server before it forks (so that children inherit JAX's and
  MLIR's first-use work): lowering starts the CPU backend and its threads even for
  `lowering_platforms`, which the server must not have. One MLIR context made in the
  server (the first one in a process takes 10 ms, later ones 2) saved nothing measurable;
  a stock of them does (below).
* JAX's Pallas TPU lowering of each kernel (the "builds for a TPU" check, 13 ms a kernel,
  0.36 s over the 27 kernels of the 20 files, half of it Mosaic's lowering proper) is
  asked once per captured kernel, and no two kernels of one capture were the same here; the
  capture cache keeps its answer. It decides a finding, so it is not skipped.
* JAX's persistent cache with a size bound (semcheck sets one) locks and writes an access
  time on every read: 0.33 ms against 0.015 ms a read, about 4 ms a child; kept (the bound).

A stock of fresh MLIR contexts (frontends/mlir_contexts.py, 2026-12-07): JAX lowers every
program in a context of its own, made fresh with every dialect loaded; a capture child of
these examples makes 10-15 (allreduce_ring.py: 11, 59 ms in a cold process, the first 24).
The server makes 16 before it forks its second child (not before the first: a run of one
capture would pay 40-80 ms for nothing), and each later child takes one per lowering from
its copy, so no context serves two lowerings. `--captures --repeat 5` against main df02039
interleaved (load 2-3 from other sessions, JAX 0.10.2):

| 20 capture children at 2 devices | CPU (user + sys) | minor page faults | script | lowering |
|---|---|---|---|---|
| main df02039, five runs | 4.39-5.46 s (mean 5.04) | 283,065-285,425 | 2.72-3.34 s | 1.34-1.74 s |
| the stock, the same runs | 3.74-4.91 s (mean 4.23) | 247,626-250,915 | 2.29-2.97 s | 1.12-1.53 s |

(10-23% less CPU in each pair of runs; both phases gain, as the script's eager operations
and program lower too). The whole folder, one run each interleaved at load 2.5: -j 1 5.80
against 6.56 s, -j 2 5.38 against 5.94 s; each file alone, summed, 19.47 against 21.15 s
(a run of one file forks one child and makes no stock).

Measured with the stock and not taken (each timed in a forked child, load 3-6): the
server running JAX's search for PJRT plugins where none is installed (the entry points of
46 distributions read by every child's first backend: 3 ms of its 8, not the 15 cProfile
showed), and making the tables Python, JAX and semcheck make at a first use (sysconfig's
configuration, the expressions that tell the user's files from JAX's: 2.5 ms): together
0.1 CPU s over the 20 children, not worth reaching into two more of JAX's internals.

Issue 28's target, 2 x the slowest file alone + the checks (about 2.07 s), is not within
reach of a fresh child per capture: the 20 children alone still take 3.4-3.6 CPU s, of which
the parts no isolated child can share are the backend's start (about 15 ms), the script's
program compiled with the operand callback (35-45 ms, never cached by JAX), the script's
own eager operations (a program each, from the persistent cache) and the TPU lowering check
(13 ms a kernel); the server's start and preload (0.45 s) and the parent (0.3 s) come on top.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = [("ring_allgather", 3), ("double_buffer", 5), ("nondec_poll", 21)]
# The interpreter every run uses (--python): this one, or e.g. a virtual environment where
# semcheck is installed from a wheel, whose start imports no editable install's finder.
PYTHON = sys.executable


def environment() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("SEMCHECK_CAPTURE_CACHE", "SEMCHECK_DEBUG", "SEMCHECK_CAPTURE_SERVER", "PYTHONPATH"):
        env.pop(name, None)
    return env


def process_cpu(tree: str, argv: list[str]) -> tuple[float, float, int, int]:
    """CPU seconds (user + system, descendants it waited for included), wall seconds, the
    exit code and the minor page faults (the same processes) of `python -m semcheck ARGV`
    run from `tree` (a checkout: its semcheck is the one imported, `python -m` putting the
    working directory first)."""
    started = time.perf_counter()
    proc = subprocess.Popen([PYTHON, "-m", "semcheck", *argv], cwd=tree, env=environment(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return (usage.ru_utime + usage.ru_stime, time.perf_counter() - started, os.waitstatus_to_exitcode(status),
            usage.ru_minflt)


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
    out = subprocess.run([PYTHON, "-c", _WARM, str(repeat), *argv], cwd=tree, env=environment(),
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


_IMPORTED = """
import contextlib, io, json, sys
from semcheck import cli
with contextlib.redirect_stdout(io.StringIO()):
    cli.main(sys.argv[1:])
print(json.dumps([name for name in sys.modules if not name.startswith(("__main__", "semcheck_model_"))]))
"""


def imported_by(tree: str, argv: list[str]) -> list[str]:
    """The modules `semcheck ARGV` has imported when it ends, in the order it imported them."""
    out = subprocess.run([PYTHON, "-c", _IMPORTED, *argv], cwd=tree, env=environment(),
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def instructions(tree: str, argv: list[str]) -> tuple[int, int]:
    """Instructions a fresh `python ARGV` run from `tree` executes (valgrind's callgrind: the
    same count at any load), the process itself: a child it forks (the model file's load)
    counts apart, in its own file. And of those the ones spent in `exec`/`eval` of source
    text (PyRun_StringFlags: what `dataclasses` and `namedtuple` generate, and site's .pth
    lines). Under valgrind's slow clock a run is sometimes ended by SIGALRM, the budget's
    timer signal delivered after its phase put the default action back (valgrind holds
    signals back and delivers them late); such a run is run again."""
    for _ in range(5):
        with tempfile.TemporaryDirectory(prefix="semcheck-callgrind-") as tmp:
            proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.%p",
                                     PYTHON, *argv], cwd=tree, env=environment(),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            code = proc.wait()
            if code == 128 + signal.SIGALRM or code == -signal.SIGALRM:
                continue
            if code not in (0, 1):
                raise SystemExit(f"valgrind python {' '.join(argv)} failed (exit {code})")
            annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", os.path.join(tmp, f"cg.{proc.pid}")],
                                       capture_output=True, text=True, check=True).stdout
        total = generated = 0
        for line in annotated.splitlines():
            count = int(line.split()[0].replace(",", "")) if line.strip()[:1].isdigit() else 0
            if "PROGRAM TOTALS" in line:
                total = count
            elif "pythonrun.c:PyRun_StringFlags " in line and not generated:
                generated = count
        return total, generated
    raise SystemExit(f"valgrind python {' '.join(argv)}: ended by SIGALRM five times")


def instruction_rows(trees: dict[str, str]) -> list[tuple]:
    """Start-up in instructions: Python alone, and the whole `semcheck verify` process of the
    first model of MODELS, per tree."""
    family, n = MODELS[0]
    argv = ["verify", os.path.join("models", f"{family}.py"), "--devices", str(n), "-q"]
    bare, site_exec = instructions(ROOT, ["-c", "pass"])  # site's own exec: the .pth files' lines
    rows = [("python -c pass", bare, None, 0)]
    for label, tree in trees.items():
        modules = imported_by(tree, argv)
        total, generated = instructions(tree, ["-m", "semcheck", *argv])
        rows.append((f"semcheck verify {family}.py --devices {n}{label}", total, generated - site_exec, len(modules)))
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
                (f"{count} files, -j 1{label}", *serial),
                (f"{count} files, -j 2{label}", *parallel),
                (f"each file alone, summed{label}", sum(s[0] for s in singles.values()),
                 sum(s[1] for s in singles.values()), max(s[2] for s in singles.values()),
                 sum(s[3] for s in singles.values())),
                (f"slowest file alone ({slowest_name}){label}", *slowest),
            ]
        checks = checks_cpu(files, devices)
    rows.append(("the checks alone, in one process", checks, float("nan"), 0, 0))
    return rows, 2 * rows[3][1] + checks


_CAPTURES = """
import json, os, pickle, sys, tempfile
from semcheck.frontends import capture_process, capture_server
devices, files = int(sys.argv[1]), sys.argv[2:]
os.environ.clear()
os.environ.update(capture_process.child_environment(devices))
capture_server._import(list(capture_process.SERVER_PRELOAD))  # what the capture server imports
out = tempfile.mkdtemp(prefix="semcheck-captures-")
for i, path in enumerate(files):
    output = os.path.join(out, str(i))
    if i == 1:
        getattr(capture_server, "_stock_for_children", lambda: None)()  # as the server does before its second child
    pid = os.fork()
    if pid == 0:  # as the server's child: a session of its own, output in files
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        from semcheck.frontends.capture import child_main
        child_main(["--devices", str(devices), "--output", output, path])
    _, status, usage = os.wait4(pid, 0)
    with open(output, "rb") as f:
        phases = pickle.load(f).cpu_seconds
    print(json.dumps([os.path.basename(path), usage.ru_utime, usage.ru_stime, usage.ru_minflt,
                      phases.get("script", 0.0), phases.get("lowering", 0.0)]))
"""


def capture_rows(trees: dict[str, str], devices: int, count: int, repeat: int) -> list[tuple]:
    """Each capture child of the folder forked as the capture server forks it, from a process
    that imported what the server imports: its CPU (user, system), minor page faults and the
    CPU of its phases, summed over the files, per tree and repetition (interleaved)."""
    files = kernel_files(count)
    rows = []
    for rep in range(repeat + 1):  # the first pass warms JAX's persistent compilation cache
        for label, tree in trees.items():
            out = subprocess.run([PYTHON, "-c", _CAPTURES, str(devices), *files], cwd=tree, env=environment(),
                                 capture_output=True, text=True, check=True).stdout
            children = [json.loads(line) for line in out.splitlines() if line.startswith("[")]
            if len(children) != len(files):
                raise SystemExit(f"{len(children)} capture children reported, not {len(files)}")
            if rep:
                whole = [c[1] + c[2] for c in children]
                rows.append((f"run {rep}{label}", sum(whole), sum(c[1] for c in children), sum(c[2] for c in children),
                             sum(c[3] for c in children), sum(c[4] for c in children), sum(c[5] for c in children),
                             min(whole), max(whole)))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--models-only", action="store_true")
    parser.add_argument("--captures", action="store_true",
                        help="only the folder's capture children, forked as the capture server forks them: "
                             "CPU, page faults and phases summed over the files, --repeat times per tree")
    parser.add_argument("--instructions", action="store_true",
                        help="also count, under valgrind's callgrind, the instructions of the first model's "
                             "whole run, the process itself (tens of seconds a tree)")
    parser.add_argument("--baseline", metavar="TREE",
                        help="also run a checkout of another commit (e.g. `git archive main | tar -x -C TREE`), "
                             "interleaved with this one, so that both see the same load")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter to run (default: this one); every run is from the tree's root, so "
                             "its semcheck is the tree's, and only what the interpreter's start imports changes "
                             "(an editable install's finder, or none for a package installed from a wheel)")
    args = parser.parse_args()
    global PYTHON
    PYTHON = args.python
    trees = {"": ROOT}
    if args.baseline:
        trees = {" (this tree)": ROOT, " (baseline)": os.path.abspath(args.baseline)}
    for tree in trees.values():  # as an installed package has it (pip compiles on install)
        subprocess.run([PYTHON, "-m", "compileall", "-q", os.path.join(tree, "semcheck")], check=True,
                       stdout=subprocess.DEVNULL)
    print(f"({PYTHON}; load average {os.getloadavg()[0]:.1f})\n")
    if args.captures:
        print(f"| {args.files} capture children at {args.devices} devices | CPU (user + sys) | user | sys | "
              "minor page faults | script | lowering | one child, least-most |")
        print("|---|---|---|---|---|---|---|---|")
        for name, cpu, user, system, faults, script, lowering, least, most in capture_rows(
                trees, args.devices, args.files, args.repeat):
            print(f"| {name} | {cpu:.2f} s | {user:.2f} s | {system:.2f} s | {faults:,} | {script:.2f} s | "
                  f"{lowering:.2f} s | {least:.3f}-{most:.3f} s |")
        return 0
    print("| model file | whole process CPU | load + check + report, warm | start-up |")
    print("|---|---|---|---|")
    for name, whole, check, start in model_rows(trees, args.repeat):
        print(f"| {name} | {whole:.3f} s | {check:.3f} s | {start:.3f} s |")
    if args.instructions:
        print("\n| the process (callgrind; a forked child apart) | modules | instructions | "
              "of them compiling generated source (dataclasses, namedtuple) |")
        print("|---|---|---|---|")
        for name, total, generated, modules in instruction_rows(trees):
            share = "-" if generated is None else f"{generated / 1e6:,.0f} M ({generated / total:.0%})"
            print(f"| {name} | {modules} | {total / 1e6:,.0f} M | {share} |")
    if args.models_only:
        return 0
    rows, target = folder_rows(trees, args.devices, args.files)
    print(f"\n| kernel scripts at {args.devices} devices | CPU | wall | minor page faults | exit |")
    print("|---|---|---|---|---|")
    for name, cpu, wall, code, faults in rows:
        print(f"| {name} | {cpu:.2f} s | {wall:.1f} s | {faults:,} | {code} |")
    folder = rows[0][1]
    print(f"\nfolder -j 1{next(iter(trees))}: {folder:.2f} CPU s; target 2 x its slowest file + checks = "
          f"{target:.2f} s: {'met' if folder <= target else 'NOT met'}")
    print(f"(load average {os.getloadavg()[0]:.1f} at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
