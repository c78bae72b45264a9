"""Independent parts: the explicit engine on per-device kernels, split into parts and as one
search, side by side.

    python benchmarks/components.py [--devices 2,4,8] [--max-states 1000000] [--examples ...]

Cases are the GPU example scripts whose blocks synchronise only within their own device
(captured once per device count, not timed) and, with no JAX needed, a model of the same
grid barrier with competing waits. The one search gets `--max-states`; past it the row says
so instead of a time. Wall-clock numbers on a shared machine are noisy: compare the ratio.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from semcheck.api import check_protocol  # noqa: E402
from semcheck.engines import components  # noqa: E402
from semcheck.engines.budget import Budget  # noqa: E402
from semcheck.model import ProtocolBuilder  # noqa: E402
from semcheck.semantics import System  # noqa: E402

EXAMPLES = ["grid_barrier", "grid_barrier_competing_waits", "warp_specialized_pipeline_no_release"]


def competing_waits(devices: int, blocks: int = 4):
    p = ProtocolBuilder("competing_waits_model", devices=devices, cores=blocks, backend="gpu")
    arrived = p.global_semaphore("arrived")
    for d in range(devices):
        for b in range(blocks):
            p.thread(d, b).signal(arrived)
            p.thread(d, b).wait(arrived, blocks)
    return p.build()


def captured(name: str, devices: int):
    from semcheck.frontends.capture import capture_script

    outcome = capture_script(os.path.join(ROOT, "examples", "gpu", name + ".py"), devices)
    if outcome.errors or outcome.script_error or len(outcome.protocols) != 1:
        raise SystemExit(f"{name}: could not capture one kernel at {devices} devices")
    return outcome.protocols[0]


def row(label: str, protocol, max_states: int) -> str:
    parts = len(components.parts(System(protocol)))
    split = check_protocol(protocol, engine="explicit")
    whole = check_protocol(protocol, engine="explicit", split=False, budget=Budget(max_states=max_states))
    if whole.verdict.value == "inconclusive":
        whole_cell, ratio = f"over {max_states:,} states", "-"
    else:
        whole_cell = f"{whole.stats.states:>9,} states {whole.stats.seconds:8.2f} s"
        ratio = f"{whole.stats.seconds / max(split.stats.seconds, 1e-4):,.0f}x"
        assert whole.verdict == split.verdict, label
    split_cell = f"{split.stats.states:>7,} states {split.stats.seconds:6.2f} s"
    return f"{label:<46} {parts:>5}  {split_cell}  {whole_cell:>32}  {ratio:>8}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="2,4,8")
    parser.add_argument("--max-states", type=int, default=1_000_000)
    parser.add_argument("--examples", default=",".join(EXAMPLES), help="GPU example names ('' for none)")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.devices.split(",")]
    print(f"{'case':<46} {'parts':>5}  {'split':>22}  {'one search':>32}  {'ratio':>8}")
    for devices in counts:
        print(row(f"competing_waits model, {devices} devices x 4 blocks", competing_waits(devices), args.max_states))
    for name in filter(None, args.examples.split(",")):
        for devices in counts:
            print(row(f"{name}.py, {devices} devices", captured(name, devices), args.max_states), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
