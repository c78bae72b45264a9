"""The TPU frontend's side of what the chip does (semcheck/tpu_facts.py): a non-decrementing
wait lowered as JAX lowers it for TPU, DMA amounts in the chip's 32-byte units, and the
notes a result that rests on them carries."""

from __future__ import annotations

import contextlib
import functools
from dataclasses import replace

from semcheck import ir
from semcheck.jax_compat import jax_internal
from semcheck.kinds import Kind
from semcheck.lower.context import KernelContext, ThreadLowering
from semcheck.lower.values import sym_op
from semcheck.tpu_facts import (
    DMA_ROUNDING_BY_HAND_NOTE, DMA_ROUNDING_NOTE, DMA_UNIT_BYTES, DMA_UNIT_NOTE, LEFTOVER_CARRIES, LOWERING_RULE,
    NonDecrementingWait, dma_units, nondecrementing_wait_rule, parse_version,
)


@functools.cache
def jax_version() -> tuple[int, ...]:
    import jax

    return parse_version(jax.__version__)


def nondecrementing_wait(t: ThreadLowering, eqn) -> bool:
    """Whether `semaphore_wait(..., decrement=False)` at `eqn` decrements on TPU with the
    JAX semcheck runs with, and the finding that says so at its line. A JAX whose lowering
    really rejects it gets `not_lowerable`; the wait is then checked as written
    (non-decrementing), so the rest of the protocol is still checked."""
    rule, caveat = nondecrementing_wait_rule(jax_version())
    version = ".".join(map(str, jax_version()))
    loc = t.loc(eqn)
    why = f" ({caveat})" if caveat else ""
    if rule.behaviour is NonDecrementingWait.DECREMENTS:
        t.kernel.finding(
            Kind.LOWERED_AS_DECREMENTING, loc,
            f"semaphore_wait(decrement=False) at {loc} decrements on a TPU: JAX {version}'s Pallas "
            f"TPU lowering makes it an ordinary wait ({rule.basis}){why}, so it takes its value "
            "from the semaphore, and semcheck checks it that way",
        )
        return True
    t.kernel.finding(
        Kind.NOT_LOWERABLE, loc,
        f"semaphore_wait(decrement=False) at {loc}: JAX {version}'s Pallas TPU lowering rejects it "
        f"('Non-decrementing wait is not supported.', {LOWERING_RULE}; {rule.basis}){why}; "
        "semcheck checks the rest of the protocol with the wait as written",
    )
    return False


def dma_amount(t: ThreadLowering, eqn, nbytes: ir.Operand) -> ir.Operand:
    """What a copy of `nbytes` adds to a DMA semaphore (and its wait takes), in bytes for now:
    `in_dma_units` turns the kernel's amounts into the chip's 32-byte units once every size
    is known to be whole units. A size that is not is remembered here."""
    whole = (nbytes % DMA_UNIT_BYTES == 0 if isinstance(nbytes, int)
             else _constant_factor(nbytes)[0] % DMA_UNIT_BYTES == 0)
    if not whole and t.kernel.partial_unit_copy is None:
        t.kernel.partial_unit_copy = t.loc(eqn)
    return nbytes


def in_dma_units(ctx: KernelContext, threads: list[ir.Thread]) -> tuple[list[ir.Thread], int]:
    """The threads with every copy's and wait's amount in the unit the kernel's DMA
    semaphores count, and that unit: the chip's 32 bytes (observed on TPU v5e) when every
    size is whole units, else bytes (how the chip rounds other sizes was not observed, and
    counting bytes keeps each copy and its waits balanced as written)."""
    if ctx.partial_unit_copy is not None:
        ctx.note(DMA_ROUNDING_NOTE.format(where=ctx.partial_unit_copy))
        if ctx.dma_by_hand:
            ctx.note(DMA_ROUNDING_BY_HAND_NOTE)
        return threads, 1
    if ctx.dma_by_hand:
        ctx.note(DMA_UNIT_NOTE)
    return [replace(th, body=tuple(_in_units(i) for i in th.body)) for th in threads], DMA_UNIT_BYTES


def _in_units(instr: ir.Instr) -> ir.Instr:
    if isinstance(instr, (ir.DmaStart, ir.DmaWait)):
        return replace(instr, nbytes=_units(instr.nbytes))
    return instr


