"""Hold semcheck's TPU rules against a real chip: one small probe kernel per hardware fact.

    python benchmarks/on_tpu.py [--only KEY,...] [--timeout S]   # on a machine with a TPU
    python benchmarks/on_tpu.py --list                           # the facts, anywhere
    python benchmarks/on_tpu.py --lower                          # JAX's TPU lowering of every probe, on a CPU
    python benchmarks/on_tpu.py --interpret --only copy_issue_order   # a probe in JAX's TPU interpreter

Each fact semcheck checks TPU kernels by is an entry of `semcheck/tpu_facts.py` (`FACTS`: the
rule, its basis, whether a chip has shown it); the TPU frontend and the semantics' messages
read the same entries. For every fact this script runs a probe on the TPU and prints what
the chip did beside what semcheck assumes, the unobserved facts included (zero-size and
traced-size copies, `run_scoped` semaphores, sizes that are not a multiple of 32 bytes,
whether copies one core started to one device land in the order they started). After the
table it prints the same as lines to paste into ../shared/reference/tpu-observations.md; the
docstring of a probe whose answer would change semcheck's wording says which lines change
(`_order`, for the `rests on:` line of a race between two copies).

No probe can block for ever: before every wait the kernel polls the semaphore with
`semaphore_read`, a bounded number of times, and waits only when the count is there (a
probe that may leave a count behind runs with disable_semaphore_checks=True, so the leftover
is read, not fatal). Each probe runs in a process of its own (the TPU is opened by one
process at a time, and a kernel that halts the core fails every later computation of its
process), with a timeout; a probe of what one kernel leaves for the next runs its two
kernels in that one process, since that is where the carry was seen. The parent never imports JAX: it asks a child whether the default
backend is a TPU, and without one it says so and exits 1.

It is not a test (CI has no TPU). `--lower` runs JAX's Pallas TPU lowering of every probe on
the CPU, which is what tests/test_on_tpu.py checks; `--interpret` runs probes in JAX's TPU
interpreter (its eager DMA mode), which cannot read a semaphore, so there the counts a probe
polls for read as there and only the data it moves is real. Not run on a TPU yet: the observations
in docs/semantics.md ("What the hardware does") come from the earlier probes of the same
facts (../shared/reference/tpu-observations.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from semcheck import tpu_facts  # noqa: E402 (the repository's own package, next to this folder)

F32 = "float32"  # numpy's name: jnp.float32 needs JAX, imported only in a probe's process
POLL_TRIES = 100_000  # semaphore_read calls before a probe gives up waiting (far past any copy here)
OUT = 8  # int32 values a probe kernel reports (an SMEM output)
ROWS = 2048  # the f32 (ROWS, 128) input: 1 MiB


# --- kernel helpers (JAX is imported only in a probe's process) --------------------------------


# Set in a process that runs the probes in JAX's TPU interpreter (`--interpret`), which cannot
# read a semaphore (semaphore_read has no interpreter rule in JAX 0.10.2): a poll then answers
# that the count is there (so a count a probe reports is the one it asked for, not one read),
# and the waits it guards are made. The interpreter runs in its eager DMA mode, where a copy
# has landed once started, so a probe's copy waits end.
INTERPRETED = False


def poll(sem, value, tries=POLL_TRIES):
    """Read `sem` until it is at least `value` or `tries` reads were made; the last read."""
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl

    if INTERPRETED:
        return jnp.asarray(value, jnp.int32)

    def going(carry):
        i, seen = carry
        return (i < tries) & (seen < value)

    return lax.while_loop(going, lambda c: (c[0] + 1, pl.semaphore_read(sem)), (0, pl.semaphore_read(sem)))[1]


def bounded_wait(sem, value):
    """Wait for `value` on a REGULAR or barrier semaphore only once it is there; what was read."""
    from jax.experimental import pallas as pl

    seen = poll(sem, value)

    @pl.when(seen >= value)
    def _():
        pl.semaphore_wait(sem, value)

    return seen


def bounded_copy_wait(copy, sem, units):
    """`copy.wait()` only once its semaphore holds `units`; what was read."""
    from jax.experimental import pallas as pl

    seen = poll(sem, units)

    @pl.when(seen >= units)
    def _():
        copy.wait()

    return seen


@dataclass
class Step:
    """One kernel call of a probe: a jitted function and a maker of its arguments."""

    fn: Callable
    args: Callable[[], tuple]


def call(kernel, *, scratch=(), prefetch=None, **params) -> Step:
    """`kernel([prefetch_ref,] x_hbm, out_smem, *scratch)` on the first device, inside a
    shard_map over a mesh of that device (so remote ids and the barrier semaphore exist);
    `out_smem` is int32[OUT], what the probe reports."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    out_shape = jax.ShapeDtypeStruct((OUT,), jnp.int32)
    any_spec, out_spec = pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.SMEM)
    compiler_params = pltpu.CompilerParams(**params)
    if prefetch is None:
        kernel_call = pl.pallas_call(kernel, out_shape=out_shape, in_specs=[any_spec], out_specs=out_spec,
                                     scratch_shapes=list(scratch), compiler_params=compiler_params)
    else:
        spec = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, in_specs=[any_spec], out_specs=out_spec,
                                            scratch_shapes=list(scratch))
        kernel_call = pl.pallas_call(kernel, out_shape=out_shape, grid_spec=spec, compiler_params=compiler_params)

    def args():
        return (source(),) if prefetch is None else (jnp.asarray(prefetch, jnp.int32), source())

    return Step(jax.jit(on_first_device(kernel_call, 1 if prefetch is None else 2)), args)


