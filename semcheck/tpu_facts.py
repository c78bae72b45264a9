"""What a TPU chip does where a verdict depends on it: each rule semcheck checks TPU kernels
by, with its basis (JAX's source, and what a TPU v5e chip did with JAX 0.10.2:
../shared/reference/tpu-observations.md, summarised in docs/semantics.md, "What the hardware
does").

One table for everyone who needs these facts: the TPU frontend reads the rules it applies
(the DMA semaphore unit, how `decrement=False` lowers in the JAX it runs with), the
semantics read the texts a leftover's message gives, and `benchmarks/on_tpu.py` runs one
probe kernel per fact on a real chip and prints what the chip did beside `assumption`. A
fact with `observed=False` is a stated guess: a result that rests on it says so.

Vocabulary: imports nothing of semcheck's, so every layer can read it.
"""

from __future__ import annotations

import enum

from semcheck.records import record

OBSERVED = "observed on TPU v5e, JAX 0.10.2"


@record(frozen=True)
class Fact:
    """One hardware rule semcheck relies on. `key` names it (and its probe in
    benchmarks/on_tpu.py); `assumption` is what semcheck checks kernels by; `basis` where
    that comes from; `observed` whether a chip has shown it (False: unobserved, a guess)."""

    key: str
    assumption: str
    basis: str
    observed: bool


# --- semaphore_wait(decrement=False) ----------------------------------------------------------


class NonDecrementingWait(str, enum.Enum):
    """What JAX's Pallas TPU lowering makes of `semaphore_wait(sem, v, decrement=False)`."""

    DECREMENTS = "decrements"  # an ordinary tpu.sem_wait: the wait takes v
    REJECTED = "rejected"  # the lowering raises: the kernel does not build for TPU


@record(frozen=True)
class VersionRule:
    """How JAX versions `first`..`last` (inclusive; `last` None: every later one) lower a
    non-decrementing wait for TPU, and where that is read."""

    first: tuple[int, ...]
    last: tuple[int, ...] | None
    behaviour: NonDecrementingWait
    basis: str


LOWERING_RULE = "jax/_src/pallas/mosaic/lowering.py, _semaphore_wait_lowering_rule"

# `decrement` became an operand of semaphore_wait_p in JAX 0.7.2 (commit 632a3f2a09, "Allow
# semaphore waits that don't decrement the semaphore value"), together with the guard `if not
# decrement: raise NotImplementedError("Non-decrementing wait is not supported.")` in the TPU
# lowering rule. At lowering time `decrement` is an MLIR value, which is always truthy, so the
# guard never fires and the rule emits a plain `tpu.sem_wait`, which has no non-decrementing
# form. The guard reads the same in JAX 0.10.2 and in the newest source read (0.11.1, 2026-08).
# A JAX that really rejects the wait gets a row with REJECTED.
NONDECREMENTING_WAIT_RULES: tuple[VersionRule, ...] = (
    VersionRule(
        (0, 7, 2), None, NonDecrementingWait.DECREMENTS,
        f"the guard `if not decrement` in {LOWERING_RULE} tests an MLIR value, which is always "
        "true, so it never raises and a plain decrementing tpu.sem_wait is emitted (read in JAX "
        f"0.7.2 to 0.11.1; {OBSERVED})",
    ),
)
NEWEST_SOURCE_READ = (0, 11, 1)


def parse_version(text: str) -> tuple[int, ...]:
    """(0, 10, 2) from "0.10.2" (a suffix such as ".dev20260801" or "rc1" is dropped)."""
    parts = []
    for piece in text.split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def nondecrementing_wait_rule(version: tuple[int, ...]) -> tuple[VersionRule, str | None]:
    """The rule for JAX `version`, and a caveat when that version lies beyond the source read
    (then the newest rule is assumed to hold)."""
    for rule in NONDECREMENTING_WAIT_RULES:
        if version >= rule.first and (rule.last is None or version <= rule.last):
            caveat = None
            if version > NEWEST_SOURCE_READ:
                caveat = (f"JAX {'.'.join(map(str, version))} is newer than the newest source read "
                          f"({'.'.join(map(str, NEWEST_SOURCE_READ))}): assumed to lower it the same way")
            return rule, caveat
    newest = NONDECREMENTING_WAIT_RULES[-1]
    return newest, (f"no rule was read for JAX {'.'.join(map(str, version))}: the rule of "
                    f"{'.'.join(map(str, newest.first))} and later is assumed")


# --- DMA semaphores ---------------------------------------------------------------------------

# A DMA semaphore counts 32-byte units on TPU v5e: after a local copy of 512 B, 4 KiB, 8 KiB,
# 32 KiB and 1 MiB, semaphore_read gave 16, 128, 256, 1024 and 32768; waits take the same units.
DMA_UNIT_BYTES = 32


def dma_units(nbytes: int) -> int:
    """What a copy of `nbytes`, a whole number of 32-byte units, adds to (and its wait takes
    from) a DMA semaphore (the rounding of other sizes: `dma_unit_rounding`)."""
    assert nbytes % DMA_UNIT_BYTES == 0, nbytes
    return nbytes // DMA_UNIT_BYTES


