"""Run semcheck on every kind of bad input and print what it did (issue 17's and issue 30's
sweep).

    python benchmarks/hostile.py [--only SUBSTRING] [--skip-kernels]

Each case builds its files in a temporary folder, runs `python -m semcheck verify ...` in a
process of its own and prints a row: the case, the exit code, the first line of output,
and what was expected. A row is UNSOUND when semcheck exited 0 (a gate would pass) where
it should not have, MISMATCH for any other unexpected exit code or missing text, SLOW when
it ended but later than its limit allows (a signal that did not stop it at once), and LEFT
BEHIND when a process the case's files started (each writes its pid to a `.pids` file) is
still alive a few seconds after semcheck ended. The script exits 1 if any row is not ok.
Kernel-script cases start JAX (a few seconds each); `--skip-kernels` leaves them out.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
DEADLOCK = str(MODELS / "circular_wait.py")
SAFE = str(MODELS / "ring_allgather.py")

SAFE_MODEL = """\
from semcheck.model import ProtocolBuilder


def model(devices):
    p = ProtocolBuilder("m", devices=devices, backend="tpu")
    ready = p.semaphore("ready")
    for d in range(devices):
        t = p.thread(d)
        t.signal(ready)
        t.wait(ready, 1)
    return p.build()
"""

KERNEL = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

mesh = Mesh(np.array(jax.devices(){devices}), ("x",), axis_types=(AxisType.Auto,))
x = jnp.ones((mesh.size * 8, 128), jnp.float32)


def handshake_kernel(x_ref, o_ref, ready):
    right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
    pl.semaphore_signal(ready, 1, device_id=(right,))
    pl.semaphore_wait(ready, 1)
    o_ref[...] = x_ref[...]


def per_device(block):
    return pl.pallas_call(handshake_kernel, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR])(block)


if __name__ == "__main__":
    f = jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    jax.jit(f)(x)
"""


@dataclass
class Case:
    name: str
    files: dict[str, str | bytes]  # relative path -> contents
    argv: list[str]  # after `verify`; {dir} is the case's folder
    expected: int  # exit code
    text: str = ""  # must appear in stdout + stderr
    env: dict[str, str] = field(default_factory=dict)  # {dir} is the case's folder
    cwd: str = ""  # relative to the case's folder
    kernel: bool = False  # starts JAX
    send: Callable[[subprocess.Popen, Path], None] | None = None  # e.g. a signal once ready
    limit: float = 300.0
    stdin_open: bool = False  # semcheck's stdin stays open while it runs, as a terminal's would
    prepare: Callable[[Path, dict], None] | None = None  # before the run: (folder, environment)
    stopped_within: float | None = None  # seconds from `send` to semcheck's end


def kernel(prefix: str = "", devices: str = "") -> str:
    return prefix + KERNEL.format(devices=devices)


def wait_for_file_then(sig: int, *markers: str):
    def send(proc: subprocess.Popen, folder: Path) -> None:
        deadline = time.monotonic() + 120
        while not all((folder / m).exists() for m in markers) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        proc.send_signal(sig)

    return send


# A script that starts a daemon (a process in a session of its own, which a kill of the
# script's session does not reach) and records both pids for the LEFT BEHIND check.
DAEMON = """\
import os, subprocess
_daemon = subprocess.Popen(["sleep", "600"], start_new_session=True)
with open(__file__ + ".pids", "a") as _f:
    _f.write(f"{_daemon.pid}\\n{os.getpid()}\\n")
"""
SLEEPS = DAEMON + "import time\nopen(__file__ + '.started', 'w').close()\ntime.sleep(600)\n"
MOE = ROOT / "examples" / "tpu" / "moe_dispatch_combine.py"
# Issue 30's MoE mutant: device d's barrier signals removed; a hang is found before the
# lowering stops at a DMA wait whose size depends on data.
MOE_HANG = MOE.read_text(encoding="utf-8").replace(
    "            pl.semaphore_signal(barrier, 1, device_id=(d,))\n", "            pass\n", 1)

