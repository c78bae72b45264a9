"""Run a kernel K times back to back on every device (`--invocations K`).

Each thread's body becomes K copies of [entry, body, exit]: scratch semaphores are
allocated afresh at each entry, barrier and argument semaphores persist, so a fast device's
next-invocation signal can meet a slow device still in the current one, which is how reuse
of a collective_id goes wrong (the reason for the double barrier in JAX's distributed
tutorial). A body that already carries its own entry and exit is repeated as it is.
"""

from __future__ import annotations

import dataclasses

from semcheck import ir, tpu_facts


def shared_barrier_note(collective_ids) -> str:
    """What a check rests on where invocations share a barrier semaphore (this pass, and a
    program of kernels with one collective_id: passes/programs.py)."""
    return (
        f"the barrier semaphore of collective_id {', '.join(map(str, collective_ids))} is one semaphore for "
        "every invocation with that id (the chip keys it by collective_id alone: "
        f"{tpu_facts.fact('barrier_leftover_carries').basis}, a count left there is read by the next "
        "kernel with the same id); a wait on it that passes on units signalled from a later invocation is "
        "remote_before_entry at that wait, told apart by the invocation of whoever signalled (docs/semantics.md)"
    )


def repeat(protocol: ir.Protocol, invocations: int) -> ir.Protocol:
    if invocations < 1:
        raise ValueError("--invocations must be at least 1")
    if invocations > 1 and protocol.backend is ir.Backend.GPU:
        raise ValueError(
            "--invocations > 1 is not modelled for Mosaic GPU: GMEM semaphores are zero-filled "
            "before each launch, and no source says how that fill is ordered against a faster "
            "peer's signals for the next launch"
        )
    threads = tuple(
        dataclasses.replace(t, body=_repeat_body(t.body, invocations, protocol)) for t in protocol.threads
    )
    name = protocol.name if invocations == 1 else f"{protocol.name} x{invocations}"
    ids = sorted({d.collective_id for d in protocol.semaphores
                  if d.origin is ir.SemOrigin.BARRIER and d.collective_id is not None})
    notes = protocol.notes + ((shared_barrier_note(ids),) if invocations > 1 and ids else ())
    return dataclasses.replace(protocol, threads=threads, name=name, notes=notes)


def _repeat_body(body: tuple[ir.Instr, ...], invocations: int, protocol: ir.Protocol) -> tuple[ir.Instr, ...]:
    if not any(isinstance(i, ir.KernelEntry) for i in body):
        if invocations == 1:
            return body
        first = body[0].loc if body else protocol.loc
        last = body[-1].loc if body else protocol.loc
        body = (ir.KernelEntry(first, protocol.name),) + _shift(body, 1) + (ir.KernelExit(last, protocol.name),)
    out: list[ir.Instr] = []
    for _ in range(invocations):
        out.extend(_shift(body, len(out)))
    return tuple(out)


def _shift(body: tuple[ir.Instr, ...], offset: int) -> tuple[ir.Instr, ...]:
    """The body placed `offset` instructions later: jump targets move with it."""
    if not offset:
        return body
    return tuple(
        dataclasses.replace(i, target=i.target + offset) if isinstance(i, (ir.Branch, ir.Jump)) else i
        for i in body
    )
