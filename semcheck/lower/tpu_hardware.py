"""The TPU frontend's side of what the chip does (semcheck/tpu_facts.py): a non-decrementing
wait lowered as JAX lowers it for TPU, DMA amounts in the chip's 32-byte units, and the
notes a result that rests on them carries."""

from __future__ import annotations

import contextlib
import functools

from semcheck import ir
from semcheck.jax_compat import jax_internal
from semcheck.kinds import Kind
from semcheck.lower.context import KernelContext, ThreadLowering
from semcheck.lower.values import sym_op
from semcheck.tpu_facts import (
    DMA_ROUNDING_NOTE, DMA_UNIT_BYTES, DMA_UNIT_NOTE, LEFTOVER_CARRIES, LOWERING_RULE, NonDecrementingWait,
    dma_units, nondecrementing_wait_rule, parse_version,
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


def dma_amount(t: ThreadLowering, nbytes: ir.Operand) -> ir.Operand:
    """What a copy of `nbytes` adds to a DMA semaphore on TPU (and its wait takes): 32-byte
    units, a partial unit counted whole (`tpu_facts.dma_units`), noted where that rounding
    can matter."""
    if isinstance(nbytes, int):
        if nbytes % DMA_UNIT_BYTES:
            t.kernel.note(DMA_ROUNDING_NOTE)
        return dma_units(nbytes)
    factor, rest = _constant_factor(nbytes)
    if factor % DMA_UNIT_BYTES == 0:  # whole units for every run-time size
        return sym_op("mul", factor // DMA_UNIT_BYTES, rest)
    t.kernel.note(DMA_ROUNDING_NOTE)
    return sym_op("floordiv", sym_op("add", nbytes, DMA_UNIT_BYTES - 1), DMA_UNIT_BYTES)


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
    """A signal, wait or read by hand of a DMA semaphore sees the chip's unit: say so."""
    decl = t.kernel.semaphores.get(alloc)
    if decl is not None and decl.kind is ir.SemKind.DMA:
        t.kernel.note(DMA_UNIT_NOTE)


def hardware_notes(ctx: KernelContext) -> list[str]:
    """The hardware rules the kernel's verdict rests on, beyond those its instructions note."""
    unchecked = sorted(d.name for d in ctx.semaphores.values() if not d.checked_at_exit)
    if not unchecked:
        return []
    return [
        f"{', '.join(unchecked)}: {LEFTOVER_CARRIES}; semcheck still reports a leftover, and with "
        "--invocations K (or kernels of one program) the next kernel starts with it"
    ]


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
