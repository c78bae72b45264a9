"""`[tool.semcheck]` in pyproject.toml: a project's defaults for `semcheck verify`.

    [tool.semcheck]
    paths = ["kernels/", "models/"]   # what `semcheck verify` with no PATH checks
    devices = [2, 4, 8]               # or "2,4,8"
    engine = "auto"
    timeout = 600                     # seconds per check
    invocations = 1
    exhaustive = false                # true: every finding, not only the first counterexample

    [tool.semcheck.expect]            # expected verdicts (semcheck/run/expectations.py)
    "kernels/ring_bug.py" = "deadlock"

The nearest pyproject.toml with a `[tool.semcheck]` table at or above the working
directory applies; `paths` are relative to it. A command-line flag always wins, and the
SEMCHECK_TIMEOUT variable wins over `timeout`. An unknown key is a warning (a typo must not
pass unnoticed); a value of the wrong type is an error (exit 2).
"""

from __future__ import annotations

import os

from semcheck.records import record

KNOWN_KEYS = ("paths", "devices", "engine", "timeout", "invocations", "exhaustive", "expect")


class ConfigError(Exception):
    """A `[tool.semcheck]` value semcheck cannot use; names the file and the key."""


@record(frozen=True)
class Defaults:
    source: str | None = None  # the pyproject.toml they come from
    paths: tuple[str, ...] | None = None  # relative to the working directory
    devices: tuple[int, ...] | None = None
    engine: str | None = None
    timeout: float | None = None
    invocations: int | None = None
    exhaustive: bool | None = None
    unknown_keys: tuple[str, ...] = ()

    def warnings(self) -> list[str]:
        return [f"semcheck: warning: {self.source}: unknown key {key!r} in [tool.semcheck] "
                f"(known: {', '.join(KNOWN_KEYS)})" for key in self.unknown_keys]


def load(cwd: str | None = None) -> Defaults:  # noqa: C901
    from semcheck.run.expectations import ExpectationError, semcheck_table, find_pyproject

    cwd = os.path.abspath(cwd or os.getcwd())
    try:
        pyproject = find_pyproject(os.path.join(cwd, "pyproject.toml"))
        table = semcheck_table(pyproject) if pyproject else None
    except ExpectationError as e:
        raise ConfigError(str(e)) from None
    if not table or pyproject is None:
        return Defaults()
    shown = os.path.relpath(pyproject, cwd)
    root = os.path.dirname(pyproject)

    def bad(key: str, expected: str) -> ConfigError:
        return ConfigError(f"{shown}: [tool.semcheck] {key} = {table[key]!r}: expected {expected}")

    values: dict = {}
    if "paths" in table:
        paths = [table["paths"]] if isinstance(table["paths"], str) else table["paths"]
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
            raise bad("paths", "a path or a list of paths")
        values["paths"] = tuple(os.path.relpath(os.path.join(root, p), cwd) for p in paths)
    if "devices" in table:
        devices = table["devices"]
        if isinstance(devices, str):
            try:
                devices = [int(part) for part in devices.split(",") if part.strip()]
            except ValueError:
                raise bad("devices", "device counts like [2, 4, 8] or \"2,4,8\"") from None
        if (not isinstance(devices, list) or not devices
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in devices)):
            raise bad("devices", "positive device counts like [2, 4, 8]")
        values["devices"] = tuple(devices)
    if "engine" in table:
        from semcheck.engines import ENGINES

        if table["engine"] not in ENGINES:
            raise bad("engine", "one of " + ", ".join(sorted(ENGINES)))
        values["engine"] = table["engine"]
    if "timeout" in table:
        timeout = table["timeout"]
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise bad("timeout", "a positive number of seconds")
        values["timeout"] = float(timeout)
    if "invocations" in table:
        invocations = table["invocations"]
        if isinstance(invocations, bool) or not isinstance(invocations, int) or invocations < 1:
            raise bad("invocations", "a whole number of at least 1")
        values["invocations"] = invocations
    if "exhaustive" in table:
        if not isinstance(table["exhaustive"], bool):
            raise bad("exhaustive", "true or false")
        values["exhaustive"] = table["exhaustive"]
    unknown = tuple(sorted(key for key in table if key not in KNOWN_KEYS))
    return Defaults(source=shown, unknown_keys=unknown, **values)