def _units(nbytes: ir.Operand) -> ir.Operand:
    if isinstance(nbytes, int):
        return dma_units(nbytes)
    factor, rest = _constant_factor(nbytes)
    return sym_op("mul", factor // DMA_UNIT_BYTES, rest)


def _constant_factor(op: ir.Operand) -> tuple[int, ir.Operand]:
    """`op` as (constant, rest) with op == constant * rest, pulling the constants out of a
    product (a window's bytes: the itemsize times each of its sizes)."""
    if isinstance(op, int):
        return op, 1
    if isinstance(op, ir.BinOp) and op.op == "mul":
        fa, ra = _constant_factor(op.a)
        fb, rb = _constant_factor(op.b)
        return fa * fb, sym_op("mul", ra, rb)
    return 1, op


def note_by_hand(t: ThreadLowering, alloc: str) -> None:
    """A signal, wait or read by hand of a DMA semaphore sees the unit it counts: remember it
    for `in_dma_units`'s note."""
    decl = t.kernel.semaphores.get(alloc)
    if decl is not None and decl.kind is ir.SemKind.DMA:
        t.kernel.dma_by_hand = True


REGULAR_DMA_BASIS = (
    "TPU v6 and later: JAX's test_remote_dma_regular_semaphore (jax-ml/jax cec06d11, "
    "tests/pallas/tpu_pallas_distributed_test.py) waits 1 on each such semaphore after one "
    "copy and is skipped before v6, 'Regular semaphore DMA requires TPU v6+'; JAX 0.10.2's TPU "
    "interpreter adds the copy's bytes instead and reports the rest left at exit"
)

REGULAR_DMA_COUNT = (
    "a copy that counts on a REGULAR semaphore (not SemaphoreType.DMA) adds 1 to it when it "
    f"completes, not the bytes it moved ({REGULAR_DMA_BASIS})"
)


def note_regular_dma(t: ThreadLowering, alloc: str) -> None:
    """A copy that counts on a REGULAR semaphore adds 1 per completion, not its bytes
    (semantics/state.py, `dma_increment`): a verdict can rest on that, so the result says so."""
    decl = t.kernel.semaphores.get(alloc)
    if decl is not None and decl.kind is ir.SemKind.REGULAR:
        t.kernel.note(REGULAR_DMA_COUNT)


BOUNDS_UNCHECKED = (
    "the kernel is compiled with disable_bounds_checks=True, so nothing checks its copy windows: "
    "a copy with a 0 in its sizes moves nothing and is no fault wherever its window starts "
    "(JAX 0.10.2's TPU interpreter ignores the flag and fails an empty window that starts past "
    "its buffer's end: jax/_src/pallas/mosaic/interpret/utils.py, "
    "is_range_out_of_bounds_for_shape; a zero-size copy is not observed on a chip); a non-empty "
    "window outside its buffer is still invalid_region, as it touches memory that is not the buffer"
)


def hardware_notes(ctx: KernelContext) -> list[str]:
    """The hardware rules the kernel's verdict rests on, beyond those its instructions note."""
    notes = [] if ctx.bounds_checks else [BOUNDS_UNCHECKED]
    unchecked = sorted(d.name for d in ctx.semaphores.values() if not d.checked_at_exit)
    if unchecked:
        notes.append(
            f"{', '.join(unchecked)}: {LEFTOVER_CARRIES}; semcheck still reports a leftover, and with "
            "--invocations K (or kernels of one program) the next kernel starts with it"
        )
    return notes


@contextlib.contextmanager
def tpu_generation_for_cpu():
    """Let emit_pipeline ask for the TPU generation on CPU devices (pltpu's registry of
    device kinds is JAX's own extension point for this)."""
    tpu_info = jax_internal("tpu_info")

    if "cpu" in tpu_info.registry:
        yield
        return
    tpu_info.registry["cpu"] = lambda: tpu_info.get_tpu_info_for_chip(tpu_info.ChipVersion.TPU_V6E, 1)
    try:
        yield
    finally:
        tpu_info.registry.pop("cpu", None)
        if hasattr(tpu_info.get_tpu_info, "cache_clear"):  # forget the answer given while capturing
            tpu_info.get_tpu_info.cache_clear()