BAD_MODEL = """\
from semcheck.model import ProtocolBuilder


def model(devices):
    p = ProtocolBuilder("bad", devices=devices, backend="tpu")
    ready = p.semaphore("ready")
    {line}
    for d in range(devices):
        t = p.thread(d)
        t.signal(ready)
        t.wait(ready, 1)
    return p.build()
"""


def bad_model(line: str) -> str:
    return BAD_MODEL.format(line=line)


def semcheck_once(folder: Path, env: dict, *argv: str) -> None:
    subprocess.run([sys.executable, "-m", "semcheck", "verify", *argv], cwd=ROOT, env=env,
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=300)


def cached_then(damage: Callable[[Path, Path], None], *scripts: str):
    """Capture `scripts` into the case's cache folder, then damage the kept entries."""
    def prepare(folder: Path, env: dict) -> None:
        cache = folder / "cache"
        cache.mkdir()
        for script in scripts:
            semcheck_once(folder, env, str(folder / script), "--devices", "2")
        damage(folder, cache)

    return prepare


def garbage(folder: Path, cache: Path) -> None:
    for entry in cache.glob("*.capture"):
        entry.write_bytes(b"\x80\x04garbage, not a capture")


def truncated(folder: Path, cache: Path) -> None:
    for entry in cache.glob("*.capture"):
        entry.write_bytes(entry.read_bytes()[:-11])


def swapped(folder: Path, cache: Path) -> None:
    """The safe kernel's entry copied over the deadlocking kernel's (the issue's SAFE, exit 0)."""
    entries = sorted(cache.glob("*.capture"), key=lambda p: b"safe.py" in p.read_bytes())
    bad, good = entries
    bad.write_bytes(good.read_bytes())


def fifo(name: str):
    def prepare(folder: Path, env: dict) -> None:
        os.mkfifo(folder / name)

    return prepare


TRAP = "raise SystemExit('semcheck ran a file it should have skipped')\n"