DMA_UNIT_NOTE = (
    f"DMA semaphores count {DMA_UNIT_BYTES}-byte units, as on TPU v5e ({OBSERVED}: after a local copy "
    "of 4 KiB its semaphore reads 128), so the values this kernel reads, signals or waits by hand on "
    "a DMA semaphore are in those units; a copy and its wait balance as before"
)
DMA_ROUNDING_NOTE = (
    f"this kernel copies sizes that are not a whole number of {DMA_UNIT_BYTES}-byte units (first at {{where}}), "
    "and how the chip counts those on a DMA semaphore was not observed: semcheck counts its DMA "
    "semaphores in bytes, as JAX's interpreter does, so every copy and the wait for it balance "
    "exactly however the sizes add up (a per-copy rounding would make a wait through one "
    "descriptor for several copies differ by up to a unit each)"
)
DMA_ROUNDING_BY_HAND_NOTE = (
    "the values this kernel reads, signals or waits by hand on a DMA semaphore are taken as bytes, "
    f"since it copies sizes that are not whole {DMA_UNIT_BYTES}-byte units; on the chip they are "
    f"in {DMA_UNIT_BYTES}-byte units, rounded in a way not observed: a verdict that rests on such a "
    "value is worth checking on hardware"
)


# --- leftovers at kernel exit -----------------------------------------------------------------

HALT_MESSAGE = (
    "Semaphore (scratch argument N) has a nonzero value upon exit from a Mosaic kernel"
)
LEFTOVER_HALTS = (
    f"the chip halts the core at kernel exit ('{HALT_MESSAGE}') and every later TPU computation "
    f"of the process fails ({OBSERVED})"
)
LEFTOVER_CARRIES = (
    "the kernel is compiled with disable_semaphore_checks=True, so the chip does not stop: the "
    "value carries into the next kernel that runs on this core, whose scratch semaphore in the "
    f"same place starts with it (scratch semaphores are not zeroed at entry; {OBSERVED})"
)
BARRIER_LEFTOVER_CARRIES = (
    "the chip raises no error for it (the exit check covers scratch semaphores only, with the "
    "checks on or off): the count carries into the next kernel with the same collective_id, "
    f"which reads it at entry and whose waits it can pass early ({OBSERVED})"
)


# --- copies of one core into one device ---------------------------------------------------------

# What a race between two copies of one thread into one device's memory rests on: that the
# later copy may land first. A kernel author may read the DMA engine as keeping one path's
# copies in issue order; no TPU run has shown either way (benchmarks/on_tpu.py's
# `copy_issue_order` probe asks a chip; its docstring says what to change here for each answer),
# so no switch takes that reading yet.
ISSUE_ORDER_READING = (
    "copies that one thread started to the same device may land in another order than they were "
    "started; nothing in JAX orders their completions, and JAX 0.10.2's TPU interpreter, in its "
    "default dma_execution_mode='on_wait', runs copies as late as possible and out of order "
    "(Semaphore.wait in jax/_src/pallas/mosaic/interpret/shared_memory.py)"
)


FACTS: tuple[Fact, ...] = (
    Fact("nondecrementing_wait",
         "semaphore_wait(sem, v, decrement=False) in a TPU kernel takes v, like an ordinary wait",
         NONDECREMENTING_WAIT_RULES[-1].basis, True),
    Fact("scratch_leftover_halts",
         "a scratch semaphore (REGULAR, or a DMA one with a copy not waited for) that is not 0 at "
         "kernel exit halts the core",
         OBSERVED, True),
    Fact("leftover_carries_without_checks",
         "with disable_semaphore_checks=True a leftover raises nothing and the next kernel's "
         "scratch semaphore in the same place starts with it",
         f"{OBSERVED} (the first scratch semaphore; later places are assumed to carry alike)", True),
    Fact("barrier_leftover_carries",
         "the barrier semaphore left non-zero raises nothing and the next kernel with the same "
         "collective_id starts with the count",
         OBSERVED, True),
    Fact("dma_semaphore_unit",
         f"a DMA semaphore counts {DMA_UNIT_BYTES}-byte units: a copy adds bytes / {DMA_UNIT_BYTES}, "
         "its wait takes the same",
         f"{OBSERVED} (512 B to 1 MiB)", True),
    Fact("dma_unit_rounding",
         f"a kernel with a copy of a size that is not a multiple of {DMA_UNIT_BYTES} B has its DMA "
         "semaphores counted in bytes (copies and waits balance as JAX's interpreter counts them)",
         "a guess: not observed", False),
    Fact("zero_size_dma",
         "a copy of 0 bytes completes at once and adds nothing to its semaphores",
         "a guess: not observed (semantics/rules.py, _complete_at_start)", False),
    Fact("traced_size_dma",
         "a copy whose size is known only at run time (pl.ds with a traced size) counts the "
         "units of the size it has when it runs",
         "a guess: not observed", False),
    Fact("run_scoped_semaphore",
         "a pl.run_scoped semaphore starts at 0 and must be 0 when the kernel exits, like a "
         "scratch semaphore",
         "a guess: not observed", False),
    Fact("semaphore_index_out_of_bounds",
         "a semaphore array indexed outside its bounds acts on some other semaphore, silently "
         "(semcheck reports invalid_semaphore_index)",
         f"{OBSERVED} (a static index and one from scalar prefetch)", True),
    Fact("dma_window_out_of_bounds",
         "a DMA window from run-time values that reaches outside its buffer halts the core "
         "(Mosaic's bounds check, on by default; semcheck reports invalid_region)",
         f"{OBSERVED} ('BoundsCheck ... dma.hbm_to_vmem')", True),
    Fact("remote_to_own_device",
         "a remote signal or remote copy to the issuing device's own id acts like a local one",
         f"{OBSERVED} (a mesh of one device)", True),
    Fact("copy_issue_order",
         "copies one core started to the same device may land in another order than they were "
         "started (a race between two of them is reported, resting on this reading)",
         "a guess: not observed (JAX's TPU interpreter lands copies late and out of order; "
         "ISSUE_ORDER_READING)", False),
)

FACT_KEYS = frozenset(f.key for f in FACTS)


def fact(key: str) -> Fact:
    for f in FACTS:
        if f.key == key:
            return f
    raise KeyError(key)
