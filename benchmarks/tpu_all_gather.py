"""Time the whole check of the TPU all-gather shipped in the jax wheel, tracing included.

    python benchmarks/tpu_all_gather.py [--devices 2,4,8] [--repeat 3]

Each run is what `semcheck verify driver.py --devices N` does: a subprocess runs a driver
script that calls `jax.experimental.pallas.ops.tpu.all_gather` (importing JAX, tracing and
compiling the sharded function with semcheck's capture hooks in place, lowering the kernel
to the IR), then the explicit engine explores every schedule. The table gives the median of
the repeats for each phase.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from semcheck.api import check_protocol  # noqa: E402
from semcheck.capture import capture_script  # noqa: E402

DRIVER = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas.ops.tpu import all_gather as ag
from jax.sharding import AxisType, Mesh

mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
x = jnp.ones((mesh.size * 8, 128), jnp.float32)
jax.block_until_ready(ag.all_gather(x, mesh=mesh, axis_name="x"))
"""


def one_run(driver: str, devices: int) -> dict:
    start = time.perf_counter()
    outcome = capture_script(driver, devices)
    captured = time.perf_counter()
    [protocol] = outcome.protocols
    result = check_protocol(protocol)
    done = time.perf_counter()
    return {
        "capture": captured - start,
        "jax import": outcome.seconds["jax import"],
        "script": outcome.seconds["script"],
        "lowering": outcome.seconds["lowering"],
        "check": done - captured,
        "total": done - start,
        "states": result.stats.states,
        "verdict": result.verdict.value,
        "instructions": sum(len(t.body) for t in protocol.threads),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="2,4,8")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.devices.split(",")]
    import jax

    columns = ["devices", "total s", "capture s", "jax import", "script", "lowering", "check s",
               "states", "instrs", "verdict"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        driver = os.path.join(tmp, "all_gather_driver.py")
        with open(driver, "w") as f:
            f.write(DRIVER)
        for n in counts:
            runs = [one_run(driver, n) for _ in range(args.repeat)]
            med = {k: statistics.median(r[k] for r in runs) for k in
                   ("total", "capture", "jax import", "script", "lowering", "check")}
            rows.append([str(n), f"{med['total']:.2f}", f"{med['capture']:.2f}", f"{med['jax import']:.2f}",
                         f"{med['script']:.2f}", f"{med['lowering']:.3f}", f"{med['check']:.3f}",
                         f"{runs[0]['states']:,}", f"{runs[0]['instructions']:,}", runs[0]["verdict"]])
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    print(f"jax.experimental.pallas.ops.tpu.all_gather (jax {jax.__version__}), explicit engine, "
          f"median of {args.repeat} run(s); capture = subprocess incl. jax import, script, lowering")
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(v.rjust(w) for v, w in zip(r, widths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
