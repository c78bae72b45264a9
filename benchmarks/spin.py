"""semcheck against SPIN on the same protocol families, paired in one run.

    python benchmarks/spin.py [--limit SECONDS] [--families ring_allgather,double_buffer,nondec_poll]

For each family this writes a Promela model of the protocol of `models/<family>.py` at N
devices (our own translation, below), and finds the largest N that SPIN (Debian's `spin`
6.5.2: `spin -a`, `gcc -O2`, `./pan`, with its default partial-order reduction) verifies
within the limit (CPU seconds of the three steps, so that a loaded machine does not decide), doubling N and then bisecting. At that N it runs `semcheck verify
models/<family>.py --devices N` in a fresh process, and prints both CPU times (whole
process, children included: for SPIN the generator, the C compiler and the verifier), the
states each stored, and the ratio.

What the two check, and what differs:

* both: every schedule of the devices' signals, waits and DMA completions (a copy's send
  and receive sides complete separately, in any order relative to everything else), that
  no reachable state is stuck with a thread blocked (SPIN: "invalid end state"; semcheck:
  `deadlock` / `unsatisfied_wait`), and that every TPU semaphore is zero once every device
  has finished (SPIN: an assertion in `init` after all processes ended; semcheck:
  `semaphore_leftover`). Byte counts are copies in SPIN (one unit per copy).
* only semcheck: data races between buffer accesses and copies in flight, remote arrivals
  before the target entered the kernel, device/core/semaphore ids out of range, and the
  shortest counterexample trace. SPIN's models have no buffers, so its search does less.
* SPIN stores full state vectors and explores with its own partial-order reduction;
  semcheck reduces with stubborn and sleep sets and splits independent parts (the
  double-buffer pairs never interact, which SPIN cannot see).

Needs `spin` and `gcc` on PATH (`apt-get install -y spin`). Runs take minutes; the machine
is shared, so keep the limit modest.

Measured (`--limit 20`, 2048 MB, semcheck the least of `--repeat 5` runs; Debian spin
6.5.2; tree fa42e3e on 2026-12-06, the shared 2-core machine at load average 5 to 15 from
other sessions, which inflates semcheck's tenth of a second; "SPIN" includes `spin -a` and
gcc, about 1 s of every row):

| family | largest N SPIN verified | SPIN | semcheck, same N | ratio | SPIN beyond |
|---|---|---|---|---|---|
| ring_allgather | 3 | 1.09 s, 189,267 states, 253 MB | 0.13 s (0.08 start-up), 40 states | 9x | N=4: the 20 s limit |
| double_buffer | 5 | 2.91 s, 3,082,286 states, 517 MB | 0.15 s (0.09 start-up), 64 states | 20x | N=6: the 20 s limit |
| nondec_poll | 19 | 15.90 s, 9,961,458 states, 880 MB | 0.16 s (0.11 start-up), 38 states | 99x | N=20: the 20 s limit |

(`--limit 120 --memory 8192` on main 0fc94a0 found the same N for the ring and the double
buffer, and N=21 for the poll, 92 s of SPIN: 416x.)

100x on all three families cannot be had this way. At the ring's and the double buffer's
largest N, SPIN's whole run is 1.1 and 2.9 s, most of it `spin -a` and gcc, and at N+1 it
runs out of time or memory; 100x there would need semcheck's whole process in 11 and 29
ms, and Python alone starts in 17-19 ms on this machine (`python -c pass`, site-packages
included), before it imports anything. The ratio is bounded by start-up, not by the search
(milliseconds for 40 to 64 states); where SPIN's largest N costs it seconds of search (the
non-decrementing poll) the ratio is 100x and more. The comparison that shows the
difference is the one past SPIN's reach: semcheck checks the ring at 64, 128 and 256
devices in 2, 8 and 41 CPU s (`scale.py`). What the start-up is made of:
`benchmarks/startup.py` ("start-up" here is `semcheck --version`: Python and the CLI's
imports).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

from scale import WRAPPER  # one command in its own process: CPU, wall and peak memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ITEMS = 4  # models/double_buffer.py's blocks per pair


def _ring_allgather(n: int) -> str:
    steps = max(n - 1, 1)
    return f"""
