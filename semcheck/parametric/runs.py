"""Concrete runs of a template at one device count, by counting alone (no schedules): the
symmetric run that decides whether any device blocks for good, and the greedy run of a few
neighbouring devices, one event held back, that shows where they must stop.

Both rest on one fact of the covered class (docs/parametric.md, "Persistence"): a wait on a
device's own semaphore, once it can pass, stays passable until that device passes it, since
only the device itself takes from its semaphores. Every maximal run therefore reaches the
same final positions, and the run that lets every device move as far as it can reaches them.
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

from semcheck.ir import DmaSide
from semcheck.parametric.template import Step, Template
from semcheck.records import record


@lru_cache(maxsize=64)
def program(template: Template, n: int) -> tuple[tuple[Step, int], ...]:
    """(step, round) at every position of every device's program at N = n."""
    trips = template.trips(n)
    out = [(s, 0) for s in template.pro]
    out += [(s, k) for k in range(max(trips, 0)) for s in template.body]
    out += [(s, 0) for s in template.epi]
    return tuple(out)


def position(template: Template, step: Step, k: int, n: int) -> int:
    if step.seg == 0:
        return step.j
    if step.seg == 1:
        return len(template.pro) + k * len(template.body) + step.j
    return len(template.pro) + template.trips(n) * len(template.body) + step.j


@record(frozen=True)
class Stuck:
    """Where the symmetric run stops: a wait every device reaches and none can pass."""

    step: Step
    round: int
    index: int
    has: int
    needs: int


def symmetric_run(template: Template, n: int) -> tuple[Stuck | None, dict[tuple[str, int], int]]:
    """Every device runs the same program, so in the run where each moves whenever it can they
    all stand at the same position, and a device's semaphore receives from its neighbours
    exactly what its own steps send to theirs: one program, every addition landing on
    itself. Returns where it stops (None: at the end) and the final counts."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for step, k in program(template, n):
        if step.waits:
            assert step.sem is not None
            key = (step.sem.alloc, step.sem.index.value(0, k, n))
            if counts[key] < step.amount:
                return Stuck(step, k, key[1], counts[key], step.amount), dict(counts)
            counts[key] -= step.amount
        for use, amount, _side in step.adds():
            counts[(use.alloc, use.index.value(0, k, n))] += amount
    return None, {key: c for key, c in counts.items() if c}


@record(frozen=True)
class Held:
    """What a greedy run holds back: the completion `side` of the copy device `device` starts
    at `position` (it never happens), or every step of `device` from `position` on."""

    device: int
    position: int
    side: DmaSide | None = None  # None: the device stops at `position`


@lru_cache(maxsize=64)
def outside_totals(template: Template, n: int) -> dict[tuple[str, int, int], int]:
    """(alloc, offset, index) -> what one device's whole program adds there."""
    totals: dict[tuple[str, int, int], int] = defaultdict(int)
    for step, k in program(template, n):
        for use, amount, _side in step.adds():
            totals[(use.alloc, use.offset, use.index.value(0, k, n))] += amount
    return dict(totals)


def window_run(template: Template, n: int, window: tuple[int, ...], held: Held) -> dict[int, int]:
    """The positions where the devices at `window` (offsets from device 0) stop when each
    moves whenever it can, `held` is held back, and every device outside the window is
    taken to have already done everything it ever does (more than it can have done, so
    they stop no earlier than in any real run). Returns offset -> position (the program's
    length when it finishes)."""
    prog = program(template, n)
    length = len(prog)
    members = set(window)
    counts: dict[tuple[int, str, int], int] = defaultdict(int)
    for (alloc, offset, index), amount in outside_totals(template, n).items():
        for o in window:
            if o - offset not in members:
                counts[(o, alloc, index)] += amount
    pcs = {o: 0 for o in window}
    moved = True
    while moved:
        moved = False
        for o in window:
            pc = pcs[o]
            stop = held.position if held.side is None and held.device == o else length
            while pc < stop:
                step, k = prog[pc]
                if step.waits:
                    assert step.sem is not None
                    key = (o, step.sem.alloc, step.sem.index.value(0, k, n))
                    if counts[key] < step.amount:
                        break
                    counts[key] -= step.amount
                else:
                    for use, amount, side in step.adds():
                        if held.side is not None and held.device == o and held.position == pc and held.side == side:
                            continue
                        target = o + use.offset
                        if target in members:
                            counts[(target, use.alloc, use.index.value(0, k, n))] += amount
                pc += 1
                moved = True
            pcs[o] = pc
    return pcs