def source():
    """The probes' input: f32 (ROWS, 128) holding 0, 1, 2, ... (each value names its place)."""
    import jax.numpy as jnp

    return jnp.arange(ROWS * 128, dtype=jnp.float32).reshape(ROWS, 128)


def on_first_device(kernel_call, n_args: int):
    """`kernel_call` inside a shard_map over a mesh of the first device (axis "x")."""
    import jax
    import numpy as np
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    return jax.shard_map(kernel_call, mesh=mesh, in_specs=(P(),) * n_args, out_specs=P(), check_vma=False)


# --- the probes: one per fact ------------------------------------------------------------------


@dataclass
class Probe:
    """How a fact is put to the chip: `steps` builds the kernel calls (run in order in one
    process), `judge` reads their outputs, or the error that ended the process, and says
    what the chip did and whether that is semcheck's assumption (None: cannot tell)."""

    fact: str
    steps: Callable[[], list[Step]]
    judge: Callable[[list | None, str | None], tuple[str, bool | None]]
    repeats: int = 1  # runs of each kernel call, in a row (for what a chip may do only sometimes)


PROBES: dict[str, Probe] = {}


def probe(fact: str, judge, repeats: int = 1):
    def register(steps):
        PROBES[fact] = Probe(fact, steps, judge, repeats)
        return steps
    return register


def _values(outs, n: int) -> list[int]:
    return [int(v) for v in outs[0][:n]]


def _judge_nondecrementing(outs, error):
    if outs is None:
        return f"failed: {error}", None
    after, drained = _values(outs, 2)
    return (f"signal 4, wait 2 with decrement=False, then read {after} (and drained {drained})",
            after == 2)


@probe("nondecrementing_wait", _judge_nondecrementing)
def _nondecrementing():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_hbm, out, sem):
        pl.semaphore_signal(sem, 4)
        seen = poll(sem, 4)

        @pl.when(seen >= 4)
        def _():
            pl.semaphore_wait(sem, 2, decrement=False)

        after = pl.semaphore_read(sem)
        out[0] = after
        bounded_wait(sem, after)  # take what is left, whatever the wait did
        out[1] = after

    return [call(kernel, scratch=[pltpu.SemaphoreType.REGULAR])]


