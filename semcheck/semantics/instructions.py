"""What an instruction names, read off the IR alone: its semaphore references, operands,
memory regions, and the registers it reads or writes."""

from __future__ import annotations

from semcheck import ir


def sem_refs(instr: ir.Instr) -> list[ir.SemRef]:
    if isinstance(instr, ir.DmaStart):
        return [instr.recv_sem] + ([instr.send_sem] if instr.send_sem else [])
    sem = getattr(instr, "sem", None)
    return [sem] if isinstance(sem, ir.SemRef) else []


def added_refs(instr: ir.Instr) -> list[ir.SemRef]:
    """The semaphores an instruction adds to: a signal's, a copy's two (through its
    completions)."""
    if isinstance(instr, ir.Signal):
        return [instr.sem]
    if isinstance(instr, ir.DmaStart):
        return sem_refs(instr)
    return []


def operands(instr: ir.Instr) -> list[ir.Operand | None]:
    ops: list[ir.Operand | None] = []
    for ref in sem_refs(instr):
        ops += [ref.index, ref.device, ref.core]
    for name in ("inc", "value", "nbytes", "cond", "device", "core", "dst_device", "src_device"):
        if hasattr(instr, name):
            ops.append(getattr(instr, name))
    for name in ("region", "src", "dst", "view"):
        region = getattr(instr, name, None)
        if isinstance(region, ir.Region):
            ops.extend(region.start + region.size)
    return ops


def both_atomic(a: ir.Instr, b: ir.Instr) -> bool:
    return isinstance(a, ir.Store) and isinstance(b, ir.Store) and a.atomic and b.atomic


def located_regions(instr: ir.Instr) -> list[tuple[ir.Region, ir.Operand | None, ir.Operand | None]]:
    """Each region an instruction touches, with the device and core it lives on (None:
    the thread's own)."""
    if isinstance(instr, ir.DmaStart):
        return [(instr.src, *instr.src_place()), (instr.dst, *instr.dst_place())]
    if isinstance(instr, (ir.Load, ir.Store)):
        return [(instr.region, instr.device, None)]
    return []


def regions(instr: ir.Instr) -> list[ir.Region]:
    return [r for r in (getattr(instr, n, None) for n in ("region", "src", "dst")) if isinstance(r, ir.Region)]


def registers_read(instr: ir.Instr) -> frozenset[str]:
    names: frozenset[str] = frozenset()
    for op in operands(instr):
        names |= ir.registers_of(op)
    return names


def registers_written(body: tuple[ir.Instr, ...]) -> dict[str, int]:
    names = sorted({i.dst for i in body if isinstance(i, (ir.Read, ir.Assign))})
    return {name: slot for slot, name in enumerate(names)}


