"""Shared helpers for the TPU-frontend tests: the example scripts, the verdicts their
docstrings promise, and their semcheck results (computed once per session, in parallel)."""

from __future__ import annotations

import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from semcheck.api import verify_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "tpu")
DEVICE_COUNTS = (2, 4, 8)
MEGACORE = "2 TensorCores per device"
HANG_KINDS = {"deadlock", "unsatisfied_wait"}


def example_paths() -> list[str]:
    return sorted(
        os.path.join(EXAMPLES, name) for name in os.listdir(EXAMPLES)
        if name.endswith(".py") and not name.startswith("_")
    )


@dataclass
class Expectation:
    """What an example's docstring promises."""

    verdicts: dict[str, tuple[str, frozenset]] = field(default_factory=dict)  # config -> (verdict, kinds)
    warnings: frozenset = frozenset()
    markers: dict[str, set[int]] = field(default_factory=dict)  # kind -> lines marked "# <- kind"


_VERDICT = re.compile(r"^Expected verdict(?: \((?P<config>[^)]*)\))?: (?P<verdict>safe|violation)(?: \((?P<kinds>[^)]*)\))?$")
_WARNINGS = re.compile(r"^Expected warnings: (?P<kinds>.*)$")
_MARKER = re.compile(r"#\s*<-\s*(?P<kind>[a-z_]+)")


def expectation(path: str) -> Expectation:
    import ast

    with open(path, encoding="utf-8") as f:
        source = f.read()
    doc = ast.get_docstring(ast.parse(source)) or ""
    exp = Expectation()
    for line in doc.splitlines():
        if m := _VERDICT.match(line.strip()):
            kinds = frozenset(k.strip() for k in (m["kinds"] or "").split(",") if k.strip())
            exp.verdicts[m["config"] or ""] = (m["verdict"], kinds)
        elif m := _WARNINGS.match(line.strip()):
            exp.warnings = frozenset(k.strip() for k in m["kinds"].split(","))
    for number, line in enumerate(source.splitlines(), start=1):
        if m := _MARKER.search(line):
            exp.markers.setdefault(m["kind"], set()).add(number)
    assert exp.verdicts, f"{path} documents no expected verdict"
    return exp


def config_of(result) -> str:
    return MEGACORE if MEGACORE in result.kernel else ""


_results: dict[tuple[str, int], list] = {}
_lock = threading.Lock()


def results(path: str, devices: int) -> list:
    key = (path, devices)
    with _lock:
        if key in _results:
            return _results[key]
    found = verify_path(path, [devices])
    with _lock:
        _results[key] = found
    return found


def prefetch(paths, counts=DEVICE_COUNTS, workers: int = 2) -> None:
    """Capture and check every (example, device count) pair, `workers` subprocesses at a time."""
    todo = [(p, n) for p in paths for n in counts if (p, n) not in _results]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda pn: results(*pn), todo))
