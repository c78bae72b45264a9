"""The whole check of the MoE examples, capture included, with `--engine auto`.

    python benchmarks/moe.py [--devices 2,4,8] [--examples moe_dispatch_combine,...] [--timeout S]

Each case is one `semcheck verify examples/tpu/FILE --devices N --engine auto --format json`
process, as a user runs it: its capture subprocess imports JAX, runs the script with N fake
CPU devices (capturing the kernel and its operand values), lowers it, and the engine
decides. The table gives the CPU seconds of that process and its children (user + system,
from `wait4`, so a machine shared with other work does not inflate them as wall time
does), the wall seconds, the peak resident memory of the largest process of the case, the
states (or z3 events) the engine reports, the engine that decided and the verdict.
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
)


KERNELS = os.path.join(ROOT, "benchmarks", "kernels")  # the fused MoE kernels (README there)


def one_case(name: str, devices: int, timeout: float) -> list[str]:
    path = os.path.join(KERNELS, f"{name}.py")
    if not os.path.exists(path):
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
