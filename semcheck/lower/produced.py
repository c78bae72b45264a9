"""A kernel's outputs as semcheck's own lowering of it computed them, handed to the kernel
that takes them next.

The capture cannot run a TPU kernel, so it replaces its outputs with zeros, and a later
kernel's operand computed from them is withheld (frontends/provenance.py): a loop bound or
a copy offset read from it is then unknown. But lowering a kernel evaluates its data path
with the script's values (lower/data.py): every thread's memory at its end holds, per
buffer, the values it knows and a mask of which elements those are. For a kernel whose
writes are the same in every schedule (one free of data races: its own check decides),
those contents are what its outputs hold on a chip wherever the mask says known; an element
it never wrote, or wrote with a value the lowering does not know, stays unknown.

`produced_outputs` reads them off a kernel's lowering (`ProducedOutputs`, per device and
output: `KnownElements`); frontends/capture.py hands them to a later kernel whose operand
is exactly that output (`Feed`), and the later kernel's threads start with those elements
known (lower/data.py, `_initial`), the rest unknown as before.
"""

from __future__ import annotations

from dataclasses import field

import numpy as np

from semcheck import ir
from semcheck.records import record


@record(frozen=True, eq=False)
class KnownElements:
    """Starting contents of which only some elements are known: `value` where `known`."""

    value: np.ndarray
    known: np.ndarray  # bool, the shape of `value`

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    def count(self) -> int:
        return int(np.count_nonzero(self.known))


@record(frozen=True, eq=False)
class ProducedOutputs:
    """What one kernel's lowering computed of its outputs: device -> output index -> the
    elements it knows (an output missing on a device: nothing of it is known there), or
    `refused`, why none of them is handed on."""

    kernel: str
    per_device: dict  # int -> dict[int, KnownElements]
    refused: str | None = None
    left_out: dict = field(default_factory=dict)  # output index -> why nothing of it is handed on

    def output(self, device: int, index: int) -> KnownElements | None:
        return self.per_device.get(device, {}).get(index)

    def why_not(self, index: int) -> str:
        """Why output `index` is handed on nowhere."""
        return self.refused or self.left_out.get(index) or "its lowering knows none of that output's elements"


@record(frozen=True, eq=False)
class Feed:
    """Operand `operand` (the call's operand index) of a kernel is output `output` of the
    earlier kernel `producer`, which runs once before it, or that output's elements placed
    by `placed_by`: it starts as `elements` per device."""

    operand: int
    producer: str
    output: int
    elements: dict  # device -> KnownElements
    producer_call: int | None = None  # the producer's place in the capture order (Protocol.calls)
    # The ops (placing elements, integer arithmetic, reductions) between that output and this operand, each with its line
    # (frontends/placing.py); none: the operand is the output itself.
    placed_by: tuple[ir.ComputedBy, ...] = ()


def known_written(value: np.ndarray, known: np.ndarray, written: np.ndarray, run_time: list) -> KnownElements:
    """The elements a thread stored with a value it knows: written, known, and holding no
    run-time value (`run_time`: their indices)."""
    mask = np.asarray(known, bool) & np.asarray(written, bool)
    for index in run_time:
        mask[index] = False
    return KnownElements(np.array(value, copy=True), mask)


