"""Issue 12's table: CPU seconds of the whole process, states and peak memory, per check.

    python benchmarks/scale.py [--timeout SECONDS] [--rows NAME,...] [--list]

Each row is one `semcheck verify ... --format json -q` in a fresh process (the kernel
scripts' capture subprocess included), run under a small wrapper that reports the CPU
seconds (user + system) of everything it waited for, the wall time and the peak resident
memory of the largest process. Every row gets `--timeout` (default 120 s) and `--max-memory`
(default 2000 MB), so a row that cannot finish says `inconclusive` instead of running on; the `timeout` rows check that a
run given `--timeout T` ends within T + 5 s whatever phase it is in. Targets are issue 12's.

The machine is shared: run it sparingly, and read the numbers as of the load at the time.

`stored`, `B/state` and `fixed KB` are the explicit search's state store (docs/benchmarks.md,
"bytes a stored state"): the states it stored, what its store grew by per stored state
(`(stats.store_bytes - stats.store_fixed_bytes) / stored`: the trees' nodes and their index,
each state's key and its index slot, the search's records and sleep sets), and the tables
that grow with the protocol and not with the states, printed on their own rather than spread
over the states (`stats.store_fixed_bytes`: the numbered completions and their accesses).

Per-state reduction work (issue 12, branch perf), CPU seconds (user + system) of the whole
process from `/usr/bin/time -v`, `semcheck verify ... --engine explicit`, 2 cores at load
about 4.5, before (main 79e7e11) and after: `pending_on` answers kept per state and resource,
`cut`'s candidate waits found through indices by adder and semaphore, and the closure
without waiters skipped when no waiter joined the first. State counts are identical.

    check                                   states     before    after
    ring_allgather model, N=64              20,353     11.7 s     8.9 s
    ring_allgather model, N=128             81,665     69.2 s    52.8 s
    allreduce_ring.py, N=16 --invocations 2 29,226     26.1 s    21.6 s
    moe_dispatch_combine.py, N=8            3,001*     32.4 s    25.0 s

    * `--max-states 3000`: the search itself (the result's seconds, capture excluded)
      went from 12.8 s to 4.8 s, 234 to 630 states/s; the rest is capture (~27 s wall).

Per-state reduction work again (issue 12, branch search-speed): cuts computed only for
threads whose whole future conflicts, per-state sums per semaphore for the counting cut,
the closure's members kept as it grows, `future_before` from next-occurrence tables. CPU
seconds (`time.process_time`) of the explicit search alone (System built from a pickled
capture, `explore` with symmetry), before (main 53a165f) and after, one run each at load
20-28 on 2 cores (read differences under ~15 % as noise). State counts are identical.

    check                                               states     before    after
    allreduce_ring.py, N=16 --invocations 2             29,226     10.9 s    10.0 s
    allreduce_ring_no_capacity.py, N=16 (data_race)     44,222      8.3 s     7.1 s
    allreduce_ring_no_capacity.py, N=16 x2, 10k states  10,001      4.8 s     3.5 s
    moe_dispatch_combine.py, N=8, 3k states              3,001      2.3 s     1.3 s
    moe_dispatch_combine.py, N=8, 5k states              5,001      8.6 s     4.6 s

    allreduce_ring_no_capacity.py 16 x2 without a state budget: past 272k states and
    110 CPU s (600 s wall) it had not ended: its reduced graph is wide, not its states slow.

The ring at 64-256 devices (issue 12, branch ring-scale), CPU seconds, before (53a165f) and
after, measured at load 17-28 on the 2 cores (so every number is inflated against a quiet
machine). The states are the protocol's events, one path: every copy start, wait and
completion once, with symmetry and the reduction (transitions = states - 1). So the count
itself is 5 N^2 (20,353 / 81,665 / ~327k) and the per-state work decides; it grows
with N because the first enabled copy starts of the devices running more than 8 steps
ahead of their right neighbour are not isolated (`Independence.cut` tries 8 candidate
waits) and cost a full counting cut each before the isolated action is found.

    phase (ring_allgather model)                  before          after
    N=64 search alone (explore, no start-up)      6.0 s           4.5 s
    N=64 whole process                            7.0 s           6.3 s
    N=128 model + pickle out of the load child    0.5 + 2.2 s     0.4 + 1.4 s
    N=128 System + Independence tables            2.1 + 2.4 s     2.1 + 1.8 s
    N=128 Independence tables' memory             89 MB           53 MB
    N=128 whole process (run side by side)        49.3 s          36.0 s
    N=128 peak memory                             400 MB          367 MB
    N=256 model + pickle out of the load child    2.8 + ~9 s      1.9 + 5.6 s
    N=256 System + Independence tables            8.3 + 9.3 s     9.4 + 6.7 s
    N=256 memory of the tables (System + Ind.)    448 + 340 MB    446 + 213 MB

At 256 the tables and states fit in 2 GB (about 1 GB after 27k of the ~327k states, at
about 3 KB per state), but 327k states at the 128-device rate (~0.4 ms each) is over two
minutes of search: the 60 s target needs per-state work that does not grow with N
(the not-isolated copy starts above), not tables.

Collectives at 8-32 devices (issue 12, branch collectives, main 4d077ea), the default engine
`auto`. First the rows as `scale.py` runs them (120 s wall budget), one at a time at load
7-25 on 2 cores: every miss is the wall-clock budget on a loaded machine, not CPU. Then the
check alone (System from a pickled capture, `check_protocol`, `time.process_time`, 600 s
budget), and the capture's CPU seconds (`/usr/bin/time`, subprocess included):

    row (scale.py, 120 s wall)              CPU s   wall s  states   verdict                 engine
    wheel TPU all_gather, N=16              19.3     77.0    2,706   violation (data_race)   explicit
    wheel TPU all_gather, N=32               1.4    123.5        0   inconclusive: 120 s ran out while loading (capture)
    reduce_scatter_capacity.py, N=16        12.4     53.0    2,529   safe                    explicit
    allgather_bidirectional.py, N=16        18.2     85.6        0   safe                    z3 (probe)
    allreduce_ring.py, N=8                   7.5     31.5      929   safe                    explicit
    allreduce_ring.py, N=8 x2               12.4     51.9    2,296   safe                    explicit
    allreduce_ring.py, N=16                 26.9    125.8        0   inconclusive (wall budget)
    allreduce_ring.py, N=16 x2              17.7    127.9        0   inconclusive (wall budget)
    allreduce_ring_no_capacity.py, N=16 x2  19.1    127.5        0   inconclusive (wall budget)
    reduce_scatter_bidirectional.py, N=4     6.4     35.1      565   safe                    explicit
    reduce_scatter_bidirectional.py, N=8    17.0    127.6        0   inconclusive (wall budget)

    check alone, 600 s budget               capture  check   states    verdict, engine
    wheel TPU all_gather, N=16               -        8.3    2,706    race, explicit
    wheel TPU all_gather, N=32              28.7     54.3   10,530    race, explicit (probe failed: 46.4 s)
    reduce_scatter_capacity.py, N=16         -        4.9    2,529    safe, explicit
    allgather_bidirectional.py, N=16         -        9.7        0    safe, z3 probe
    allreduce_ring.py, N=16                  9.4     17.4        0    safe, z3 probe
    allreduce_ring.py, N=16 x2              10.9     65.2   29,226    safe, explicit (after a failed probe)
    reduce_scatter_bidirectional.py, N=8     -        8.0        0    safe, z3 probe
    allreduce_ring_no_capacity.py, N=16 x2  10.0    150.8   99,622    race, z3 beside the search
                                                                      (600 s wall ran out meanwhile)
      after (commit 0a6cc08)                10.0     71.2   50,003    race, the probe's (kept)

Whole process after (scale.py rows with a 600 s wall budget, load 17-20, so wall is 6-7x CPU):

    row                                     CPU s   wall s  states   verdict                 engine
    wheel TPU all_gather, N=32              76.3    535.5   10,530   violation (data_race)   explicit
    allreduce_ring.py, N=16 x2              68.9    525.8   29,226   safe                    explicit
    allreduce_ring_no_capacity.py, N=16 x2  75.1    448.4   50,007   violation (data_race)   z3 (probe's)

The no-capacity twin's probe finds its race (38.7 s) and stops at the next hazard question
counting cannot answer; auto used to drop that Result, run the search alone for its head
start and then encode z3 again beside it. The probe's violation now stands once the search
is past its head start. Still open: a probe that answers nothing costs most of the wheel's
check at 32 devices (46 of 54 s) and of `allreduce_ring.py` at 16 x2.

The ring again (issue 12, branch ring-scale, second round), before (main 4d077ea) and
after, CPU seconds at load 9-21 on the 2 cores (`time.process_time` for the search alone:
System built from the model, `explore` with symmetry; `/usr/bin/time -v` user time for
the whole process, default engine). The not-isolated copy starts are gone: `cut` also tries,
per still thread, the first wait it has yet to feed, so every state's first enabled thread
is isolated (at 32 devices: 4,108 failed isolation tests before, none after). Then the
per-state work that walked every pending completion (about one per device in flight):
completions looked up only where one could conflict, pending additions by bisection, an
isolated thread decided before the completions are listed, races against copies on the
same buffer only. State counts are identical.

    check (ring_allgather model)                  before          after
    N=64 search alone                             11.3 s          4.1 s
    N=64 whole process                            12.7 s (load 4) 6.3 s (load 12-15)
    N=64 peak memory                              97 MB           96 MB
    N=128 search alone                            -               23.3 s (load 18)
    N=128 whole process, --engine explicit        -               32.6 s (load 18)
    N=128 whole process, default (auto)           -               39.2 s, 658 MB (load 17)
    N=256 whole process, default (auto)           -               no verdict: the wall-clock
                                                                  budget (~300 s) ran out at
                                                                  load 21 after 65.6 CPU s,
                                                                  peak 1.0 GB

The symmetry group at huge N (branch limits, before main 03faa13 and after). The group of
rotations was two tables of order x threads entries (each element's permutation of the
threads and its inverse); it is now each thread's slot in a device-major layout, and the
least image of a state is found by one pass over its pcs (`symmetry.least_rotation`).
`symmetry.rotations` plus `canonical` of the initial state, CPU seconds and tracemalloc's
peak, `models/circular_wait.py` (one thread and one wait a device), at load 3-5:

    N          before                    after
    1,000      1.15 s, 37 MB             0.03 s, 0.2 MB
    2,000      5.3 s, 162 MB             0.08 s, 0.4 MB
    10,000     -                         0.37 s, 2.1 MB
    100,000    -                         4.6 s, 23 MB

`scale.py --rows circular_wait` after (the default stops at the first counterexample):

    | circular_wait model, N=1000   | < 10 s       | 0.5   | 0.5    | 48      | 1      | violation (deadlock) | explicit |
    | circular_wait model, N=100000 | ends, < 2 GB | 44.8  | 51.2   | 873     | 1      | violation (deadlock) | explicit |

The whole check (`semcheck verify ... --engine explicit`, `/usr/bin/time` user seconds):
`circular_wait` at 1,000 devices ran past 7 CPU minutes before (killed) and takes 2.2 s
after; at 100,000 it reports its deadlock in 43.5 CPU s (the search 5.8 s, the rest loading
and the report; peak 894 MB). Two more per-device costs went with it: the stuck-state
judgement asked every blocked thread about every wait (blocked^2 `may_add` questions,
now only the threads that touch the semaphore), and each finding's images were replayed
once per element even for an empty path from a symmetric state, and on the one path even
when stopping at the first counterexample. `ring_recv_before_send` at 150 devices: 50 s
before, 1.6 s after; at 1,000: past 5 CPU minutes before (killed), 5.4 s after. The ring
model's tables at 256 are its N^2 instructions, as before (`rotations` 2.2 s there, both).

The judgement of `circular_wait`'s one stuck state at 30,000 devices (`terminal_findings`,
tracemalloc's peak beyond the 73 MB of the model and its System, branch smalls): 46 MB
before, 14 MB after. It went to the blocked waits' records (11 MB, kept in the finding), a
networkx DiGraph of who could add to whom (25 MB) and its strongly connected components
(8 MB more); the graph is now two flat integer arrays with Tarjan's algorithm on them. The
judgement also checks the budget now: `--max-memory 140` ends inconclusive naming it, where
it reported the deadlock past the bound before (155 MB peak resident for the whole check).

At 128 the default engine lets z3 join the running search (auto.py's side-by-side race):
its encoding adds about 7 CPU s and 300 MB before the search decides. Main at 4d077ea was
about twice as slow as the first round's "after" (64: 12.7 s against 6.3 s) with the
same states; which merge since cost that was not looked into.

The whole table on main a56ca20 (`scale.py --timeout 600 --max-memory 4000`), run while a
`.ci/run` and a busy loop shared the 2 cores (load 3-4), so wall is 1.5-4x CPU. Every
target is met in CPU seconds. New since the last table: ml_dtypes held below 0.7 (its 0.7.0
extension takes 0.6 CPU s to initialize in every capture process: the wheel all_gather at 8
went from 2.2 to 1.5 s). The ring at 256 is 41 CPU s here against 67.8 s at stop 22's load
about 5; its states, and every other count, are unchanged.

| check                                                    | target         | CPU s | wall s | peak MB | states  | verdict                        | engine   |
|----------------------------------------------------------|----------------|-------|--------|---------|---------|--------------------------------|----------|
| ring_allgather model, N=64                               | < 5 s          | 2.0   | 3.5    | 86      | 20,353  | safe                           | explicit |
| ring_allgather model, N=128                              | < 20 s         | 8.2   | 15.6   | 350     | 81,665  | safe                           | explicit |
| ring_allgather model, N=256                              | < 60 s, < 2 GB | 41.0  | 82.9   | 1514    | 327,169 | safe                           | explicit |
| wheel TPU all_gather, N=8                                | < 2 s          | 1.5   | 2.0    | 252     | 714     | violation (data_race)          | explicit |
| wheel TPU all_gather, N=16                               | race, < 30 s   | 5.2   | 8.2    | 266     | 2,706   | violation (data_race)          | explicit |
| wheel TPU all_gather, N=32                               | race, < 120 s  | 25.6  | 55.8   | 488     | 10,530  | violation (data_race)          | explicit |
| reduce_scatter_capacity.py, N=16                         | < 60 s         | 3.7   | 9.7    | 279     | 2,529   | safe                           | explicit |
| allgather_bidirectional.py, N=16                         | < 60 s         | 5.0   | 12.4   | 272     | 0       | safe                           | z3       |
| wheel TPU all_gather, N=16, explicit                     | (compare)      | 2.9   | 6.9    | 268     | 2,706   | violation (data_race)          | explicit |
| wheel TPU all_gather, N=16, explicit --no-symmetry       | (compare)      | 3.1   | 6.7    | 268     | 4,231   | violation (data_race)          | explicit |
| wheel TPU all_gather, N=32, explicit                     | (compare)      | 8.7   | 18.9   | 316     | 10,530  | violation (data_race)          | explicit |
| wheel TPU all_gather, N=32, explicit --no-symmetry       | (compare)      | 9.8   | 22.3   | 316     | 15,919  | violation (data_race)          | explicit |
| allgather_bidirectional.py, N=16, explicit               | (compare)      | 2.4   | 5.9    | 268     | 2,529   | safe                           | explicit |
| allgather_bidirectional.py, N=16, explicit --no-symmetry | (compare)      | 2.4   | 6.6    | 267     | 2,529   | safe                           | explicit |
| reduce_scatter_capacity.py, N=8, explicit                | (compare)      | 1.4   | 3.8    | 250     | 625     | safe                           | explicit |
| reduce_scatter_capacity.py, N=8, explicit --no-symmetry  | (compare)      | 1.4   | 3.5    | 251     | 625     | safe                           | explicit |
| allreduce_ring.py, N=8                                   | < 30 s         | 1.5   | 4.2    | 249     | 929     | safe                           | explicit |
| allreduce_ring.py, N=8 x2                                | < 30 s         | 3.2   | 9.8    | 248     | 2,296   | safe                           | explicit |
| allreduce_ring.py, N=16                                  | < 120 s        | 8.3   | 16.8   | 277     | 0       | safe                           | z3       |
| allreduce_ring.py, N=16 x2                               | < 120 s        | 27.3  | 84.5   | 306     | 29,226  | safe                           | explicit |
| allreduce_ring_no_capacity.py, N=8                       | < 30 s         | 18.7  | 70.7   | 247     | 27,774  | violation (data_race)          | explicit |
| allreduce_ring_no_capacity.py, N=8 x2                    | < 30 s         | 13.5  | 48.2   | 248     | 50,183  | violation (data_race)          | z3       |
| allreduce_ring_no_capacity.py, N=16                      | < 120 s        | 35.8  | 117.9  | 255     | 9,796   | violation (data_race)          | z3       |
| allreduce_ring_no_capacity.py, N=16 x2                   | < 120 s        | 31.5  | 82.6   | 493     | 50,014  | violation (data_race)          | z3       |
| reduce_scatter_bidirectional.py, N=4                     | < 10 s         | 1.5   | 2.5    | 264     | 565     | safe                           | explicit |
| reduce_scatter_bidirectional.py, N=8                     | < 60 s         | 4.8   | 10.1   | 269     | 0       | safe                           | z3       |
| reduce_scatter_bidirectional_no_drain.py, N=4            | < 10 s         | 1.8   | 3.0    | 264     | 557     | violation (semaphore_leftover) | explicit |
| reduce_scatter_bidirectional_no_drain.py, N=8            | < 60 s         | 6.3   | 13.6   | 269     | 0       | violation (semaphore_leftover) | z3       |
| timeout: explicit search, T=5                            | ends < 10 s    | 2.1   | 5.6    | 95      | 61,136  | inconclusive                   | explicit |
| timeout: z3, T=10                                        | ends < 15 s    | 5.0   | 10.1   | 267     | 0       | safe                           | z3       |
| timeout: model code, T=5                                 | ends < 10 s    | 4.7   | 5.5    | 24      | 0       | inconclusive                   | auto     |
| timeout: capture, T=1                                    | ends < 6 s     | 1.4   | 2.0    | 247     | 0       | inconclusive                   | auto     |
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.test_gpu_wheel_collectives import MATMUL  # noqa: E402

RING = os.path.join(ROOT, "models", "ring_allgather.py")
TPU = os.path.join(ROOT, "examples", "tpu")

WHEEL_DRIVER = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas.ops.tpu import all_gather as ag
from jax.sharding import AxisType, Mesh

mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
x = jnp.ones((mesh.size * 8, 128), jnp.float32)
jax.block_until_ready(ag.all_gather(x, mesh=mesh, axis_name="x"))
"""