def halts_with(words: str, ran: str):
    """A judge for a probe semcheck expects to halt the core with an error saying `words`;
    `ran` says what the probe did if it ends without one."""
    def judge(outs, error):
        if outs is not None:
            return f"{ran} without error", False
        halted = error is not None and words in error
        return (f"halted: {error}" if halted else f"failed otherwise: {error}"), halted
    return judge


@probe("scratch_leftover_halts", halts_with("nonzero value upon exit", "exited with 1 left on a scratch semaphore"))
def _scratch_leftover():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_hbm, out, sem):
        pl.semaphore_signal(sem, 1)  # never waited for, with the checks on
        out[0] = pl.semaphore_read(sem)

    return [call(kernel, scratch=[pltpu.SemaphoreType.REGULAR])]


def _judge_carry(outs, error):
    if outs is None:
        return f"failed: {error}", None
    first, second = _values(outs[1:2], 2)  # the kernels: leak, read, leak a copy, read
    (dma,) = _values(outs[3:4], 1)
    return (f"next kernel read (places 0, 1) = ({first}, {second}) after leaks of (2, 1), and {dma} "
            f"after a 4 KiB copy left unwaited (semcheck: 2, 1 and 128)",
            (first, second, dma) == (2, 1, 128))


@probe("leftover_carries_without_checks", _judge_carry)
def _carry():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    regular = [pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.REGULAR]

    def leak(x_hbm, out, a, b):
        pl.semaphore_signal(a, 2)
        pl.semaphore_signal(b, 1)

    def read(x_hbm, out, a, b):
        first, second = pl.semaphore_read(a), pl.semaphore_read(b)
        out[0], out[1] = first, second
        bounded_wait(a, first)
        bounded_wait(b, second)

    def leak_copy(x_hbm, out, buf, sem):
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf, sem)
        copy.start()
        out[0] = poll(sem, 128)  # landed; not waited for

    def read_copy(x_hbm, out, buf, sem):
        out[0] = pl.semaphore_read(sem)
        bounded_copy_wait(pltpu.make_async_copy(x_hbm.at[pl.ds(0, 8)], buf, sem), sem, 128)

    dma = [pltpu.VMEM((8, 128), F32), pltpu.SemaphoreType.DMA]
    return [call(leak, scratch=regular, disable_semaphore_checks=True),
            call(read, scratch=regular, disable_semaphore_checks=True),
            call(leak_copy, scratch=dma, disable_semaphore_checks=True),
            call(read_copy, scratch=dma, disable_semaphore_checks=True)]


def _judge_barrier(outs, error):
    if outs is None:
        return f"failed: {error}", None
    (seen,) = _values(outs[-1:], 1)
    return f"no error; the next kernel with the same collective_id read {seen} at entry", seen == 1


@probe("barrier_leftover_carries", _judge_barrier)
def _barrier():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def leave_one(x_hbm, out):
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(0,))
        pl.semaphore_signal(barrier, 1, device_id=(0,))
        out[0] = bounded_wait(barrier, 1)

    def read(x_hbm, out):
        barrier = pltpu.get_barrier_semaphore()
        seen = pl.semaphore_read(barrier)
        out[0] = seen
        bounded_wait(barrier, seen)

    return [call(leave_one, collective_id=7), call(read, collective_id=7)]


DMA_SIZES = ((1, 512), (8, 4096), (16, 8192), (64, 32768), (2048, 1 << 20))  # (f32 rows of 128, bytes)


