"""A protocol as readable text, for the message of a failing test."""

from __future__ import annotations

from semcheck import ir


def protocol_listing(protocol: ir.Protocol) -> str:
    lines = [
        f"protocol {protocol.name}: backend {protocol.backend.value}, "
        f"{protocol.devices} device(s) x {protocol.cores} core(s)"
    ]
    for decl in protocol.semaphores:
        lines.append(
            f"  semaphore {decl.name}: {decl.kind.value}[{decl.size}], {decl.origin.value}, per {decl.scope.value}"
        )
    for inp in protocol.inputs:
        lines.append(f"  input {inp.name} in {inp.lo}..{inp.hi}")
    for thread in protocol.threads:
        lines.append(f"  thread device {thread.device} core {thread.core}" + (f" sub {thread.sub}" if thread.sub else ""))
        for pc, instr in enumerate(thread.body):
            lines.append(f"    {pc:>3}: {_instr(instr)}")
    return "\n".join(lines)


def _ref(ref: ir.SemRef | None) -> str:
    if ref is None:
        return "-"
    where = []
    if ref.device is not None:
        where.append(f"device={ref.device}")
    if ref.core is not None:
        where.append(f"core={ref.core}")
    return f"{ref.alloc}[{ref.index}]" + (f"@({', '.join(where)})" if where else "")


def _instr(instr: ir.Instr) -> str:
    if isinstance(instr, ir.Signal):
        return f"signal {_ref(instr.sem)} += {instr.inc}"
    if isinstance(instr, ir.Wait):
        return f"wait {_ref(instr.sem)} >= {instr.value}" + ("" if instr.decrement else " (no decrement)")
    if isinstance(instr, ir.DmaWait):
        return f"dma_wait {_ref(instr.sem)} {instr.nbytes} bytes ({instr.side})"
    if isinstance(instr, ir.Read):
        return f"{instr.dst} := read {_ref(instr.sem)}"
    if isinstance(instr, ir.Assign):
        return f"{instr.dst} := {instr.value}"
    if isinstance(instr, ir.DmaStart):
        target = "" if instr.device is None and instr.core is None else f" to ({instr.device}, {instr.core})"
        return f"dma_start{target} {instr.nbytes} bytes, recv {_ref(instr.recv_sem)}, send {_ref(instr.send_sem)}"
    if isinstance(instr, ir.Branch):
        return f"if {instr.cond}: goto {instr.target}"
    if isinstance(instr, ir.Jump):
        return f"goto {instr.target}"
    return type(instr).__name__.lower()
