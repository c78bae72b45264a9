"""Bounds on protocol inputs: `semcheck.assume(name, lo, hi)` and `--assume NAME=LO..HI`.

An `ir.Input` is a value unknown at trace time (a scalar-prefetch operand, a value loaded
from SMEM, a data-dependent DMA size). Its declared range is what its producer knows, often
no more than "an int32"; the user knows better and says so, in the kernel or model file:

    import semcheck
    semcheck.assume("tokens", 0, 64)  # the router never sends more than 64 tokens

or on the command line, `semcheck verify kernel.py --assume tokens=0..64`, which overrides
the file. A name also covers a family of inputs (`covers`): a scalar-prefetch element is one
input per device (`counts_ref[0]@d3`), and `counts_ref[0]` bounds it on every device; the
element of a blocked operand is one input per device and block (`counts_ref[0]@d3 block
(1,)`), since each block is a different element of the array. Either way the range replaces
the Input's own, by name, in every protocol the file produces, and every value in it is
checked. A name that matches no input is an error.

How frontends consume it: `frontends.load` runs each frontend inside `collecting()`, which
gathers the `assume` calls the file makes while it is loaded, then `apply_all` applies them
to the protocols it returns. A frontend needs nothing else. Outside a load (a kernel script
run with plain `python`), `assume` records the call and changes nothing, so the same file
still runs on its own. From Python, pass `assume=[Assumption(...)]` to `check_protocol`.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from dataclasses import replace
from typing import Iterable, Iterator

from semcheck import ir, records


class AssumptionError(ValueError):
    """An assumption that is malformed, empty, or names no input."""


@records.record(frozen=True)
class Assumption:
    name: str
    lo: int
    hi: int
    loc: ir.Loc | None = None  # where the file assumed it; None on the command line

    def __post_init__(self):
        if self.lo > self.hi:
            where = f"{self.loc}: " if self.loc else ""
            raise AssumptionError(f"{where}assume {self}: the range is empty ({self.lo} > {self.hi})")

    def __str__(self) -> str:
        return f"{self.name}={self.lo}..{self.hi}"


class _Scopes(threading.local):
    """Per thread (files may be loaded from several threads at once, as a test suite's
    thread pool does), a stack of lists: the innermost collects; the bottom one catches
    calls made outside any load."""

    def __init__(self):
        self.stack: list[list[Assumption]] = [[]]


_scopes = _Scopes()


def assume(name: str, lo: int, hi: int) -> Assumption:
    """Check input `name` for every value in `lo..hi` (inclusive) only."""
    frame = sys._getframe(1)
    assumption = Assumption(str(name), int(lo), int(hi), ir.Loc(frame.f_code.co_filename, frame.f_lineno))
    return record(assumption)


def record(assumption: Assumption) -> Assumption:
    """Count an assumption made elsewhere (a kernel script's, made in its capture process)."""
    _scopes.stack[-1].append(assumption)
    return assumption


def covers(assumption_name: str, input_name: str) -> bool:
    """An assumption names an input exactly, or a family of them: `counts_ref[0]` covers
    the per-device inputs `counts_ref[0]@d0`, `counts_ref[0]@d1`, ...; `counts_ref` covers
    every element of that operand on every device; `counts_ref[0]@d1` covers the per-block
    inputs of a blocked operand's element on device 1 (`counts_ref[0]@d1 block (0,)`, ...)."""
    return (
        input_name == assumption_name
        or input_name.startswith(assumption_name + "@")
        or input_name.startswith(assumption_name + "[")
        or input_name.startswith(assumption_name + " ")
    )


@contextlib.contextmanager
def collecting() -> Iterator[list[Assumption]]:
    """Gather the `assume` calls made inside the block (one file's load)."""
    scope: list[Assumption] = []
    stack = _scopes.stack
    stack.append(scope)
    try:
        yield scope
    finally:  # by identity: two empty scopes are equal lists
        del stack[next(i for i in range(len(stack) - 1, 0, -1) if stack[i] is scope)]


_SPEC = re.compile(r"^(?P<name>.+)=(?P<lo>-?\d+)(?:\.\.(?P<hi>-?\d+))?$")


def parse(spec: str) -> Assumption:
    """`NAME=LO..HI` (or `NAME=V` for one value), as `--assume` takes it."""
    match = _SPEC.match(spec.strip())
    if not match:
        raise AssumptionError(f"--assume {spec!r}: expected NAME=LO..HI, e.g. tokens=0..64")
    lo = int(match["lo"])
    hi = int(match["hi"]) if match["hi"] is not None else lo
    return Assumption(match["name"].strip(), lo, hi)


def apply(protocol: ir.Protocol, assumptions: Iterable[Assumption]) -> ir.Protocol:
    """`protocol` with the range of every input that an assumption names replaced by the
    assumption's (later assumptions win); names that match nothing are ignored here."""
    assumptions = list(assumptions)
    assumed = []
    for inp in protocol.inputs:
        for a in assumptions:  # later assumptions win
            if covers(a.name, inp.name):
                inp = replace(inp, lo=a.lo, hi=a.hi, assumed=True)
        assumed.append(inp)
    inputs = tuple(assumed)
    return protocol if inputs == protocol.inputs else replace(protocol, inputs=inputs)


def apply_all(
    protocols: list[ir.Protocol], assumptions: Iterable[Assumption], *, source: str
) -> list[ir.Protocol]:
    """`apply` to each protocol; an assumption that names an input of none of them is an
    error (a typo must not leave the full range in place, or a range silently unchecked)."""
    assumptions = list(assumptions)
    check_names(protocols, assumptions, source=source)
    return [apply(p, assumptions) for p in protocols]


def check_names(protocols: list[ir.Protocol], assumptions: list[Assumption], *, source: str) -> None:
    known = {inp.name for p in protocols for inp in p.inputs}
    for a in assumptions:
        if not any(covers(a.name, name) for name in known):
            where = f"{a.loc}: " if a.loc else ""
            inputs = ", ".join(sorted(known)) or "none"
            raise AssumptionError(
                f"{where}assume {a}: there is no input named {a.name!r} in {source} "
                f"(inputs: {inputs})"
            )
