"""Shared helpers for the TPU-frontend tests: the example scripts, the verdicts their
`# semcheck: expect` comments declare, and their semcheck results (computed once per session, in parallel)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import pickle
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, TypeVar

from semcheck.run import expectations
from semcheck.api import verify_path
from semcheck.kinds import SEVERITY, Kind

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "tpu")
DEVICE_COUNTS = (2, 4, 8)
MEGACORE = "2 TensorCores per device"
HANG_KINDS = {"deadlock", "unsatisfied_wait"}
# A folder for the whole test session, every xdist worker's (tests/conftest.py makes it and
# removes it): where the modules share what each would otherwise make on its own worker
# (`made_once`): the interpreter runs of the differential modules, the examples' results.
RUNS_FOLDER = "SEMCHECK_TEST_RUNS"

T = TypeVar("T")


def made_once(kind: str, key: object, make: Callable[[], T], *, wait: bool = True) -> T | None:
    """`make()`, made once per test session, whichever worker asks first: the others read it
    from the session's folder (pickled), and one that asks while another makes it waits for
    that, not makes it twice. With `wait=False`, None instead of waiting (a worker with other
    things to make comes back to it later). Without the folder (a test run on its own),
    simply `make()`. `key` is anything whose repr names the value."""
    folder = os.environ.get(RUNS_FOLDER)
    if not folder:
        return make()
    entry = os.path.join(folder, f"{kind}-{hashlib.sha256(repr(key).encode()).hexdigest()[:32]}")
    with open(entry + ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        if os.path.exists(entry + ".pickle"):  # the lock is released when the file closes
            with open(entry + ".pickle", "rb") as f:
                return pickle.load(f)
        value = make()
        with open(entry + ".part", "wb") as f:
            pickle.dump(value, f)
        os.replace(entry + ".part", entry + ".pickle")
    return value


# Examples whose check at some device counts does not finish within the test budget today
# (none since the counting cut of a whole stubborn set: the ring all-reduce and the
# bidirectional reduce-scatter, which once needed millions of states at 8 devices, are back
# in examples/); they are tested at the counts that finish.
FINISHING_DEVICE_COUNTS: dict[str, tuple[int, ...]] = {}


def device_counts(path: str, counts=DEVICE_COUNTS) -> tuple[int, ...]:
    """The device counts of `counts` at which `path` is checked in the tests."""
    finishing = FINISHING_DEVICE_COUNTS.get(os.path.basename(path), counts)
    return tuple(n for n in counts if n in finishing)


def example_line(name: str, text: str) -> tuple[str, int]:
    """The path of TPU example `name` and the number of its one line containing `text`."""
    path = os.path.join(EXAMPLES, name)
    with open(path, encoding="utf-8") as f:
        [number] = [n for n, line in enumerate(f, start=1) if text in line]
    return path, number


def example_paths() -> list[str]:
    return sorted(
        os.path.join(EXAMPLES, name) for name in os.listdir(EXAMPLES)
        if name.endswith(".py") and not name.startswith("_")
    )


@dataclass
class Declared:
    """What a model or example declares: its `# semcheck: expect` comments (the gate's own
    declarations, read by semcheck.run.expectations, so the tests and `semcheck verify
    --expectations` hold every file to one statement) and the lines it marks `# <- kind`
    (where each violation is reported)."""

    declarations: list[expectations.Expectation]
    markers: dict[str, set[int]] = field(default_factory=dict)  # kind -> lines marked "# <- kind"

    def kinds_for(self, result) -> tuple[frozenset[str], frozenset[str]]:
        """(error kinds, warning kinds) declared for the check `result` is of; none declared
        means safe (as the gate judges)."""
        declared = expectations.expectation_for(result, self.declarations)
        outcomes = declared.outcomes if declared else frozenset()
        errors = frozenset(k for k in outcomes if SEVERITY[Kind(k)] == "error")
        return errors, outcomes - errors

    def kinds_at(self, devices: int, cores: int = 1, invocations: int = 1, kernel: str = "") -> tuple[frozenset[str], frozenset[str]]:
        """`kinds_for` a check known by its numbers (e.g. a row of the JSON report)."""
        return self.kinds_for(SimpleNamespace(kernel=kernel, devices=devices, cores=cores, invocations=invocations))

    def core_counts(self) -> set[int]:
        """The cores per device the declarations name: a kernel with parallel grid dimensions
        is checked on one core and split over 2 TensorCores, and declares both; empty when
        none is named."""
        return {c for d in self.declarations for c in (d.cores or ())}

    def invocation_counts(self) -> set[int]:
        """1 (semcheck's default) and every `invocations=` a declaration names."""
        return {1} | {k for d in self.declarations for k in (d.invocations or ())}

    def is_buggy(self) -> bool:
        return any(SEVERITY[Kind(k)] == "error" for d in self.declarations for k in d.outcomes)


_MARKER = re.compile(r"#\s*<-\s*(?P<kinds>[a-z_]+(?:\s*,\s*[a-z_]+)*)")


def expectation(path: str) -> Declared:
    declared = Declared(expectations.declared_in_file(path))
    assert declared.declarations, f"{path} declares no expected verdict: add a `# semcheck: expect ...` comment"
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            for m in _MARKER.finditer(line):  # `# <- a, b`, or two markers `# <- a  # <- b`
                for kind in re.split(r"\s*,\s*", m["kinds"]):
                    declared.markers.setdefault(kind, set()).add(number)
    return declared


def config_of(result) -> str:
    return MEGACORE if MEGACORE in result.kernel else ""


@dataclass(frozen=True)
class ScriptVerdict:
    """What semcheck said of one example's script at one device count and configuration,
    over all its kernels: a script with two kernels (e.g. prefetch_count_from_kernel.py) is
    one run of JAX's interpreter, which hangs or races if either kernel does."""

    errors: tuple
    error: object  # the first kernel's error, or None
    safe: bool


def script_verdict(path: str, devices: int, config: str) -> ScriptVerdict:
    found = [r for r in results(path, devices) if config_of(r) == config]
    assert found, (path, devices, config)
    return ScriptVerdict(
        errors=tuple(v for r in found for v in r.errors),
        error=next((r.error for r in found if r.error is not None), None),
        safe=all(r.verdict.value == "safe" for r in found),
    )


_results: dict[tuple[str, int, int], list] = {}
_lock = threading.Lock()


def results(path: str, devices: int, invocations: int = 1) -> list:
    found = _results_of(path, devices, invocations, wait=True)
    assert found is not None
    return found


def _results_of(path: str, devices: int, invocations: int, *, wait: bool) -> list | None:
    """The results of `path` at `devices`, made once per session (`made_once`); None when
    another worker is making them and `wait` is false."""
    key = (path, devices, invocations)
    with _lock:
        if key in _results:
            return _results[key]
    # every finding, as the gate judges them (`semcheck verify --expectations` is exhaustive)
    found = made_once("results", key,
                      lambda: verify_path(path, [devices], invocations=invocations, exhaustive=True), wait=wait)
    if found is not None:
        with _lock:
            _results[key] = found
    return found


def prefetch(paths, counts=DEVICE_COUNTS, workers: int = 2) -> None:
    """Capture and check every (example, device count) pair, `workers` at a time, once per
    invocation count the example documents: first those no other xdist worker is making,
    then, waiting for them, those it was."""
    todo = [
        (p, n, k) for p in paths for n in device_counts(p, counts) for k in sorted(expectation(p).invocation_counts())
        if (p, n, k) not in _results
    ]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        made = list(pool.map(lambda check: _results_of(*check, wait=False), todo))
        list(pool.map(lambda check: results(*check), [c for c, r in zip(todo, made) if r is None]))
