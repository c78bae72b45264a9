"""What the z3 engine does not decide yet, asked without importing z3 (`--engine auto`
asks it of every protocol before it picks an engine)."""

from __future__ import annotations

from semcheck import ir
from semcheck.semantics import System


def unmodelled(system: System) -> str | None:
    """What this protocol needs that the encoding does not decide yet, if anything. The
    engine then answers inconclusive instead of a verdict that ignored it.

    The encoding counts a thread's executed kernel entries to know which invocation it is
    in; that is `System.invocation_at` only when no jump skips an entry or runs one again."""
    for t, body in enumerate(system.bodies):
        if not system.has_lifecycle[t]:
            continue
        invocation = system.invocation_at[t]
        for pc, instr in enumerate(body):
            if isinstance(instr, (ir.Branch, ir.Jump)) and invocation[instr.target] != invocation[pc]:
                return "a jump that skips or repeats a kernel entry"
    return None
