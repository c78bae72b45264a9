"""Symmetry on and off reach the same findings on every example kernel (and every model).

    XLA_FLAGS=--xla_force_host_platform_device_count=N python benchmarks/symmetry_agreement.py [N]

Each example is captured once at N devices (default 4), then searched twice with every race
of every schedule watched: with symmetry (the default) and with `symmetry=False`, both
within 30,000 states. A line per kernel: the rotation group found on its IR (or "-"), the
states without and with symmetry, and OK when the finding keys and end kinds agree
(EXHAUSTED when a search ran out first, which compares nothing). The unit tests do the
same on random protocols and on every model (tests/test_symmetry.py); the examples need a
capture each, which is why this is a script.
"""

from __future__ import annotations

import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from semcheck import frontends  # noqa: E402
from semcheck.engines.explicit import search as explicit  # noqa: E402
from semcheck.engines.explicit import symmetry  # noqa: E402
from semcheck.engines.budget import Budget  # noqa: E402
from semcheck.semantics import System  # noqa: E402
from semcheck.engines.options import ExplicitOptions  # noqa: E402


def main() -> None:
    devices = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    paths = sorted(glob.glob(os.path.join(ROOT, "models", "*.py")) + glob.glob(os.path.join(ROOT, "examples", "*", "*.py")))
    differ = 0
    for path in paths:
        name = os.path.relpath(path, ROOT)
        try:
            loaded = frontends.load(path, devices)
        except Exception as e:  # a file that does not load is reported, not compared
            print(f"{name}: does not load ({type(e).__name__})", flush=True)
            continue
        for protocol in loaded:
            if not hasattr(protocol, "threads"):
                print(f"{name}: {protocol}", flush=True)
                continue
            system = System(protocol)
            group = symmetry.rotations(system)
            budget = Budget(max_states=30_000)
            on = explicit.explore(system, ExplicitOptions(silence_reported_races=False), budget=budget)
            off = explicit.explore(system, ExplicitOptions(symmetry=False, silence_reported_races=False), budget=budget)
            if on.exhausted or off.exhausted:
                verdict = "EXHAUSTED"
            elif set(on.findings) == set(off.findings) and on.ends == off.ends:
                verdict = "OK"
            else:
                verdict, differ = "DIFFER", differ + 1
            print(f"{name} {protocol.name}: group {group.order if group else '-'}, "
                  f"states {off.states:,} -> {on.states:,}, {verdict}", flush=True)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
