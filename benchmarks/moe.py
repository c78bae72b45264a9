"""The whole check of the MoE examples, capture included, with `--engine auto`.

    python benchmarks/moe.py [--devices 2,4,8] [--examples moe_dispatch_combine,...] [--timeout S]

Each case is one `semcheck verify examples/tpu/FILE --devices N --engine auto --format json`
process, as a user runs it: its capture subprocess imports JAX, runs the script with N fake
CPU devices (capturing the kernel and its operand values), lowers it, and the engine
decides. The table gives the CPU seconds of that process and its children (user + system,
from `wait4`, so a machine shared with other work does not inflate them as wall time
does), the wall seconds, the peak resident memory of the largest process of the case, the
states (or z3 events) the engine reports, the engine that decided and the verdict.

Issue 11, the six fused MoE kernels (moved from benchmarks/kernels/ to examples/tpu/ once
they checked at 8 devices): `--devices 4,8 --timeout 300`, CPU seconds of the whole process
tree, capture included, machine load average about 20 on 2 cores (wall seconds are not
comparable). Before (main 53a165f): at 8 devices moe_dispatch_combine was inconclusive
with auto after 600 s wall (193 CPU s), and `--engine z3` took 117.5 CPU s (safe),
moe_entry_left_only 95.1 (remote_before_entry), moe_metadata_sem_unfenced 41.1 (data_race).
After: z3's counted precedences (engines/z3/precedence.py) answer every question by
counting, and auto's counting probe runs z3 first on these protocols (2,424 instructions
at 8 devices). The z3 engine's own time at 2/4/8 devices is 0.1-5 CPU s for every kernel.

    example                          devices  CPU s  states           engine    verdict
    moe_dispatch_combine             4        12.0   1,582            explicit  safe
    moe_dispatch_combine             8        20.6   3,128 z3 events  z3        safe
    moe_entry_left_only              4        27.5   21,063           explicit  violation (remote_before_entry)
    moe_entry_left_only              8        42.3   18,297           explicit  violation (remote_before_entry)
    moe_metadata_sem_unfenced        4        28.5   56,741 + z3      z3        violation (data_race)
    moe_metadata_sem_unfenced        8        18.9   3,056 z3 events  z3        violation (data_race)
    moe_mailbox_zeroed_late          4        11.8   2,093            explicit  violation (data_race)
    moe_mailbox_zeroed_late          8        21.5   3,128 z3 events  z3        violation (data_race)
    moe_expert_pipeline              4        13.4   1,276 z3 events  z3        safe
    moe_expert_pipeline              8        22.3   3,832 z3 events  z3        safe
    moe_expert_pipeline_shared_send  4        12.6   1,655            explicit  violation (data_race)
    moe_expert_pipeline_shared_send  8        91.9   13,495 + z3      z3        violation (data_race)

At 8 devices the probe of moe_entry_left_only and moe_expert_pipeline_shared_send needs an
ordered query, so the search runs: it decides the first within z3's head start; z3 decides
the second after the head start of 25 CPU s (the table was measured with 60).

Issue 28 (auto as a portfolio, docs/engines.md): `--devices 8`, load 8-12 on 2 cores.
Before: main 98a1bc9 (the counting probe, then the search alone for 25 CPU s); after: the
search alone while narrow, simulate and z3 taking turns with it once it looks wide, the
first counterexample ending the check. CPU s of the whole process:

    example                          before  engine    after  engine
    moe_dispatch_combine             4.3     z3        5.3    z3         safe
    moe_entry_left_only              29.9    z3        4.4    explicit   remote_before_entry
    moe_metadata_sem_unfenced        4.5     z3        5.4    z3         data_race
    moe_mailbox_zeroed_late          4.9     z3        5.4    z3         data_race
    moe_expert_pipeline              4.8     z3        6.1    z3         safe
    moe_expert_pipeline_shared_send  34.8    z3        7.3    z3         data_race
    moe_static_plan                  1.7     explicit  1.7    explicit   safe
    moe_generation_shared_sem        27.2    z3        2.1    simulate   data_race
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "tpu")
DEFAULT_EXAMPLES = (
    "moe_dispatch_combine", "moe_entry_left_only", "moe_metadata_sem_unfenced", "moe_mailbox_zeroed_late",
    "moe_expert_pipeline", "moe_expert_pipeline_shared_send", "moe_static_plan", "moe_generation_shared_sem",
    "smem_slot_double_buffer", "smem_slot_advanced_early", "prefetch_init_flag",
    "prefetch_state_across_heads", "prefetch_state_restarted_per_head",
)



def one_case(name: str, devices: int, timeout: float) -> list[str]:
    path = os.path.join(EXAMPLES, f"{name}.py")
    command = [sys.executable, "-m", "semcheck", "verify", path, "--devices", str(devices), "--engine", "auto",
               "--format", "json", "-q", "--timeout", str(timeout)]
    env = dict(os.environ, PYTHONPATH=ROOT)
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    output = proc.stdout.read()
    _pid, _status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(_status)
    wall = time.perf_counter() - start
    cpu = usage.ru_utime + usage.ru_stime
    try:
        results = json.loads(output)["results"]
    except (json.JSONDecodeError, KeyError):
        return [name, str(devices), f"{cpu:.1f}", f"{wall:.1f}", f"{usage.ru_maxrss / 1024:.0f}", "-", "-",
                f"no JSON (exit {proc.returncode})"]
    states = ", ".join(_size(r["stats"]) for r in results)
    engines = ", ".join(sorted({r["engine"] for r in results}))
    verdicts = ", ".join(_verdict(r) for r in results)
    return [name, str(devices), f"{cpu:.1f}", f"{wall:.1f}", f"{usage.ru_maxrss / 1024:.0f}", states, engines,
            verdicts]


def _size(stats: dict) -> str:
    if stats.get("states"):
        return f"{stats['states']:,}"
    if stats.get("encoded_events"):
        return f"{stats['encoded_events']:,} events"
    return "-"


def _verdict(result: dict) -> str:
    kinds = sorted({v["kind"] for v in result["violations"] if v["severity"] == "error"})
    return result["verdict"] + (f" ({', '.join(kinds)})" if kinds else "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="2,4,8")
    parser.add_argument("--examples", default=",".join(DEFAULT_EXAMPLES))
    parser.add_argument("--timeout", type=float, default=600.0, help="semcheck's budget per case, seconds")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.devices.split(",")]
    columns = ["example", "devices", "CPU s", "wall s", "peak MB", "states", "engine", "verdict"]
    rows = []
    for name in args.examples.split(","):
        for n in counts:
            rows.append(one_case(name, n, args.timeout))
            print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