# A model file whose own code never returns: loading must stop.
SLOW_MODEL = """\
from semcheck.model import ProtocolBuilder


def model(devices):
    while True:  # a model whose own code never returns
        pass
"""

# Measures one command in its own process: CPU of every process it waited for, wall, peak RSS.
WRAPPER = """\
import json, resource, subprocess, sys, time
started = time.monotonic()
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-2000:],
                  "cpu": usage.ru_utime + usage.ru_stime, "wall": time.monotonic() - started,
                  "peak_mb": usage.ru_maxrss / 1024}))
"""


@dataclass(frozen=True)
class Row:
    name: str
    target: str
    path: str
    devices: int
    extra: tuple[str, ...] = ()
    timeout: float | None = None  # overrides --timeout
    max_memory: float | None = None  # overrides --max-memory


def rows(scratch: str) -> list[Row]:
    wheel = os.path.join(scratch, "wheel_all_gather.py")
    slow = os.path.join(scratch, "endless_model.py")
    matmul = os.path.join(scratch, "collective_matmul_mgpu_driver.py")
    with open(wheel, "w") as f:
        f.write(WHEEL_DRIVER)
    with open(slow, "w") as f:
        f.write(SLOW_MODEL)
    with open(matmul, "w") as f:  # the driver tests/test_gpu_wheel_collectives.py uses, 2 SMs
        f.write(MATMUL.format(import_line="from jax.experimental.pallas.ops.gpu import collective_matmul_mgpu as mod",
                              sms=2))
    table = [Row(f"ring_allgather model, N={n}", target, RING, n) for n, target in
             ((64, "< 5 s"), (128, "< 20 s"), (256, "< 60 s, < 2 GB"))]
    # issue 28: linear set-up and a one-path search that stores nothing; 5N^2 states, so
    # past the default state budget of 2,000,000 at 1024
    table += [Row(f"ring_allgather model, N={n}, explicit", target, RING, n,
                  ("--engine", "explicit", "--max-states", "10000000"), timeout, 2000)
              for n, target, timeout in ((512, "< 2 GB", 1800), (1024, "< 2 GB", 3600))]
    # the symmetry group at huge N: kept in tables linear in the threads (a model of one
    # thread and one wait a device, deadlocked at its first state)
    table += [Row(f"circular_wait model, N={n}", target, os.path.join(ROOT, "models", "circular_wait.py"), n,
                  ("--engine", "explicit"), 600, 2000)
              for n, target in ((1000, "< 10 s"), (100_000, "ends, < 2 GB"))]
    table += [Row(f"wheel TPU all_gather, N={n}", target, wheel, n) for n, target in
              ((8, "< 2 s"), (16, "race, < 30 s"), (32, "race, < 120 s"))]
    table += [Row(f"{name}, N=16", "< 60 s", os.path.join(TPU, name), 16)
              for name in ("reduce_scatter_capacity.py", "allgather_bidirectional.py")]
    # what symmetry buys where the partial-order reduction does not collapse the search
    # (the explicit engine alone, with and without it)
    table += [Row(f"{name}, explicit{' --no-symmetry' if off else ''}", "(compare)", path, n,
                  ("--engine", "explicit") + (("--no-symmetry",) if off else ()))
              for name, path, n in (("wheel TPU all_gather, N=16", wheel, 16),
                                    ("wheel TPU all_gather, N=32", wheel, 32),
                                    ("allgather_bidirectional.py, N=16", os.path.join(TPU, "allgather_bidirectional.py"), 16),
                                    ("reduce_scatter_capacity.py, N=8", os.path.join(TPU, "reduce_scatter_capacity.py"), 8))
              for off in (False, True)]
    table += [Row(f"{name}, N={n}{' x2' if k > 1 else ''}", target,
                  os.path.join(TPU, name), n, ("--invocations", str(k)))
              for name in ("allreduce_ring.py", "allreduce_ring_no_capacity.py")
              for n, target in ((8, "< 30 s"), (16, "< 120 s")) for k in (1, 2)]
    table += [Row(f"{name}, N={n}", target, os.path.join(TPU, name), n)
              for name in ("reduce_scatter_bidirectional.py", "reduce_scatter_bidirectional_no_drain.py")
              for n, target in ((4, "< 10 s"), (8, "< 60 s"))]
    # issue 28: bytes per stored state, the explicit search alone (auto may decide by z3)
    table += [Row(f"store: {name}, N={n}{' x2' if k > 1 else ''}, explicit", "<= 100 B/state",
                  os.path.join(TPU, name), n, ("--engine", "explicit", "--invocations", str(k)), 600)
              for name, n, k in (("allreduce_ring.py", 8, 2), ("allreduce_ring.py", 16, 2),
                                 ("allreduce_ring_no_capacity.py", 8, 1), ("allreduce_ring_no_capacity.py", 8, 2))]
    # issue 28's other targets: auto's choice and portfolio (the GPU collective matmul's race,
    # every MoE example at 8 devices, the ring at 32 decided by the explicit search)
    table += [Row("ring_allgather model, N=32", "explicit", RING, 32),
              Row("wheel GPU collective_matmul_mgpu, 2 SMs, N=8", "its race", matmul, 8, (), 600)]
    table += [Row(f"{name}, N=8", "< 10 s", os.path.join(TPU, name), 8)
              for name in sorted(os.listdir(TPU)) if name.startswith("moe_")]
    table += [
        Row("timeout: explicit search, T=5", "ends < 10 s", RING, 32, ("--engine", "explicit", "--no-reduction"), 5),
        Row("timeout: z3, T=10", "ends < 15 s", os.path.join(TPU, "allgather_bidirectional.py"), 16,
            ("--engine", "z3"), 10),
        Row("timeout: model code, T=5", "ends < 10 s", slow, 2, (), 5),
        Row("timeout: capture, T=1", "ends < 6 s", os.path.join(TPU, "allreduce_ring.py"), 8, (), 1),
    ]
    return table