def _judge_units(outs, error):
    if outs is None:
        return f"failed: {error}", None
    seen = [_values([o], 2) for o in outs]
    text = ", ".join(f"{nbytes} B -> {read} (left {left})" for (_, nbytes), (read, left) in zip(DMA_SIZES, seen))
    return text, all(read == nbytes // 32 and left == 0 for (_, nbytes), (read, left) in zip(DMA_SIZES, seen))


def _copy_and_read(rows: int, cols: int, units: int):
    """A local copy of x[0:rows, 0:cols] into a scratch buffer: out = (what its semaphore
    reads once the copy landed, what it reads after the wait)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_hbm, out, buf, sem):
        src = x_hbm.at[pl.ds(0, rows), pl.ds(0, cols)]
        copy = pltpu.make_async_copy(src, buf, sem)
        copy.start()
        seen = poll(sem, units)
        out[0] = seen
        bounded_copy_wait(copy, sem, units)
        out[1] = pl.semaphore_read(sem)

    return call(kernel, scratch=[pltpu.VMEM((rows, cols), F32), pltpu.SemaphoreType.DMA], disable_semaphore_checks=True)


@probe("dma_semaphore_unit", _judge_units)
def _units():
    return [_copy_and_read(rows, 128, nbytes // 32) for rows, nbytes in DMA_SIZES]


ODD_SIZES = ((1, 1), (1, 25), (1, 12), (1, 40))  # (rows, f32 columns): 4, 100, 48, 160 bytes


def _judge_rounding(outs, error):
    if outs is None:
        return f"failed: {error}", None
    seen = [_values([o], 2) for o in outs]
    text = ", ".join(f"{cols * 4} B -> {read} (left {left})" for (_, cols), (read, left) in zip(ODD_SIZES, seen))
    # semcheck's rule for such kernels counts bytes, so a copy and the wait through its own
    # descriptor must balance; what each size reads is printed for the rule still to learn
    return text, all(left == 0 for _read, left in seen)


@probe("dma_unit_rounding", _judge_rounding)
def _rounding():
    return [_copy_and_read(rows, cols, -(-rows * cols * 4 // tpu_facts.DMA_UNIT_BYTES)) for rows, cols in ODD_SIZES]


def _judge_zero(outs, error):
    if outs is None:
        return f"failed: {error}", None
    at_start, later = _values(outs, 2)
    return (f"a copy of 0 rows (size from scalar prefetch) reads {at_start} at once and {later} later; "
            "its wait was not tried (a wait the chip might never end)"), (at_start, later) == (0, 0)


@probe("zero_size_dma", _judge_zero)
def _zero():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(n_ref, x_hbm, out, buf, sem):
        n = n_ref[0]
        pltpu.make_async_copy(x_hbm.at[pl.ds(0, n)], buf.at[pl.ds(0, n)], sem).start()
        out[0] = pl.semaphore_read(sem)
        out[1] = poll(sem, 1, tries=10_000)

    return [call(kernel, scratch=[pltpu.VMEM((8, 128), F32), pltpu.SemaphoreType.DMA], prefetch=[0],
                 disable_semaphore_checks=True)]


def _judge_traced(outs, error):
    if outs is None:
        return f"failed: {error}", None
    read, left = _values(outs, 2)
    return f"a copy of 8 rows (size from scalar prefetch, 4 KiB) reads {read}, then {left} after its wait", (
        read, left) == (128, 0)


@probe("traced_size_dma", _judge_traced)
def _traced():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(n_ref, x_hbm, out, buf, sem):
        n = n_ref[0]
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(0, n)], buf.at[pl.ds(0, n)], sem)
        copy.start()
        out[0] = poll(sem, 128)
        bounded_copy_wait(copy, sem, 128)
        out[1] = pl.semaphore_read(sem)

    return [call(kernel, scratch=[pltpu.VMEM((8, 128), F32), pltpu.SemaphoreType.DMA], prefetch=[8],
                 disable_semaphore_checks=True)]


@probe("run_scoped_semaphore", halts_with("nonzero value upon exit", "exited with 1 left on a run_scoped semaphore"))
def _scoped():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_hbm, out):
        def scope(sem):
            out[0] = pl.semaphore_read(sem)
            pl.semaphore_signal(sem, 1)  # left at exit, with the checks on

        pl.run_scoped(scope, pltpu.SemaphoreType.REGULAR)

    return [call(kernel)]


def _judge_index(outs, error):
    if outs is None:
        return f"failed: {error}", None
    own0, own1, other, passed = _values(outs, 4)
    return (f"signal and wait at index 2 of 2 ran; the array read ({own0}, {own1}), the next semaphore "
            f"{other}, the wait {'passed' if passed else 'never saw its count'}"), own0 == own1 == 0


@probe("semaphore_index_out_of_bounds", _judge_index)
def _index():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(i_ref, x_hbm, out, sems, other):
        i = i_ref[0]
        pl.semaphore_signal(sems.at[i], 1)
        out[0], out[1], out[2] = pl.semaphore_read(sems.at[0]), pl.semaphore_read(sems.at[1]), pl.semaphore_read(other)
        out[3] = (bounded_wait(sems.at[i], 1) >= 1).astype("int32")

    return [call(kernel, scratch=[pltpu.SemaphoreType.REGULAR((2,)), pltpu.SemaphoreType.REGULAR], prefetch=[2],
                 disable_semaphore_checks=True)]


@probe("dma_window_out_of_bounds", halts_with("BoundsCheck", "a copy of rows 2044:2052 of 2048 ran"))
def _window():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(start_ref, x_hbm, out, buf, sem):
        copy = pltpu.make_async_copy(x_hbm.at[pl.ds(start_ref[0], 8)], buf, sem)
        copy.start()
        out[0] = bounded_copy_wait(copy, sem, 128)

    return [call(kernel, scratch=[pltpu.VMEM((8, 128), F32), pltpu.SemaphoreType.DMA], prefetch=[ROWS - 4],
                 disable_semaphore_checks=True)]


def _judge_own(outs, error):
    if outs is None:
        return f"failed: {error}", None
    signal, recv, send = _values(outs, 3)
    return (f"a remote signal to the own id read {signal}; a remote copy to it: receive side {recv}, "
            f"send side {send} (then all waited)"), (signal, recv, send) == (1, 128, 128)


@probe("remote_to_own_device", _judge_own)
def _own():
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_hbm, out, buf, ready, send, recv):
        pl.semaphore_signal(ready, 1, device_id=(0,))
        out[0] = bounded_wait(ready, 1)
        copy = pltpu.make_async_remote_copy(x_hbm.at[pl.ds(0, 8)], buf, send, recv, device_id=(0,))
        copy.start()
        received, sent = poll(recv, 128), poll(send, 128)
        out[1], out[2] = received, sent

        @pl.when((received >= 128) & (sent >= 128))
        def _():
            copy.wait()

    return [call(kernel, scratch=[pltpu.VMEM((8, 128), F32), pltpu.SemaphoreType.REGULAR,
                                  pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA], disable_semaphore_checks=True)]


# Copies one core started, in order, into one destination region: does the destination ever
# show an earlier copy's data last? Each case is (what it is, its copies in the order they
# start: (source row, destination row, rows)); every source row range is its own, so each value
# that lands names the copy that brought it (the input holds 0, 1, 2, ...).
ORDER_CASES = (
    ("4 copies of 4 KiB", ((0, 0, 8), (8, 0, 8), (16, 0, 8), (24, 0, 8))),
    ("4 copies of 128 KiB", ((0, 0, 256), (256, 0, 256), (512, 0, 256), (768, 0, 256))),
    ("512 KiB, then 4 KiB over its first rows", ((0, 0, 1024), (1024, 0, 8))),
    ("4 KiB, then 512 KiB over it", ((1024, 0, 8), (0, 0, 1024))),
    ("16 copies of 4 KiB", tuple((8 * k, 0, 8) for k in range(16))),
)
ORDER_ROUTES = ("local", "remote to its own id")
ORDER_REPEATS = 20
DESTINATION_ROWS = 1024  # the destination: an f32 (1024, 128) output in HBM, 512 KiB


def _judge_order(outs, error):
    """Per run: (copies whose receive side landed, whose send side did, elements holding the
    last-started copy's data, an earlier copy's, neither's)."""
    if outs is None:
        return f"failed: {error}", None
    steps = [(case, route, len(copies)) for case, copies in ORDER_CASES for route in ORDER_ROUTES]
    repeats = max(1, len(outs) // len(steps))
    runs = [(*steps[i // repeats], _values([o], 5)) for i, o in enumerate(outs)]
    judged = [(case, route, earlier) for case, route, n, (landed, sent, _last, earlier, _other) in runs
              if landed == sent == n]
    reordered = sorted({f"{case}, {route}" for case, route, earlier in judged if earlier})
    torn = sum(1 for *_, n, (landed, sent, _last, _earlier, other) in runs if other and landed == sent == n)
    text = (f"{len(runs)} runs of 2 to 16 copies one core started in order into one region of its device "
            f"(local, and remote to its own id; 4 KiB to 512 KiB): an earlier copy's data showed last in "
            f"{sum(1 for *_, earlier in judged if earlier)} of the {len(judged)} runs in which every copy landed"
            + (f" ({'; '.join(reordered)})" if reordered else "")
            + (f"; {len(runs) - len(judged)} runs had a copy that did not land within the poll"
               if len(judged) < len(runs) else "")
            + (f"; {torn} runs held values of no copy" if torn else ""))
    # Seeing the earlier copy last shows the reading semcheck checks by; never seeing it
    # cannot show that the chip keeps copies in order.
    return text, (True if reordered else None)


@probe("copy_issue_order", _judge_order, repeats=ORDER_REPEATS)
def _order():
    """What to change for each outcome (the line it prints goes into
    ../shared/reference/tpu-observations.md either way):

    * an earlier copy's data showed last (agrees: yes): the reading is observed. In
      semcheck/tpu_facts.py, the `copy_issue_order` fact gets observed=True and the printed
      counts as its basis, and ISSUE_ORDER_READING cites them instead of JAX's interpreter;
      since the reading is then a fact, semantics/properties.py (`_race_finding`, the
      `readings = ...` line) may stop saying the race rests on it (tests/test_issue_order_reading.py
      and docs/races.md's "DMAs may complete in any order" paragraph follow);
    * never (agrees: ?): the chip kept issue order in every run, which does not show that it
      always does. ISSUE_ORDER_READING (semcheck/tpu_facts.py) and docs/races.md's paragraph
      say how many runs on which chip landed in order; a switch to check kernels under the
      other reading (result.Reading's `switch`) is then worth offering.
    """
    return [_order_step(copies, route) for _case, copies in ORDER_CASES for route in ORDER_ROUTES]


def _order_step(copies, route: str, waits=None) -> Step:
    """The kernel that starts `copies` in order and waits for each (in the order `waits`
    gives their indices: start order by default; tests/test_on_tpu.py reverses it in JAX's
    interpreter, which lands a copy when it is waited for, to see the probe catch copies
    landing out of order), and what landed where."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    remote = route != "local"
    n = len(copies)

    def kernel(x_hbm, out, dst, send, recv):
        # Its own id as a kernel finds a peer's (JAX 0.10.2 gives a kernel whose only remote
        # operations are copies to a constant id no mesh: it sees none without an axis_index).
        me = lax.axis_index("x") if remote else None
        started = []
        for k, (src, at, rows) in enumerate(copies):
            window, into = x_hbm.at[pl.ds(src, rows)], dst.at[pl.ds(at, rows)]
            if remote:
                copy = pltpu.make_async_remote_copy(window, into, send.at[k], recv.at[k], device_id=(me,))
            else:
                copy = pltpu.make_async_copy(window, into, recv.at[k])
            copy.start()
            started.append(copy)
        landed = sent = 0
        for k in range(n) if waits is None else waits:
            (_src, _at, rows), copy = copies[k], started[k]
            units = rows * 128 * 4 // tpu_facts.DMA_UNIT_BYTES
            received = bounded_copy_wait(_Side(copy, "recv") if remote else copy, recv.at[k], units)
            landed += (received >= units).astype(jnp.int32)
            if remote:
                sent += (bounded_copy_wait(_Side(copy, "send"), send.at[k], units) >= units).astype(jnp.int32)
        out[0], out[1] = landed, sent if remote else landed

    kernel_call = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((OUT,), jnp.int32), jax.ShapeDtypeStruct((DESTINATION_ROWS, 128), jnp.float32)),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=(pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)),
        scratch_shapes=[pltpu.SemaphoreType.DMA((n,)), pltpu.SemaphoreType.DMA((n,))],
        compiler_params=pltpu.CompilerParams(disable_semaphore_checks=True),
    )
    # Which copy should be last at each element of the destination, and what each copy brings.
    last = np.full((DESTINATION_ROWS, 128), -1)
    brought = np.full((n, DESTINATION_ROWS, 128), np.nan, np.float32)
    for k, (src, at, rows) in enumerate(copies):
        last[at:at + rows] = k
        brought[k, at:at + rows] = np.arange(src * 128, (src + rows) * 128, dtype=np.float32).reshape(rows, 128)
    covered = last >= 0
    from_last = np.take_along_axis(brought, np.maximum(last, 0)[None], 0)[0]

    def run(x):
        status, dst = on_first_device(kernel_call, 1)(x)
        on_last = jnp.sum(covered & (dst == from_last))
        on_earlier = jnp.sum(covered & jnp.any((dst[None] == brought) & (np.arange(n)[:, None, None] < last[None]), 0))
        other = int(covered.sum()) - on_last - on_earlier
        return jnp.concatenate([status[:2], jnp.stack([on_last, on_earlier, other]).astype(jnp.int32)])

    return Step(jax.jit(run), lambda: (source(),))


class _Side:
    """One side of a remote copy, waited for as `bounded_copy_wait` waits a copy."""

    def __init__(self, copy, side: str):
        self.copy, self.side = copy, side

    def wait(self):
        (self.copy.wait_recv if self.side == "recv" else self.copy.wait_send)()


# --- running ------------------------------------------------------------------------------------


def run_probe(key: str, interpret: bool = False, repeats: int | None = None) -> list[list[int]]:
    """Run the probe's kernels in order (each `repeats` times, by default the probe's), on
    the TPU or in JAX's TPU interpreter; their outputs."""
    import contextlib

    import jax

    global INTERPRETED
    found = PROBES[key]
    runs = found.repeats if repeats is None else repeats
    mode = contextlib.nullcontext()
    if interpret:
        from jax.experimental.pallas import tpu as pltpu

        INTERPRETED = True
        mode = pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(dma_execution_mode="eager"))
    try:
        with mode:
            outs = [jax.device_get(step.fn(*step.args())) for step in found.steps() for _ in range(runs)]
    finally:
        INTERPRETED = False
    return [[int(v) for v in out] for out in outs]


def lower_probe(key: str) -> str | None:
    """JAX's Pallas TPU lowering of the probe's kernels, on this machine (a CPU does): None,
    or why it failed."""
    from semcheck.lower.tpu_hardware import tpu_generation_for_cpu

    try:
        with tpu_generation_for_cpu():
            for step in PROBES[key].steps():
                step.fn.trace(*step.args()).lower(lowering_platforms=("tpu",))
    except Exception as e:  # noqa: BLE001 - reported, per probe
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    return None


def backend(timeout: float) -> tuple[str, str]:
    """JAX's default backend, and the device and JAX version in words ("TPU v5 lite, JAX
    0.10.2"), asked in a child (this process must not open the TPU)."""
    ask = "import jax; print(f'{jax.devices()[0].device_kind}, JAX {jax.__version__}'); print(jax.default_backend())"
    try:
        done = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "unknown (JAX did not start in time)", ""
    lines = done.stdout.strip().splitlines()
    return (lines[-1], lines[-2]) if done.returncode == 0 and len(lines) >= 2 else ("unknown", "")


def observe(key: str, timeout: float, interpret: bool = False) -> tuple[str, bool | None]:
    try:
        done = subprocess.run([sys.executable, HERE, "--probe", key] + (["--interpret"] if interpret else []),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"did not end within {timeout:g} s (a probe that blocked: a bug in the probe)", None
    outs, error = None, None
    if done.returncode == 0:
        outs = json.loads(done.stdout.strip().splitlines()[-1])
    else:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        error = next((line.strip() for line in reversed(lines) if "Error" in line or "error" in line),
                     lines[-1].strip() if lines else f"exit code {done.returncode}")
    return PROBES[key].judge(outs, error)


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated fact keys (default: every fact)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a probe's process may take")
    parser.add_argument("--list", action="store_true", help="print the facts and semcheck's assumptions, run nothing")
    parser.add_argument("--lower", action="store_true", help="lower every probe for TPU with JAX on this machine")
    parser.add_argument("--interpret", action="store_true",
                        help="run the probes in JAX's TPU interpreter on this machine, to try a probe end to end "
                             "(e.g. --only copy_issue_order): what the interpreter does, not a chip, and a count a "
                             "probe polls for reads as there (the interpreter cannot read a semaphore)")
    parser.add_argument("--probe", help=argparse.SUPPRESS)  # one probe, in its own process
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(run_probe(args.probe, args.interpret)))
        return 0
    keys = [k for k in args.only.split(",") if k] or [f.key for f in tpu_facts.FACTS]
    unknown = sorted(set(keys) - set(PROBES))
    if unknown or not keys:
        print(f"no probe for {', '.join(unknown) or 'nothing'}; facts: {', '.join(PROBES)}", file=sys.stderr)
        return 2
    if args.list:
        rows = [("fact", "observed", "semcheck assumes")]
        rows += [(k, "yes" if tpu_facts.fact(k).observed else "no", tpu_facts.fact(k).assumption) for k in keys]
        print(table(rows))
        return 0
    if args.lower:
        failed = {k: why for k in keys if (why := lower_probe(k)) is not None}
        for k in keys:
            print(f"{k}: {'lowers for TPU' if k not in failed else 'JAX TPU lowering failed: ' + failed[k]}")
        return 1 if failed else 0
    found, device = ("tpu", "JAX's TPU interpreter") if args.interpret else backend(args.timeout)
    if found != "tpu":
        print(f"no TPU here (JAX's default backend is {found}): these probes run only on a TPU; "
              "`--list` prints the facts and `--lower` checks the probes with JAX's TPU lowering", file=sys.stderr)
        return 1
    rows = [("fact", "semcheck assumes", "JAX's TPU interpreter did" if args.interpret else "the chip did", "agrees")]
    for k in keys:
        did, agrees = observe(k, args.timeout, args.interpret)
        rows.append((k, tpu_facts.fact(k).assumption, did, {True: "yes", False: "NO", None: "?"}[agrees]))
        print(f"{k}: {did}", file=sys.stderr, flush=True)
    print(table(rows))
    # The same, as lines for ../shared/reference/tpu-observations.md.
    print(f"\nobserved on {device}, {datetime.date.today().isoformat()} (benchmarks/on_tpu.py):")
    for key, _assumes, did, agrees in rows[1:]:
        print(f"- `{key}`: {did} (semcheck's rule: {'holds' if agrees == 'yes' else 'contradicted' if agrees == 'NO' else 'not decided'})")
    return 0 if all(r[3] == "yes" for r in rows[1:]) else 1


if __name__ == "__main__":
    sys.exit(main())
