"""Where the values behind a finding came from, when they came from outside the kernel.

A copy window, a device id or a semaphore index that the kernel read from an operand is
data (`ir.DataUse`). When a finding's line takes such a value from what the script passed,
or from an earlier kernel's output as semcheck's lowering computed it and the script's ops
between the kernels (`ir.FedOperand.through`), the bug may well lie there rather than at
the line: an inclusive sum where an exclusive one was meant, a table sliced one element
early. One line under the finding names the operand, the values the line took from it on
the finding's device, and the producer and ops that made it.
"""

from __future__ import annotations

from semcheck.ir import ComputedBy, FedOperand, Loc
from semcheck.result import Result, Violation

VALUES_SHOWN = 4  # values of one use listed before "..."


def data_lines(v: Violation, r: Result) -> list[str]:
    """The `from data:` line of `v` in check `r` (none: the finding's line takes no value
    from the script or from an earlier kernel)."""
    if v.location is None or v.device is None:
        return []
    uses = [u for u in r.data_uses if u.loc == v.location and u.device == v.device and u.script_inputs]
    if not uses:
        return []
    fed = {f.buffer: f for f in r.values.fed}
    whats = list(dict.fromkeys(u.what for u in uses))
    operands = list(dict.fromkeys(b for u in uses for b in u.script_inputs))
    values = list(dict.fromkeys(u.value for u in uses))
    shown = ", ".join(map(str, values[:VALUES_SHOWN])) + (", ..." if len(values) > VALUES_SHOWN else "")
    said = [f"{_and(whats)} at this line {'is' if len(whats) == 1 else 'are'} read from {_and(operands)} "
            f"({shown} on device {v.device})"]
    passed = [name for name in operands if name not in fed]
    if passed:
        said.append(f"{_and(passed)} {'holds' if len(passed) == 1 else 'hold'} what the script passed")
    said.extend(_origin(name, fed[name], r.file) for name in operands if name in fed)
    return ["    from data: " + "; ".join(said)]


def _origin(operand: str, fed: FedOperand, kernel_file: str) -> str:
    if not fed.through:
        return f"{operand} is the output of {fed.producer}, unchanged"
    return f"{operand} is computed from the output of {fed.producer} by {_steps(fed.through, kernel_file)}"


def _steps(through: tuple[ComputedBy, ...], kernel_file: str) -> str:
    """The ops, output's side first, the ops of one line said once with it."""
    by_line: dict[Loc | None, list[str]] = {}
    for step in through:
        by_line.setdefault(step.loc, []).append(step.op.removeprefix("stablehlo."))
    return ", ".join(f"{' and '.join(ops)}{_at(loc, kernel_file)}" for loc, ops in by_line.items())


def _at(loc: Loc | None, kernel_file: str) -> str:
    return f" ({loc.said_in(kernel_file)})" if loc is not None else ""


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"