CASES = [
    Case("model calls sys.exit(0) beside a deadlock", {"m.py": "import sys\nsys.exit(0)\n\ndef model(d):\n    pass\n"},
         ["{dir}/m.py", DEADLOCK, "--devices", "2"], 2, "exited (SystemExit(0)"),
    Case("model calls os._exit(0) beside a deadlock", {"m.py": "import os\n\ndef model(d):\n    os._exit(0)\n"},
         ["{dir}/m.py", DEADLOCK, "--devices", "2"], 2, "called os._exit(0)"),
    Case("model raises KeyboardInterrupt", {"m.py": "raise KeyboardInterrupt\n\ndef model(d):\n    pass\n"},
         ["{dir}/m.py", DEADLOCK, "--devices", "2"], 2, "raised KeyboardInterrupt"),
    Case("model forks", {"m.py": "import os\nos.fork()\n" + SAFE_MODEL}, ["{dir}/m.py", "--devices", "2"], 0),
    Case("model -o is written though the model exits", {"m.py": "import sys\n\ndef model(d):\n    sys.exit(0)\n"},
         ["{dir}/m.py", "--devices", "2", "--format", "json", "-o", "{dir}/out.json"], 2),
    Case("model with an empty input range", {"m.py": SAFE_MODEL.replace(
        'ready = p.semaphore("ready")', 'ready = p.semaphore("ready")\n    p.input("n", 5, 3)')},
         ["{dir}/m.py", "--devices", "2"], 2, "range 5..3 is empty"),
    Case("folder with setup.py, venv/, node_modules/, build/, hidden, git-ignored", {
        "setup.py": TRAP, "noxfile.py": TRAP, "conftest.py": TRAP, "docs/conf.py": TRAP, "venv/a.py": TRAP,
        "node_modules/b.py": TRAP, "build/c.py": TRAP, "dist/d.py": TRAP, ".hidden/e.py": TRAP,
        "ignored/f.py": TRAP, ".gitignore": "ignored/\n", "kernels/ok.py": SAFE_MODEL},
         ["{dir}", "--devices", "2"], 0, "skipped"),
    Case("binary .py beside a safe model", {"bin.py": b"\x7fELF\x00\x01garbage", "ok.py": SAFE_MODEL},
         ["{dir}/bin.py", "{dir}/ok.py", "--devices", "2,4"], 2, "null bytes"),
    Case("latin-1 .py without a coding cookie", {"l.py": b"# caf\xe9\n" + SAFE_MODEL.encode()},
         ["{dir}/l.py", "--devices", "2"], 2, "not valid UTF-8"),
    Case("latin-1 .py with a coding cookie", {"l.py": b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + SAFE_MODEL.encode()},
         ["{dir}/l.py", "--devices", "2"], 0),
    Case("BOM .py", {"b.py": b"\xef\xbb\xbf" + SAFE_MODEL.encode()}, ["{dir}/b.py", "--devices", "2"], 0),
    Case("--timeout nan", {}, [SAFE, "--timeout", "nan"], 2, "--timeout"),
    Case("--timeout -1", {}, [SAFE, "--timeout", "-1"], 2, "--timeout"),
    Case("--max-states -5", {}, [SAFE, "--max-states", "-5"], 2, "--max-states"),
    Case("--max-memory nan", {}, [SAFE, "--max-memory", "nan"], 2, "--max-memory"),
    Case("--invocations 0", {}, [SAFE, "--invocations", "0"], 2, "--invocations"),
    Case("--assume n=5..3", {}, [SAFE, "--assume", "n=5..3"], 2, "range is empty"),
    Case("SEMCHECK_TIMEOUT=abc", {}, [SAFE], 2, "SEMCHECK_TIMEOUT", env={"SEMCHECK_TIMEOUT": "abc"}),
    Case("SEMCHECK_MAX_STATES=-5", {}, [SAFE], 2, "SEMCHECK_MAX_STATES", env={"SEMCHECK_MAX_STATES": "-5"}),
    Case("SEMCHECK_MAX_MEMORY_MB=lots", {}, [SAFE], 2, "SEMCHECK_MAX_MEMORY_MB",
         env={"SEMCHECK_MAX_MEMORY_MB": "lots"}),
    Case("-o into a missing folder", {}, [SAFE, "-o", "{dir}/no/such/out.json"], 2, "does not exist"),
    Case("-o is a folder", {}, [SAFE, "-o", "{dir}"], 2, "is a folder"),
    Case("--graph into a missing folder", {}, [DEADLOCK, "--graph", "{dir}/no/cex.svg"], 2, "does not exist"),
    Case("a typo in a path", {}, ["no/such/kernel.py", SAFE, "--devices", "2,4,8"], 2, "no such file or folder"),
    Case("near-miss directive on a deadlock", {"c.py": open(DEADLOCK, encoding="utf-8").read().replace(
        "# semcheck: expect deadlock", "# semcheck: expected deadlock")},
         ["{dir}/c.py", "--devices", "2", "--expectations"], 1, "did you mean"),
    Case("Ctrl-C after one check finished", {"s.py": kernel(SLEEPS)},
         [SAFE, "{dir}/s.py", "--devices", "2", "--format", "json", "-o", "{dir}/out.json"], 130,
         "interrupted (Ctrl-C)", kernel=True, send=wait_for_file_then(signal.SIGINT, "s.py.started")),
    Case("SIGTERM after one check finished", {"s.py": kernel(SLEEPS)}, [SAFE, "{dir}/s.py", "--devices", "2"],
         143, "interrupted (SIGTERM)", kernel=True, send=wait_for_file_then(signal.SIGTERM, "s.py.started")),
    # kernel scripts
    Case("kernel script with a top-level model()", {"k.py": kernel() + "\n\ndef model(devices):\n    return None\n"},
         ["{dir}/k.py", "--devices", "2"], 0, "SAFE: handshake_kernel", kernel=True),
    Case("jax.py in the working directory", {"k/k.py": kernel(), "cwd/jax.py": "raise SystemExit('shadowed')\n"},
         ["{dir}/k/k.py", "--devices", "2"], 0, "SAFE: handshake_kernel", cwd="cwd", kernel=True),
    Case("script calls os._exit(3) before its kernel", {"k.py": kernel("import os\nos._exit(3)\n")},
         ["{dir}/k.py", "--devices", "2"], 2, "called os._exit(3)", kernel=True),
    Case("script kills itself with SIGKILL", {"k.py": kernel("import os, signal\nos.kill(os.getpid(), 9)\n")},
         ["{dir}/k.py", "--devices", "2"], 2, "killed by SIGKILL", kernel=True),
    Case("script leaves a background child", {"k.py": kernel("import subprocess\nsubprocess.Popen(['sleep', '600'])\n")},
         ["{dir}/k.py", "--devices", "2"], 0, "SAFE: handshake_kernel", kernel=True, limit=120),
    Case("script reads stdin", {"k.py": kernel("import sys\nsys.stdin.read()\n")},
         ["{dir}/k.py", "--devices", "2"], 0, "SAFE: handshake_kernel", kernel=True, limit=120, stdin_open=True),
    Case("SIGTERM while the script runs", {"k.py": kernel(
        "import time\nopen(__file__ + '.started', 'w').close()\ntime.sleep(600)\n")},
         ["{dir}/k.py", "--devices", "2"], 143, "interrupted (SIGTERM)", kernel=True,
         send=wait_for_file_then(signal.SIGTERM, "k.py.started")),
    Case("mesh jax.devices()[:2] run with --devices 4 --expectations", {"k.py": kernel(devices="[:2]")},
         ["{dir}/k.py", "--devices", "4", "--expectations"], 1, "mesh_smaller_than_devices", kernel=True),
    Case("named helper module beside a safe model", {"helpers.py": "import jax\n\ndef f(x):\n    return x\n"},
         ["{dir}/helpers.py", SAFE, "--devices", "2"], 0, "compiles no Pallas kernel", kernel=True),
    Case("named helper module alone", {"helpers.py": "import jax\n\ndef f(x):\n    return x\n"},
         ["{dir}/helpers.py", "--devices", "2"], 2, "nothing to check", kernel=True),
    # issue 30: signals with -j, the capture cache, bad model IR, output paths, FIFOs, daemons
    Case("SIGTERM during captures with -j 2", {"a.py": kernel(SLEEPS), "b.py": kernel(SLEEPS)},
         ["{dir}", "-j", "2", "--devices", "2"], 143, "interrupted (SIGTERM)", kernel=True,
         send=wait_for_file_then(signal.SIGTERM, "a.py.started", "b.py.started"), stopped_within=10),
    Case("SIGHUP during captures with -j 2", {"a.py": kernel(SLEEPS), "b.py": kernel(SLEEPS)},
         ["{dir}", "-j", "2", "--devices", "2"], 129, "interrupted (SIGHUP)", kernel=True,
         send=wait_for_file_then(signal.SIGHUP, "a.py.started", "b.py.started"), stopped_within=10),
    Case("semcheck killed (SIGKILL) during captures with -j 2", {"a.py": kernel(SLEEPS), "b.py": kernel(SLEEPS)},
         ["{dir}", "-j", "2", "--devices", "2"], -9, kernel=True, limit=60,
         send=wait_for_file_then(signal.SIGKILL, "a.py.started", "b.py.started"), stopped_within=10),
    Case("SIGHUP after one check finished", {"s.py": kernel(SLEEPS)}, [SAFE, "{dir}/s.py", "--devices", "2"],
         129, "interrupted (SIGHUP)", kernel=True, send=wait_for_file_then(signal.SIGHUP, "s.py.started")),
    Case("script daemonizes a process", {"k.py": kernel(DAEMON)}, ["{dir}/k.py", "--devices", "2"], 0,
         "SAFE: handshake_kernel", kernel=True),
    Case("capture cache entry is garbage", {"k.py": kernel()}, ["{dir}/k.py", "--devices", "2"], 0,
         "discarded the kept capture", env={"SEMCHECK_CAPTURE_CACHE": "{dir}/cache"}, kernel=True,
         prepare=cached_then(garbage, "k.py")),
    Case("capture cache entry is truncated", {"k.py": kernel()}, ["{dir}/k.py", "--devices", "2"], 0,
         "discarded the kept capture", env={"SEMCHECK_CAPTURE_CACHE": "{dir}/cache"}, kernel=True,
         prepare=cached_then(truncated, "k.py")),
    Case("capture cache entry of another kernel copied over a deadlock's",
         {"safe.py": kernel(), "deadlock.py": kernel().replace("pl.semaphore_wait(ready, 1)",
                                                                "pl.semaphore_wait(ready, 2)")},
         ["{dir}/deadlock.py", "--devices", "2"], 1, "made for another script",
         env={"SEMCHECK_CAPTURE_CACHE": "{dir}/cache"}, kernel=True, prepare=cached_then(swapped, "safe.py",
                                                                                       "deadlock.py")),
    Case("SEMCHECK_CAPTURE_CACHE is a file", {}, [SAFE], 2, "SEMCHECK_CAPTURE_CACHE",
         env={"SEMCHECK_CAPTURE_CACHE": SAFE}),
    Case("SEMCHECK_CAPTURE_CACHE is a folder below a file", {}, [SAFE], 2, "SEMCHECK_CAPTURE_CACHE",
         env={"SEMCHECK_CAPTURE_CACHE": SAFE + "/cache"}),
    Case("model with a negative buffer shape", {"m.py": bad_model('p.buffer("b", (-4, 8))')},
         ["{dir}/m.py", "--devices", "2"], 2, "m.py:7: bad model"),
    Case("model signals 1.5", {"m.py": bad_model("p.thread(0).signal(ready, 1.5)")},
         ["{dir}/m.py", "--devices", "2"], 2, "m.py:7: bad model"),
    Case('model signals device="left"', {"m.py": bad_model('p.thread(0).signal(ready, device="left")')},
         ["{dir}/m.py", "--devices", "2"], 2, "m.py:7: bad model"),
    Case("model with a semaphore array of size -1", {"m.py": bad_model('p.semaphore("s", size=-1)')},
         ["{dir}/m.py", "--devices", "2"], 2, "m.py:7: bad model"),
    Case("model with a thread on device 9 of 2", {"m.py": bad_model("p.thread(9)")},
         ["{dir}/m.py", "--devices", "2"], 2, "m.py:7: bad model"),
    Case("--summary into a missing folder", {}, [SAFE, "--summary", "{dir}/no/s.md"], 2, "does not exist"),
    Case("--sarif into a missing folder", {}, [SAFE, "--sarif", "{dir}/no/s.sarif"], 2, "does not exist"),
    Case("a FIFO as the path", {}, ["{dir}/pipe.py", "--devices", "2"], 2, "named pipe", prepare=fifo("pipe.py"),
         limit=60),
    Case("a FIFO in a folder beside a safe model", {"ok.py": SAFE_MODEL}, ["{dir}", "--devices", "2"], 2,
         "named pipe", prepare=fifo("pipe.py"), limit=60),
    Case("-o is a FIFO nothing reads", {}, [SAFE, "-o", "{dir}/out.json"], 2, "named pipe",
         prepare=fifo("out.json"), limit=60),
    Case("--devices 2,,4", {}, [SAFE, "--devices", "2,,4"], 2, "2,,4"),
    Case("script calls sys.exit(0) before its kernel", {"k.py": kernel("import sys\nsys.exit(0)\n")},
         ["{dir}/k.py", "--devices", "2"], 2, "exited with sys.exit(0) before any Pallas kernel", kernel=True),
    Case("MoE mutant that hangs before the lowering stops", {"moe.py": MOE_HANG}, ["{dir}/moe.py", "--devices", "2"],
         1, "unsatisfied wait", kernel=True),
]


