"""Run a kernel K times back to back on every device (`--invocations K`).

Each thread's body becomes K copies of [entry, body, exit]: scratch semaphores are
allocated afresh at each entry, barrier and argument semaphores persist, so a fast device's
next-invocation signal can meet a slow device still in the current one, which is how reuse
of a collective_id goes wrong (the reason for the double barrier in JAX's distributed
tutorial). A body that already carries its own entry and exit is repeated as it is.
"""

from __future__ import annotations

import dataclasses

from semcheck import ir


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
    return dataclasses.replace(protocol, threads=threads, name=name)


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
