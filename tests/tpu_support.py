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
# Kernels whose checks do not yet finish at 8 devices within the gate's budget: the fused MoE
# kernels (benchmarks/kernels/README.md).
KERNELS = os.path.join(ROOT, "benchmarks", "kernels")
DEVICE_COUNTS = (2, 4, 8)
MEGACORE = "2 TensorCores per device"
HANG_KINDS = {"deadlock", "unsatisfied_wait"}


# Examples whose check at some device counts does not finish within the test budget today
# (none since the counting cut of a whole stubborn set: the ring all-reduce and the
# bidirectional reduce-scatter, which once needed millions of states at 8 devices, are back
# in examples/); they are tested at the counts that finish.
FINISHING_DEVICE_COUNTS: dict[str, tuple[int, ...]] = {}


def device_counts(path: str, counts=DEVICE_COUNTS) -> tuple[int, ...]:
    """The device counts of `counts` at which `path` is checked in the tests."""
    finishing = FINISHING_DEVICE_COUNTS.get(os.path.basename(path), counts)
    return tuple(n for n in counts if n in finishing)


def example_paths() -> list[str]:
    return sorted(
        os.path.join(EXAMPLES, name) for name in os.listdir(EXAMPLES)
        if name.endswith(".py") and not name.startswith("_")
    )


@dataclass
class Expectation:
    """What an example's docstring promises.

    A verdict line may name the checks it is about in parentheses, comma-separated: the
    cores config (MEGACORE), "N devices" and "K invocations" (`--invocations K`; without it,
    one); a line naming the device count wins over one that does not, e.g.

        Expected verdict: safe
        Expected verdict (2 invocations): violation (remote_before_entry)
        Expected verdict (2 invocations, 2 devices): safe
    """

    verdicts: dict[str, tuple[str, frozenset]] = field(default_factory=dict)  # config -> (verdict, kinds)
    warnings: frozenset = frozenset()
    markers: dict[str, set[int]] = field(default_factory=dict)  # kind -> lines marked "# <- kind"

    def conditions(self) -> list[tuple["Condition", tuple[str, frozenset]]]:
        return [(Condition.parse(text), verdict) for text, verdict in self.verdicts.items()]

    def cores_configs(self) -> set[str]:
        """The cores configs (`config_of`) the docstring documents checks for."""
        return {c.cores for c, _ in self.conditions()}

    def invocation_counts(self) -> set[int]:
        return {c.invocations for c, _ in self.conditions()}

    def verdict_for(self, cores: str, devices: int, invocations: int = 1) -> tuple[str, frozenset]:
        fitting = [
            (c.devices is not None, verdict) for c, verdict in self.conditions()
            if (c.cores, c.invocations) == (cores, invocations) and c.devices in (None, devices)
        ]
        assert fitting, f"no documented verdict for {cores or 'one core'}, {devices} devices, {invocations} invocation(s)"
        return max(fitting, key=lambda f: f[0])[1]


@dataclass(frozen=True)
class Condition:
    """Which checks a verdict line is about; a line that names no invocation count is about
    a single invocation (semcheck's default)."""

    cores: str = ""  # "" or MEGACORE
    devices: int | None = None  # None: every device count
    invocations: int = 1

    @classmethod
    def parse(cls, text: str) -> "Condition":
        cores, devices, invocations = "", None, 1
        for part in (p.strip() for p in text.split(",") if p.strip()):
            if m := re.fullmatch(r"(\d+) devices?", part):
                devices = int(m[1])
            elif m := re.fullmatch(r"(\d+) invocations?", part):
                invocations = int(m[1])
            else:
                assert part == MEGACORE, f"unknown verdict condition {part!r}"
                cores = part
        return cls(cores, devices, invocations)


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


_results: dict[tuple[str, int, int], list] = {}
_lock = threading.Lock()


def results(path: str, devices: int, invocations: int = 1) -> list:
    key = (path, devices, invocations)
    with _lock:
        if key in _results:
            return _results[key]
    found = verify_path(path, [devices], invocations=invocations)
    with _lock:
        _results[key] = found
    return found


def prefetch(paths, counts=DEVICE_COUNTS, workers: int = 2) -> None:
    """Capture and check every (example, device count) pair, `workers` subprocesses at a time,
    once per invocation count the example documents."""
    todo = [
        (p, n, k) for p in paths for n in device_counts(p, counts) for k in sorted(expectation(p).invocation_counts())
        if (p, n, k) not in _results
    ]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda check: results(*check), todo))
