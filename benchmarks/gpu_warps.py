"""States and CPU time of the check of the warp-level core_map and tcgen05 examples, and
what leaving idle warps out of the fork and join saves.

    python benchmarks/gpu_warps.py [--devices 2,4,8]

The first table is `semcheck verify examples/gpu/<name> --devices N` per example ("check CPU
s" is this process's CPU time, which leaves out the capture subprocess). The second lowers
small kernels in this process, where some warps are idle, with and without the pruning
(`semcheck.lower.gpu_warps.PRUNE_IDLE_WARPS`), and runs the unreduced explicit search on
both: threads, states and CPU seconds (the findings are the same: tests/test_gpu_warps.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

EXAMPLES = (
    "warp_producer_consumer.py", "warp_producer_consumer_early_read.py",
    "warp_producer_consumer_no_release.py", "tcgen05_mma_pipeline.py", "tcgen05_mma_reload_early.py",
)


def examples(counts: list[int]) -> None:
    from semcheck.api import verify_path

    print(f"{'example':<38} {'devices':>7} {'verdict':>9} {'states':>7} {'check CPU s':>11}")
    for name in EXAMPLES:
        for devices in counts:
            cpu = time.process_time()
            [result] = verify_path(os.path.join(ROOT, "examples", "gpu", name), [devices])
            print(f"{name:<38} {devices:>7} {result.verdict.value:>9} {result.stats.states:>7} "
                  f"{time.process_time() - cpu:>11.2f}")


def pruning() -> None:
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    import jax.numpy as jnp
    from jax.experimental.pallas import mosaic_gpu as plgpu

    from semcheck.engines.explicit import search as explicit
    from semcheck.engines.options import ExplicitOptions
    from semcheck.lower import gpu_warps
    from semcheck.semantics import System
    from tests.test_gpu_lowering import gpu_call, protocol
    from tests.test_gpu_warps import _warp_kernels

    print(f"\n{'kernel (1 device)':<18} {'pruned':>6} {'threads':>7} {'states':>7} {'search CPU s':>12}")
    scratch = [plgpu.SMEM((8, 128), jnp.float32), plgpu.Barrier()]
    for kernel in _warp_kernels():
        for prune in (True, False):
            gpu_warps.PRUNE_IDLE_WARPS = prune
            p = protocol(gpu_call(kernel, grid=(1,), scratch=scratch), devices=1)
            cpu = time.process_time()
            run = explicit.explore(System(p), ExplicitOptions(reduce=False, silence_reported_races=False))
            print(f"{kernel.__name__:<18} {str(prune):>6} {len(p.threads):>7} {run.states:>7} "
                  f"{time.process_time() - cpu:>12.3f}")
    gpu_warps.PRUNE_IDLE_WARPS = True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="2,4,8")
    args = parser.parse_args(argv)
    examples([int(n) for n in args.devices.split(",")])
    pruning()
    return 0


if __name__ == "__main__":
    sys.exit(main())
