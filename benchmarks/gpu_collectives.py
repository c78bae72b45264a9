"""Time the whole check of the Mosaic GPU collectives shipped in the jax wheel, tracing
included: all_gather_mgpu, reduce_scatter_mgpu and collective_matmul_mgpu.

    python benchmarks/gpu_collectives.py [--devices 2,4,8] [--sms 2]

Each run is what `semcheck verify driver.py --devices N` does (a capture subprocess, then the
engine); "check CPU s" is this process's CPU time, which leaves out the capture subprocess. The drivers are the ones tests/test_gpu_wheel_collectives.py uses; the
collective matmul gets `--sms` streaming multiprocessors (blocks), which a CPU device lacks.

`--devices 8 --sms 2`, issue 28: before (main 98a1bc9) the collective matmul had no verdict
(241 CPU s, 2 GB: the breadth-first search never reaches its race, and z3 decides nothing
in 100 s); after, auto's portfolio lets simulate join the wide search and its walk finds the
race at the `copy_smem_to_gmem` into the peer's scratch (line 104 of the wheel's module):

    kernel                   devices  verdict   states   wall s check CPU s
    all_gather_mgpu                8     safe      154     7.91        0.08
    reduce_scatter_mgpu            8     safe      154     6.69        0.03
    collective_matmul_mgpu         8 violation    42022    22.98        2.80
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from semcheck.api import verify_path  # noqa: E402
from tests.test_gpu_wheel_collectives import COLLECTIVE, KERNELS, MATMUL  # noqa: E402


def drivers(folder: str, sms: int) -> dict[str, str]:
    paths = {}
    for module in [*sorted(KERNELS), "collective_matmul_mgpu"]:
        line = f"from jax.experimental.pallas.ops.gpu import {module} as mod"
        text = (MATMUL.format(import_line=line, sms=sms) if module == "collective_matmul_mgpu"
                else COLLECTIVE.format(import_line=line, **KERNELS[module]))
        paths[module] = os.path.join(folder, f"{module}_driver.py")
        with open(paths[module], "w") as f:
            f.write(text)
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="2,4,8")
    parser.add_argument("--sms", type=int, default=2)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.devices.split(",")]
    print(f"{'kernel':<24} {'devices':>7} {'verdict':>8} {'states':>8} {'wall s':>8} {'check CPU s':>11}")
    with tempfile.TemporaryDirectory() as folder:
        for module, path in drivers(folder, args.sms).items():
            for devices in counts:
                start, cpu = time.perf_counter(), time.process_time()
                [result] = verify_path(path, [devices])
                print(f"{module:<24} {devices:>7} {result.verdict.value:>8} {result.stats.states:>8} "
                      f"{time.perf_counter() - start:>8.2f} {time.process_time() - cpu:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