#define N {n}
#define STEPS {steps}
byte barrier[N];
byte send_sem[N];
byte recv_sem[N * STEPS];
byte finished;

proctype copy(byte from; byte step) {{
  byte to = (from + 1) % N;
  if
  :: send_sem[from]++; recv_sem[to * STEPS + step]++
  :: recv_sem[to * STEPS + step]++; send_sem[from]++
  fi
}}

proctype device(byte d) {{
  byte step = 0;
  barrier[(d + N - 1) % N]++;
  barrier[(d + 1) % N]++;
  atomic {{ barrier[d] >= 2 -> barrier[d] = barrier[d] - 2 }}
  do
  :: step < N - 1 ->
     run copy(d, step);
     atomic {{ send_sem[d] >= 1 -> send_sem[d]-- }}
     atomic {{ recv_sem[d * STEPS + step] >= 1 -> recv_sem[d * STEPS + step]-- }}
     step++
  :: else -> break
  od;
  finished++
}}

init {{
  byte i = 0;
  atomic {{ do :: i < N -> run device(i); i++ :: else -> break od }}
  (finished == N && _nr_pr == 1);
  i = 0;
  do
  :: i < N -> assert(barrier[i] == 0 && send_sem[i] == 0); i++
  :: else -> break
  od;
  i = 0;
  do
  :: i < N * STEPS -> assert(recv_sem[i] == 0); i++
  :: else -> break
  od
}}
"""


def _double_buffer(n: int) -> str:
    pairs = n // 2
    return f"""
#define PAIRS {pairs}
#define ITEMS {ITEMS}
byte capacity[PAIRS];
byte send_sem[PAIRS * 2];
byte recv_sem[PAIRS * 2];
byte finished;

proctype copy(byte pair; byte slot) {{
  if
  :: send_sem[pair * 2 + slot]++; recv_sem[pair * 2 + slot]++
  :: recv_sem[pair * 2 + slot]++; send_sem[pair * 2 + slot]++
  fi
}}

proctype producer(byte pair) {{
  byte i = 0;
  do
  :: i < ITEMS ->
     atomic {{ capacity[pair] >= 1 -> capacity[pair]-- }}
     run copy(pair, i % 2);
     atomic {{ send_sem[pair * 2 + i % 2] >= 1 -> send_sem[pair * 2 + i % 2]-- }}
     i++
  :: else -> break
  od;
  finished++
}}

proctype consumer(byte pair) {{
  byte i = 0;
  capacity[pair] = capacity[pair] + 2;
  do
  :: i < ITEMS ->
     atomic {{ recv_sem[pair * 2 + i % 2] >= 1 -> recv_sem[pair * 2 + i % 2]-- }}
     if :: i + 2 < ITEMS -> capacity[pair]++ :: else -> skip fi;
     i++
  :: else -> break
  od;
  finished++
}}

init {{
  byte i = 0;
  atomic {{ do :: i < PAIRS -> run producer(i); run consumer(i); i++ :: else -> break od }}
  (finished == 2 * PAIRS && _nr_pr == 1);
  i = 0;
  do
  :: i < PAIRS -> assert(capacity[i] == 0); i++
  :: else -> break
  od;
  i = 0;
  do
  :: i < 2 * PAIRS -> assert(send_sem[i] == 0 && recv_sem[i] == 0); i++
  :: else -> break
  od
}}
"""


def _nondec_poll(n: int) -> str:
    # A GPU protocol: a non-zero count at exit is allowed there, so nothing is asserted at the end.
    return f"""
#define N {n}
byte counter;

proctype arrive() {{ counter++ }}

proctype poller() {{
  byte k = 1;
  do
  :: k < N -> counter >= k; k++
  :: else -> break
  od;
  atomic {{ counter >= N - 1 -> counter = counter - (N - 1) }}
}}

