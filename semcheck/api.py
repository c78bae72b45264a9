"""The Python API, for scripts and pytest:

    from semcheck import verify_model
    result = verify_model(my_model, devices=4)
    assert result.verdict.value == "safe", result

`verify_path` runs what `semcheck verify PATH` runs and returns every Result. `assume=`
bounds protocol inputs by name (see `semcheck.assumptions`), as `--assume` does.
"""

from __future__ import annotations

from typing import Callable, Iterable

from semcheck import assumptions, engines
from semcheck.assumptions import Assumption
from semcheck.engines.budget import Budget, ProgressFn
from semcheck.frontends import LoadError, discover, load
from semcheck.ir import Protocol
from semcheck.result import Result, Verdict
from semcheck.semantics import ProtocolError


def check_protocol(
    protocol: Protocol,
    *,
    engine: str = "explicit",
    budget: Budget | None = None,
    progress: ProgressFn | None = None,
    assume: Iterable[Assumption] = (),
    **options,
) -> Result:
    assume = list(assume)
    if assume:
        assumptions.check_names([protocol], assume, source=f"protocol {protocol.name}")
        protocol = assumptions.apply(protocol, assume)
    try:
        return engines.check(protocol, engine, budget=budget, progress=progress, **options)
    except ProtocolError as e:
        return error_result(protocol.name, protocol.loc.file, protocol.loc.line, protocol.devices, str(e), engine)


def verify_model(
    model: Callable[[int], Protocol] | Protocol, devices: int = 4, **options
) -> Result:
    protocol = model if isinstance(model, Protocol) else model(devices)
    return check_protocol(protocol, **options)


def verify_path(
    paths: str | Iterable[str],
    devices: Iterable[int] = (2, 4, 8),
    *,
    engine: str = "explicit",
    budget: Budget | None = None,
    progress_for: Callable[[str, int], ProgressFn | None] | None = None,
    assume: Iterable[Assumption] = (),
    **options,
) -> list[Result]:
    # Load everything first, so an --assume that names no input fails before any checking.
    loaded: list[Result | tuple[int, list[Protocol]]] = []
    for path in discover([paths] if isinstance(paths, str) else list(paths)):
        for n in devices:
            try:
                loaded.append((n, load(path, n)))
            except LoadError as e:
                loaded.append(error_result(_stem(path), path, e.loc.line if e.loc else 0, n, str(e), engine))
    assume = list(assume)
    protocols = [p for item in loaded if not isinstance(item, Result) for p in item[1]]
    if assume and protocols:
        assumptions.check_names(protocols, assume, source="the checked kernels and models")
    results = []
    for item in loaded:
        if isinstance(item, Result):
            results.append(item)
            continue
        n, protocols = item
        for protocol in protocols:
            protocol = assumptions.apply(protocol, assume)
            progress = progress_for(protocol.name, n) if progress_for else None
            results.append(
                check_protocol(protocol, engine=engine, budget=budget, progress=progress, **options)
            )
    return results


def error_result(kernel: str, file: str, line: int, devices: int, message: str, engine: str) -> Result:
    return Result(
        kernel=kernel, file=file, line=line, backend="unknown", semantics="unknown",
        devices=devices, cores=0, engine=engine, verdict=Verdict.ERROR, error=message,
    )


def _stem(path: str) -> str:
    import os

    return os.path.splitext(os.path.basename(path))[0]