@dataclass
class Row:
    case: str
    code: int | None
    first_line: str
    expected: str
    status: str


def run_case(case: Case, base: Path) -> Row:  # noqa: C901
    folder = base / "".join(c if c.isalnum() else "_" for c in case.name)[:60]
    folder.mkdir(parents=True)
    for relative, contents in case.files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(contents, bytes):
            path.write_bytes(contents)
        else:
            path.write_text(textwrap.dedent(contents))
    if ".gitignore" in case.files:
        subprocess.run(["git", "init", "-q", str(folder)], check=True)
    argv = [a.replace("{dir}", str(folder)) for a in case.argv]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name in ("SEMCHECK_DEBUG", "SEMCHECK_CAPTURE_CACHE", "SEMCHECK_CAPTURE_SERVER"):
        env.pop(name, None)
    if case.prepare:
        case.prepare(folder, dict(env, **{k: v.replace("{dir}", str(folder)) for k, v in case.env.items()}))
    env.update({k: v.replace("{dir}", str(folder)) for k, v in case.env.items()})
    cwd = folder / case.cwd if case.cwd else ROOT
    cwd.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "semcheck", "verify", *argv]
    stopping = None
    if case.stdin_open:
        out, err, code = _run_with_stdin_open(command, cwd, env, folder, case.limit)
    else:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        if case.send:
            case.send(proc, folder)
            stopping = time.monotonic()
        try:
            out, err = proc.communicate(timeout=case.limit)
            code = proc.returncode
        except subprocess.TimeoutExpired:  # still running, or gone and its orphans hold its output open
            proc.kill()
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                out, err = "", ""
            code = None
    took = time.monotonic() - stopping if stopping is not None else 0.0
    text = out + err
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("semcheck: error")]
    first = errors[0] if errors else next(iter(lines), "")
    expected = f"{case.expected}" + (f", says {case.text!r}" if case.text else "")
    if code == case.expected and case.text in text:
        status = "ok"
    elif code == 0:
        status = "UNSOUND"
    else:
        status = "MISMATCH"
    if status == "ok" and case.stopped_within is not None and took > case.stopped_within:
        status = f"SLOW ({took:.0f} s)"
    if status == "ok" and _left_behind(folder):
        status = "LEFT BEHIND"
    if "-o" in case.argv and case.expected != 0 and code is not None:
        out_file = Path(argv[argv.index("-o") + 1])
        if case.name.startswith(("model -o", "Ctrl-C")) and not out_file.is_file():
            status = "MISMATCH (no -o file)"
    return Row(case.name, code, first[:78], expected, status)