init {{
  byte i = 1;
  atomic {{ run poller(); do :: i < N -> run arrive(); i++ :: else -> break od }}
}}
"""


FAMILIES = {
    "ring_allgather": _ring_allgather,
    "double_buffer": _double_buffer,
    "nondec_poll": _nondec_poll,
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_spin(family: str, n: int, limit: float, memory_mb: int = 2048, collapse: bool = False) -> dict:
    """Generate, compile and verify; CPU seconds of the three steps, states stored, verdict.
    `collapse` compiles the verifier with SPIN's own lossless state compression (-DCOLLAPSE),
    which trades time for memory: SPIN's best configuration when memory is what ends it."""
    with tempfile.TemporaryDirectory(prefix="semcheck-spin-") as tmp:
        with open(os.path.join(tmp, "model.pml"), "w") as f:
            f.write(FAMILIES[family](n))
        before = _children_cpu()
        subprocess.run(["spin", "-a", "model.pml"], cwd=tmp, check=True, capture_output=True)
        flags = ["-O2", "-DVECTORSZ=65536", f"-DMEMLIM={memory_mb}"] + (["-DCOLLAPSE"] if collapse else [])
        subprocess.run(["gcc", *flags, "-o", "pan", "pan.c"], cwd=tmp, check=True, capture_output=True)
        compile_cpu = _children_cpu() - before
        left = limit - compile_cpu

        def cpu_limit() -> None:  # the limit is CPU seconds: the machine is shared
            seconds = max(int(left), 1)
            resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))

        try:
            proc = subprocess.run([sys.executable, "-c", WRAPPER, "./pan", "-m2000000"], cwd=tmp, capture_output=True,
                                  text=True, preexec_fn=cpu_limit, timeout=limit * 30)
        except subprocess.TimeoutExpired:
            return {"n": n, "verdict": "timeout", "cpu": _children_cpu() - before, "states": None}
        try:
            run = json.loads(proc.stdout)
        except json.JSONDecodeError:  # the wrapper itself ran out of CPU time with pan
            return {"n": n, "verdict": "timeout", "cpu": _children_cpu() - before, "states": None}
        if run["code"] < 0:  # SIGXCPU / SIGKILL: out of CPU time
            return {"n": n, "verdict": "timeout", "cpu": _children_cpu() - before, "states": None}
        out = run["stdout"]
        states = state_memory = None
        for line in out.splitlines():
            if "states, stored" in line:
                states = int(float(line.split()[0]))
            if "equivalent memory usage for states" in line:  # stored x (state vector + overhead)
                state_memory = float(line.split()[0]) * 2**20
        if "reached -DMEMLIM bound" in out or "out of memory" in out:
            verdict = "out of memory"
        elif "Search not completed" in out or "max search depth too small" in out:
            verdict = "incomplete"
        elif "errors: 0" in out:
            verdict = "safe"
        else:
            verdict = "violation"
        per_state = state_memory / states if state_memory is not None and states else None
        # the three steps' CPU: the wrapper's own start is not SPIN's
        return {"n": n, "verdict": verdict, "cpu": compile_cpu + run["cpu"], "states": states,
                "peak_mb": run["peak_mb"], "per_state": per_state}


def run_semcheck(family: str, n: int, repeat: int = 1) -> dict:
    """semcheck on the model at N in a fresh process: the least CPU of `repeat` runs (a
    run of a tenth of a second moves by tens of percent with the machine's load)."""
    runs = []
    for _ in range(repeat):
        proc = subprocess.run(
            [sys.executable, "-c", WRAPPER, sys.executable, "-m", "semcheck", "verify",
             os.path.join(ROOT, "models", f"{family}.py"), "--devices", str(n), "--format", "json", "-q"],
            capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
        )
        runs.append(json.loads(proc.stdout))
    run = min(runs, key=lambda r: r["cpu"])
    cpu = run["cpu"]  # the semcheck process and its children, not the wrapper
    (result,) = json.loads(run["stdout"])["results"]
    stats = result["stats"]
    stored, store_bytes = stats.get("stored_states"), stats.get("store_bytes")
    if store_bytes is not None:  # per stored state: what the store grew by (the fixed tables apart)
        store_bytes -= stats.get("store_fixed_bytes") or 0
    # What any `semcheck` command costs before it checks anything: Python's start and the
    # CLI's imports (`--version` parses its arguments and stops); the least of `repeat`.
    start_ups = []
    for _ in range(repeat):
        before = _children_cpu()
        subprocess.run([sys.executable, "-m", "semcheck", "--version"], capture_output=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT), check=True)
        start_ups.append(_children_cpu() - before)
    return {"n": n, "verdict": result["verdict"], "cpu": cpu, "states": stats["states"],
            "engine": result["engine"], "start_up": min(start_ups), "peak_mb": run["peak_mb"], "stored": stored,
            "per_state": store_bytes / stored if stored else None}


