"""Builds one thread's instruction list, with forward labels and late-filled slots.

Lowering sometimes learns what to emit at an earlier point only later: a `cond` whose
outputs are registers must assign them at the end of every branch, but whether an output
can be a register is known only once every branch has been evaluated. A `Slot` reserves
such a place; labels are markers resolved when the thread is built, so filling a slot never
shifts a jump target.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field

from semcheck import ir
from semcheck.errors import LoadError
from semcheck.records import record

# A thread longer than this is almost certainly a huge grid or loop unrolled by mistake.
MAX_INSTRUCTIONS = 200_000

SYNC_TYPES = (ir.Signal, ir.Wait, ir.Read, ir.DmaStart, ir.DmaWait)


class Label:
    """A jump target; placed once with `Emitter.place`."""


@record
class _Mark:
    label: Label


@record
class _PendingJump:
    loc: ir.Loc
    label: Label
    cond: ir.Operand | None  # None for an unconditional jump


@record
class Slot:
    """A place whose instructions are decided after later code was emitted."""

    instrs: list = field(default_factory=list)


class Emitter:
    def __init__(self) -> None:
        self.items: list = []
        self._count = 0

    def emit(self, instr: ir.Instr) -> None:
        self.items.append(instr)
        self._count += 1
        if self._count > MAX_INSTRUCTIONS:
            raise LoadError(
                f"the kernel unrolls to more than {MAX_INSTRUCTIONS:,} instructions on one "
                "thread (a large grid or a long loop)",
                instr.loc,
                hint="check a smaller problem size: semcheck checks the synchronization "
                "protocol, which rarely depends on the data size",
            )

    def label(self) -> Label:
        return Label()

    def place(self, label: Label) -> None:
        self.items.append(_Mark(label))

    def branch(self, cond: ir.Operand, label: Label, loc: ir.Loc) -> None:
        """Jump to `label` when `cond` is non-zero."""
        self.items.append(_PendingJump(loc, label, cond))

    def jump(self, label: Label, loc: ir.Loc) -> None:
        self.items.append(_PendingJump(loc, label, None))

    def slot(self) -> Slot:
        slot = Slot()
        self.items.append(slot)
        return slot

    def mark(self) -> int:
        return len(self.items)

    def rollback(self, mark: int) -> None:
        del self.items[mark:]

    def has_control_flow(self) -> bool:
        """Whether a branch or a label was emitted: code emitted from here on may be reached
        along several paths, or run several times."""
        return any(isinstance(item, (_Mark, _PendingJump)) for item in self._flat(self.items))

    def widen_accesses_since(self, mark: int, why: str) -> bool:
        """Mark the plain accesses emitted since `mark` as possibly not touched by a run
        (`ir.Region.widened`): they are kept from every branch of a branch semcheck cannot
        decide, so each may be one the run never makes. Whether one of them had its window
        checked (`ir.Load.checked`), which it no longer is (`ir.window_checked`)."""
        unchecked = False

        def widened(item):
            nonlocal unchecked
            if isinstance(item, (ir.Load, ir.Store)) and item.region.widened is None:
                unchecked = unchecked or item.checked
                return dataclasses.replace(item, region=dataclasses.replace(item.region, widened=why))
            return item

        for position in range(mark, len(self.items)):
            item = self.items[position]
            if isinstance(item, Slot):
                item.instrs[:] = [widened(i) for i in item.instrs]
            else:
                self.items[position] = widened(item)
        return unchecked

    def has_sync_since(self, mark: int) -> bool:
        return any(isinstance(i, SYNC_TYPES) for i in self._flat(self.items[mark:]))

    @staticmethod
    def _flat(items):
        for item in items:
            if isinstance(item, Slot):
                yield from item.instrs
            else:
                yield item

    def stop(self, cut: ir.Cut) -> None:
        """End the thread at `cut` (lowering could not go on): every jump to code that was
        never emitted (a label not placed yet) lands on the cut."""
        placed = {id(item.label) for item in self._flat(self.items) if isinstance(item, _Mark)}
        for item in list(self._flat(self.items)):
            if isinstance(item, _PendingJump) and id(item.label) not in placed:
                self.place(item.label)
                placed.add(id(item.label))
        self.items.append(cut)

    def build(self) -> tuple[ir.Instr, ...]:
        flat = list(self._flat(self.items))
        positions: dict[int, int] = {}
        pc = 0
        for item in flat:
            if isinstance(item, _Mark):
                positions[id(item.label)] = pc
            else:
                pc += 1
        body: list[ir.Instr] = []
        for item in flat:
            if isinstance(item, _Mark):
                continue
            if isinstance(item, _PendingJump):
                target = positions[id(item.label)]
                if item.cond is None:
                    body.append(ir.Jump(loc=item.loc, target=target))
                else:
                    body.append(ir.Branch(loc=item.loc, cond=item.cond, target=target))
            else:
                body.append(item)
        return tuple(body)