def _left_behind(folder: Path, grace: float = 5.0) -> list[int]:
    """The pids the case's files recorded that are still alive after `grace` seconds."""
    pids = [int(p) for f in folder.rglob("*.pids") for p in f.read_text().split()]
    deadline = time.monotonic() + grace
    while True:
        alive = [p for p in pids if _alive(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _run_with_stdin_open(command, cwd, env, folder: Path, limit: float):
    log = folder / "output.txt"
    with open(log, "w") as sink:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=sink,
                                stderr=subprocess.STDOUT, text=True)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            proc.kill()
            proc.wait()
            proc.stdin.close()
    return log.read_text(), "", code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--skip-kernels", action="store_true", help="leave out the cases that start JAX")
    args = parser.parse_args()
    cases = [c for c in CASES if args.only in c.name and not (args.skip_kernels and c.kernel)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="semcheck-hostile-") as tmp:
        for case in cases:
            started = time.monotonic()
            row = run_case(case, Path(tmp))
            rows.append(row)
            print(f"  {row.status:<8} {case.name} ({time.monotonic() - started:.1f} s)", file=sys.stderr)
    widths = [max(len(h), *(len(str(getattr(r, f))) for r in rows)) for h, f in
              [("case", "case"), ("exit", "code"), ("first line of output", "first_line"),
               ("expected", "expected"), ("status", "status")]]
    header = ["case", "exit", "first line of output", "expected", "status"]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        cells = [r.case, "timeout" if r.code is None else str(r.code), r.first_line, r.expected, r.status]
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths)))
    bad = [r for r in rows if r.status != "ok"]
    unsound = [r for r in bad if r.status == "UNSOUND"]
    print(f"\n{len(rows)} cases: {len(rows) - len(bad)} ok, {len(unsound)} unsound, {len(bad) - len(unsound)} mismatched")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