def _bytes(per_state: float | None) -> str:
    return "-" if per_state is None else f"{per_state:.0f}"


def _stored(ours: dict) -> str:
    """How many states semcheck stored and their bytes each (a one-path search stores none)."""
    if ours["stored"] is None:
        return "none stored"
    if not ours["stored"]:
        return "none stored: one path"
    return f"{ours['stored']:,} stored, {_bytes(ours['per_state'])} B/state"


def largest_n(family: str, limit: float, start: int = 2, **spin_options) -> tuple[dict, dict | None]:
    """The largest N SPIN verifies within `limit` (doubling, then bisecting), and the first
    N it did not."""
    ok, failed = None, None
    n = start
    while True:
        outcome = run_spin(family, n, limit, **spin_options)
        print(f"  spin {family} N={n}: {outcome['verdict']}, {outcome['cpu']:.1f} s", file=sys.stderr)
        if outcome["verdict"] == "safe":
            ok, n = outcome, n * 2
        else:
            failed = outcome
            break
        if n > 4096:
            return ok, None
    low, high = ok["n"] if ok else start - 1, failed["n"]
    while high - low > 1 and ok is not None:
        mid = (low + high) // 2
        outcome = run_spin(family, mid, limit, **spin_options)
        print(f"  spin {family} N={mid}: {outcome['verdict']}, {outcome['cpu']:.1f} s", file=sys.stderr)
        if outcome["verdict"] == "safe":
            ok, low = outcome, mid
        else:
            failed, high = outcome, mid
    return ok, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=float, default=120.0, help="seconds SPIN gets per N (default 120)")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--memory", type=int, default=2048, metavar="MB",
                        help="SPIN's memory bound, -DMEMLIM (default 2048: the machine is shared)")
    parser.add_argument("--collapse", action="store_true", help="compile SPIN with -DCOLLAPSE")
    parser.add_argument("--repeat", type=int, default=5,
                        help="semcheck runs at each N, the least CPU taken (default 5)")
    args = parser.parse_args()
    if not shutil.which("spin") or not shutil.which("gcc"):
        raise SystemExit("needs spin and gcc on PATH (apt-get install -y spin)")
    rows = []
    for family in args.families.split(","):
        ok, failed = largest_n(family, args.limit, 2, memory_mb=args.memory, collapse=args.collapse)
        if ok is None:
            rows.append((family, "-", "SPIN finished no N", "", "", "", ""))
            continue
        ours = run_semcheck(family, ok["n"], args.repeat)
        ratio = ok["cpu"] / ours["cpu"] if ours["cpu"] else float("inf")
        beyond = f"N={failed['n']}: {failed['verdict']}" if failed else "-"
        rows.append((family, str(ok["n"]), f"{ok['cpu']:.2f} s, {ok['states']:,} states, {ok['peak_mb']:.0f} MB, "
                     f"{_bytes(ok['per_state'])} B/state",
                     f"{ours['cpu']:.2f} s ({ours['start_up']:.2f} start-up), {ours['states']:,} states "
                     f"({_stored(ours)}), {ours['peak_mb']:.0f} MB, {ours['verdict']} ({ours['engine']})",
                     f"{ratio:.0f}x", beyond, ""))
    options = f"limit {args.limit:g} s, {args.memory} MB" + (", COLLAPSE" if args.collapse else "")
    header = ("family", "largest N", f"SPIN ({options})", "semcheck, same N", "SPIN / semcheck",
              "SPIN beyond", "")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(6)]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    main()