def measure(row: Row, timeout: float, max_memory: float) -> dict:
    limit = row.timeout if row.timeout is not None else timeout
    memory = row.max_memory if row.max_memory is not None else max_memory
    command = [sys.executable, "-m", "semcheck", "verify", row.path, "--devices", str(row.devices),
               "--format", "json", "-q", "--timeout", str(limit), "--max-memory", str(memory), *row.extra]
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *command], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    run = json.loads(proc.stdout)
    try:
        results = json.loads(run["stdout"])["results"]
    except (json.JSONDecodeError, KeyError):
        return {**run, "verdict": f"exit {run['code']}", "states": "-", "engine": "-", "note": run["stderr"][-200:],
                "stored": "-", "per_state": "-", "fixed": "-"}
    verdicts = sorted({r["verdict"] for r in results})
    kinds = sorted({v["kind"] for r in results for v in r["violations"]})
    note = next((n for r in results for n in r["notes"] if "ran out" in n or "decided" in n), "")
    stored = [r["stats"].get("stored_states") for r in results]
    store_bytes = [r["stats"].get("store_bytes") for r in results]
    fixed = [r["stats"].get("store_fixed_bytes") for r in results]
    known = None not in stored and None not in store_bytes and None not in fixed
    return {
        "stored": f"{sum(stored):,}" if known else "-",
        # what the explicit search's store grew by per state it stored: all it held
        # (`stats.store_bytes`) less its tables that do not grow with the states
        # (`stats.store_fixed_bytes`: the numbered completions), which have their own column
        "per_state": f"{(sum(store_bytes) - sum(fixed)) / sum(stored):.0f}" if known and sum(stored) else "-",
        "fixed": f"{sum(fixed) / 1000:.0f}" if known and sum(stored) else "-",
        **run,
        "verdict": "/".join(verdicts) + (f" ({', '.join(kinds)})" if kinds else ""),
        "states": f"{sum(r['stats']['states'] for r in results):,}",
        "engine": "+".join(sorted({r["engine"] for r in results})),
        "note": note,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=120.0, help="--timeout for every row (default 120)")
    parser.add_argument("--max-memory", type=float, default=2000.0,
                        help="--max-memory for every row, MB (default 2000: the target at 256 devices)")
    parser.add_argument("--rows", default="", help="run only the rows whose name contains this text, or, when none does, "
                        "any of its comma-separated parts (row names have commas: 'N=512, explicit')")
    parser.add_argument("--list", action="store_true", help="list the rows and exit")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="semcheck-scale-") as scratch:
        table = rows(scratch)
        if args.rows:
            whole = [r for r in table if args.rows in r.name]
            wanted = [w.strip() for w in args.rows.split(",") if w.strip()]
            table = whole or [r for r in table if any(w in r.name for w in wanted)]
            if not table:
                sys.exit(f"--rows {args.rows!r} selects no row (--list lists them)")
        if args.list:
            for r in table:
                print(r.name)
            return
        header = ("check", "target", "CPU s", "wall s", "peak MB", "states", "stored", "B/state", "fixed KB",
                  "verdict", "engine")
        lines = []
        for row in table:
            m = measure(row, args.timeout, args.max_memory)
            lines.append((row.name, row.target, f"{m['cpu']:.1f}", f"{m['wall']:.1f}", f"{m['peak_mb']:.0f}",
                          m["states"], m["stored"], m["per_state"], m["fixed"], m["verdict"], m["engine"]))
            print("  " + " | ".join(lines[-1]) + (f"  [{m['note'][:140]}]" if m["note"] else ""), file=sys.stderr)
        widths = [max(len(str(x[i])) for x in [header, *lines]) for i in range(len(header))]
        print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
        print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        for line in lines:
            print("| " + " | ".join(str(c).ljust(w) for c, w in zip(line, widths)) + " |")


if __name__ == "__main__":
    main()
