"""`engines.check` called with the API's keywords (`reduce=False`, `runs=5`, ...) and the
explicit engine by default: how the engines' own tests call the driver. The keywords become
a `CheckOptions` as the API makes them (`CheckOptions.from_keywords`)."""

from __future__ import annotations

from semcheck import engines
from semcheck.engines.options import CheckOptions
from semcheck.ir import Protocol
from semcheck.result import Result


def check(protocol: Protocol, engine: str = "explicit", **options) -> Result:
    return engines.check(protocol, CheckOptions.from_keywords(engine=engine, **options))