def produced_outputs(ctx, refs: list, n_inputs: int, n_results: int, memories: dict,
                     aliases: dict[int, int] | None = None) -> ProducedOutputs:
    """The outputs of the kernel `ctx` lowered, from each thread's memory at its end
    (`memories`: (device, core) -> data.ThreadMemory). Refused for a kernel checked over
    protocol inputs (its values are then not the script's alone) or with several cores per
    device (each core's lowering follows only its own writes). An output is left out where
    its contents are not followed: a pipelined block (the HBM array is written back by the
    pipeline), a buffer a copy to a run-time device or another core may write, or one a
    remote copy writes (its payload lands where the canonical run says, which may be after
    the receiving thread's last read: the thread's memory need not hold it). `aliases`:
    output index -> the ref index of the input it aliases (`input_output_aliases`): on a chip
    they are one buffer, so an element the kernel did not write through the output holds
    what the input ref holds at the end (the script's value or the kernel's own store to it),
    and one written through both refs is unknown (their order is not followed)."""
    if len(memories) != ctx.mesh.size * ctx.cores:
        return ProducedOutputs(ctx.name, {}, "its lowering stopped part-way on some thread")
    if ctx.inputs:
        return ProducedOutputs(ctx.name, {}, f"its lowering has protocol inputs ({ctx.inputs[0].name}), so its "
                                             "outputs are not the script's values alone")
    if ctx.cores != 1:
        return ProducedOutputs(ctx.name, {}, "it runs on several TensorCores per device, and each core's "
                                             "lowering follows only its own writes")
    remote = {p.ref.alloc for p in ctx.payloads.values()}
    # An output block smaller than its array holds different parts of it at different grid
    # steps; one as large as the array is the whole output, which the pipeline writes back.
    pipelined = set()
    if ctx.pipeline is not None:
        for blocks in ctx.pipeline.blocks.values():
            pipelined |= {b.buffer for b in blocks if tuple(b.array_shape) != tuple(ctx.buffers[b.buffer].shape)}
    per_device: dict[int, dict[int, KnownElements]] = {}
    left_out: dict[int, str] = {}
    for m, ref in enumerate(refs[n_inputs:n_inputs + n_results]):
        buffer = ref.alloc
        why = ("it is a semaphore" if ref.is_semaphore
               else "a remote copy writes it" if buffer in remote
               else "it is a block smaller than its array, moved by the Pallas pipeline" if buffer in pipelined
               else "a copy to a device known only at run time, or another core, may write it" if buffer in ctx.volatile
               else None)
        if why is not None:
            left_out[m] = f"its output {m} is not followed: {why}"
            continue
        for (device, _core), memory in memories.items():
            c = memory.of(ref)
            if c is None:
                continue
            elements = known_written(c.value, c.known, c.written, list(c.symbolic))
            if aliases and m in aliases:
                elements = _through_alias(elements, c.written, memory.of(refs[aliases[m]]))
            if elements.count():
                per_device.setdefault(device, {})[m] = elements
    return ProducedOutputs(ctx.name, per_device, None, left_out)


def _through_alias(elements: KnownElements, written, aliased) -> KnownElements:
    """`elements` of an output whose buffer is also an input ref (`aliased`, its contents at
    the thread's end): where the output was not written, what the input ref holds."""
    if aliased is None or aliased.value.shape != elements.value.shape or aliased.value.dtype != elements.value.dtype:
        return elements
    stored_there = np.asarray(aliased.written, bool)
    through = known_written(aliased.value, aliased.known, np.ones_like(stored_there), list(aliased.symbolic))
    from_input = ~np.asarray(written, bool) & through.known
    # An element stored through both refs is neither: which store the chip did last is not followed.
    known = (elements.known & ~stored_there) | from_input
    value = np.where(from_input, aliased.value, elements.value)
    return KnownElements(value, known)


def fed_note(fed: dict[str, tuple[str, int, int, tuple[ir.ComputedBy, ...]]]) -> str:
    """The operands that start with an earlier kernel's outputs as semcheck's lowering of it
    computed them (`fed`: buffer -> (producer, known elements, elements, the ops placing
    them) on the first device that has them)."""
    parts = [f"{buffer} ({known} of {total} elements known) from the outputs of {producer}"
             + (f", through {', '.join(map(str, ops))}" if ops else "")
             for buffer, (producer, known, total, ops) in sorted(fed.items())]
    placed = any(ops for *_, ops in fed.values())
    how = ("its output is this operand, unchanged" if not placed else
           "each operand is its output, unchanged, or computed from that output's elements by the ops named, "
           "which semcheck applies with JAX to the elements it knows (an element placed from the output or a "
           "constant is known where that element is; one that integer arithmetic, a sum or a maximum computes is "
           "known where every element it is computed from is; a conversion keeps an element known only where it "
           "keeps its value: frontends/placing.py)")
    return ("the values of " + "; ".join(parts) + " are those outputs as semcheck's lowering of that kernel computed "
            f"them from the script's values (lower/produced.py): the kernel runs once before this one and {how}; "
            "each element it stored with a value the lowering knows is known, and every other "
            "element (never written, or written with a value known only at run time) is unknown, as an earlier "
            "kernel's output is otherwise. Basis: a kernel free of data races writes the same values in every "
            "schedule, so these are its outputs on a chip if its own check finds no data race (docs/data-evaluation.md)")


def unwritten_reason(producer: str) -> str:
    """Why an element of an operand fed by `producer` that it did not write is unknown."""
    return (f"it is an output of {producer} that semcheck's lowering of {producer} does not know (never written, "
            "or written with a value known only at run time)")
