"""The capture server (semcheck/frontends/capture_server.py): JAX imported once, each capture
a child forked before any backend starts, as isolated as a subprocess of its own."""

from __future__ import annotations

import os
import time

import pytest

from semcheck.frontends import capture, capture_process, capture_server
from tests.test_hostile_input import kernel_script, pid_alive

ENTRY = "semcheck.frontends.capture:child_main"


@pytest.fixture
def server():
    """A server of the test's own (not the session's), ended afterwards."""
    started = capture_server.Server(capture.child_environment(1), capture_process.SERVER_PRELOAD)
    yield started
    started.close()


def _ask(server, monkeypatch, tmp_path, script: str, devices: int, *, env=None, limit: float = 300.0):
    """One capture through `server`: the child's exit code and what it captured (or None)."""
    monkeypatch.setenv(capture_server.ADDRESS_ENVIRONMENT, server.address)
    output = tmp_path / f"capture-{devices}.pickle"
    argv = ["--devices", str(devices), "--output", str(output), "--timeout", "300", script]
    code, _ = capture_server.run(ENTRY, argv, env or capture.child_environment(devices), preload=(),
                                 stdout=str(tmp_path / "out.txt"), stderr=str(tmp_path / "err.txt"), limit=limit)
    if not output.exists():
        return code, None
    import pickle

    with open(output, "rb") as f:
        return code, pickle.load(f)


def _sleeper(tmp_path, marker) -> str:
    """A kernel script that starts a daemon of its own, writes its pid and the daemon's into
    `marker`, and sleeps."""
    return kernel_script(tmp_path, prefix=(
        "import os, subprocess, time\n"
        "daemon = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        f"open({str(marker)!r}, 'w').write(f'{{os.getpid()}} {{daemon.pid}}')\n"
        "time.sleep(600)\n"))


def test_each_child_gets_its_own_device_count(server, monkeypatch, tmp_path):
    """The server imported JAX but started no backend, so XLA_FLAGS set for the child decides."""
    script = kernel_script(tmp_path)
    for devices in (2, 4, 3):
        code, outcome = _ask(server, monkeypatch, tmp_path, script, devices)
        assert code == 0 and outcome.devices == devices, outcome
        assert [p.devices for p in outcome.protocols] == [devices]
        assert "jax import" not in outcome.cpu_seconds  # imported once, in the server


def test_the_child_runs_in_the_requesters_directory_and_environment(server, monkeypatch, tmp_path):
    record = tmp_path / "seen.txt"
    script = kernel_script(tmp_path, prefix=(
        "import os, sys\n"
        f"open({str(record)!r}, 'w').write(' '.join([os.getcwd(), os.environ.get('SEEN_BY_SCRIPT', '-'), "
        "os.environ.get('SEMCHECK_CAPTURE_SERVER', '-'), str(sys.stdin.read() == '')]))\n"))
    monkeypatch.chdir(tmp_path)
    env = dict(capture.child_environment(2), SEEN_BY_SCRIPT="yes")
    code, outcome = _ask(server, monkeypatch, tmp_path, script, 2, env=env)
    assert code == 0 and outcome.captured == 1
    assert record.read_text() == f"{tmp_path} yes - True"  # and no server address, and stdin at its end


def test_a_request_whose_environment_jax_reads_differs_is_refused(server, monkeypatch, tmp_path):
    """JAX read JAX_* when the server imported it: a child under other values would not run
    as `python FILE` does, so the caller runs the capture in a subprocess of its own."""
    env = dict(capture.child_environment(2), JAX_TRACEBACK_FILTERING="off")
    with pytest.raises(capture_server.Unavailable, match="differs from the server's"):
        _ask(server, monkeypatch, tmp_path, kernel_script(tmp_path), 2, env=env)
    # Through capture_script the same request is captured anyway, in a subprocess.
    monkeypatch.setenv("JAX_TRACEBACK_FILTERING", "off")
    outcome = capture.capture_script(kernel_script(tmp_path, name="other.py"), 2)
    assert outcome.captured == 1 and "jax import" in outcome.cpu_seconds


def test_a_capture_the_requester_stops_waiting_for_is_killed_with_what_it_started(server, monkeypatch, tmp_path):
    marker = tmp_path / "pids"
    script = _sleeper(tmp_path, marker)
    # The limit counts from the request, and a fresh server's first requester also waits for
    # its JAX import: on a loaded machine that took most of 20 s (the script never started,
    # so no marker). One capture first, and the limit is the script's alone.
    assert _ask(server, monkeypatch, tmp_path, kernel_script(tmp_path, name="warm.py"), 2)[0] == 0
    with pytest.raises(TimeoutError):
        _ask(server, monkeypatch, tmp_path, script, 2, limit=20)
    pids = [int(p) for p in marker.read_text().split()]
    assert not [p for p in pids if pid_alive(p)]  # gone before run() returned


def test_a_capture_killed_by_its_script_is_reported_and_the_server_serves_on(server, monkeypatch, tmp_path):
    killed = kernel_script(tmp_path, prefix="import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    code, outcome = _ask(server, monkeypatch, tmp_path, killed, 2)
    assert (code, outcome) == (-9, None)
    code, outcome = _ask(server, monkeypatch, tmp_path, kernel_script(tmp_path, name="fine.py"), 2)
    assert code == 0 and outcome.captured == 1


def test_the_server_ends_with_its_owner_and_kills_what_it_runs(monkeypatch, tmp_path):
    started = capture_server.Server(capture.child_environment(1), capture_process.SERVER_PRELOAD)
    marker = tmp_path / "pid"
    script = kernel_script(tmp_path, prefix=(
        f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n"))
    monkeypatch.setenv(capture_server.ADDRESS_ENVIRONMENT, started.address)
    import threading

    waiting = threading.Thread(target=lambda: pytest.raises(capture_server.Unavailable, _ask, started, monkeypatch,
                                                            tmp_path, script, 2), daemon=True)
    waiting.start()
    deadline = time.monotonic() + 120
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    script_pid = int(marker.read_text())
    started.close()  # as at semcheck's exit: the pipe on the server's stdin closes
    assert started.process.returncode == 0
    assert not pid_alive(script_pid) and not os.path.exists(started.folder)
    waiting.join(timeout=30)


def test_off_means_a_subprocess_per_capture(monkeypatch, tmp_path):
    monkeypatch.setenv(capture_server.ADDRESS_ENVIRONMENT, "off")
    assert capture_server.shared_address({}, ()) is None
    outcome = capture.capture_script(kernel_script(tmp_path), 2)
    assert outcome.captured == 1 and "jax import" in outcome.cpu_seconds


_IMPORTED_AFTER_PRELOAD = """
import json, pickle, sys
from semcheck.frontends import capture, capture_process, capture_server
script, output = sys.argv[1:]
capture_server._import(list(capture_process.SERVER_PRELOAD) + [f"{n}?" for n in capture_process._jax_imports(script)])
before = set(sys.modules)
capture.main(["--devices", "2", "--output", output, script])
with open(output, "rb") as f:
    outcome = pickle.load(f)
print(json.dumps({"protocols": len(outcome.protocols), "error": outcome.script_error,
                  "imported": sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("semcheck", "jax", "jaxlib"))}))
"""


def test_a_tpu_capture_imports_nothing_the_server_did_not_preload(tmp_path):
    """What a child imports after the fork every child pays again: the server's preload must
    hold all of it (a capture run, lowering included, as the child runs it, after the preload)."""
    import json
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "tpu", "allreduce_ring.py")
    out = subprocess.run([sys.executable, "-c", _IMPORTED_AFTER_PRELOAD, script, str(tmp_path / "capture.pickle")],
                         env=capture.child_environment(2), cwd=tmp_path, capture_output=True, text=True, check=True,
                         timeout=300).stdout
    seen = json.loads(out.splitlines()[-1])
    assert seen == {"protocols": 1, "error": None, "imported": []}


def test_start_gives_the_child_by_its_pid_to_watch_and_kill(server, tmp_path):
    """`start` answers once the child is forked: its pid is the process that runs the
    script (tests/interpreter_forks.py watches an interpreter run's CPU time by it), and
    killing it ends it and what it started, with the exit code of a SIGKILL."""
    marker = tmp_path / "pids"
    script = _sleeper(tmp_path, marker)
    argv = ["--devices", "2", "--output", str(tmp_path / "out.pickle"), "--timeout", "300", script]
    child = capture_server.start(server.address, ENTRY, argv, capture.child_environment(2),
                                 stdout=str(tmp_path / "out.txt"), stderr=str(tmp_path / "err.txt"))
    deadline = time.monotonic() + 120
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        with pytest.raises(TimeoutError):
            child.wait(timeout=0.1)
    script_pid, daemon_pid = (int(p) for p in marker.read_text().split())
    assert child.pid == script_pid
    child.kill()
    assert child.wait() == -9
    assert not pid_alive(script_pid) and not pid_alive(daemon_pid)


_STOCKED_CONTEXTS = """
import json, pickle, sys
from semcheck.frontends import capture, capture_process, capture_server
script, output = sys.argv[1:]
capture_server._import(list(capture_process.SERVER_PRELOAD))
capture_server._stock_for_children()
from jax._src.interpreters import mlir
stock = mlir.make_ir_context.semcheck_stock
stocked = {id(c) for c in stock}
made = []
plain = mlir.make_ir_context
mlir.make_ir_context = lambda: made.append(plain()) or made[-1]
capture.main(["--devices", "2", "--output", output, script])
with open(output, "rb") as f:
    outcome = pickle.load(f)
print(json.dumps({"protocols": len(outcome.protocols), "error": outcome.script_error, "stocked": len(stocked),
                  "handed out": len(made), "distinct": len({id(c) for c in made}),
                  "from the stock": sum(id(c) in stocked for c in made), "left": len(stock)}))
"""


def test_a_capture_child_takes_each_fresh_mlir_context_from_the_servers_stock_once(tmp_path):
    """The server makes JAX's MLIR contexts before it forks its second child
    (frontends/mlir_contexts.py): a capture's lowerings take them from the stock, each
    context serving one lowering only."""
    import json
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "tpu", "allreduce_ring.py")
    out = subprocess.run([sys.executable, "-c", _STOCKED_CONTEXTS, script, str(tmp_path / "capture.pickle")],
                         env=capture.child_environment(2), cwd=tmp_path, capture_output=True, text=True, check=True,
                         timeout=300).stdout
    seen = json.loads(out.splitlines()[-1])
    assert seen["protocols"] == 1 and seen["error"] is None
    assert seen["stocked"] == 16 and seen["handed out"] >= 5
    assert seen["distinct"] == seen["handed out"]  # never one context for two lowerings
    assert seen["from the stock"] == min(seen["handed out"], 16) and seen["left"] == 16 - seen["from the stock"]


def test_past_the_stock_jax_makes_its_contexts_as_before():
    import subprocess
    import sys

    code = ("from semcheck.frontends import mlir_contexts\n"
            "mlir_contexts.stock()\n"
            "from jax._src.interpreters import mlir\n"
            "stock = list(mlir.make_ir_context.semcheck_stock)\n"
            "got = [mlir.make_ir_context() for _ in range(18)]\n"
            "assert len({id(c) for c in got}) == 18\n"
            "assert {id(c) for c in got[:16]} == {id(c) for c in stock}\n"
            "assert mlir.make_ir_context.semcheck_stock == []\n"
            "print('ok')\n")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=300).stdout.strip() == "ok"


def test_the_server_stocks_contexts_before_its_second_child_only(server, monkeypatch, tmp_path):
    """A run of one capture does not pay for contexts its child would not use."""
    marker = tmp_path / "stocked"
    script = kernel_script(tmp_path, prefix=(
        "from jax._src.interpreters import mlir\n"
        f"open({str(marker)!r}, 'a').write(str(len(getattr(mlir.make_ir_context, 'semcheck_stock', ()))) + ' ')\n"))
    for _ in range(3):
        code, outcome = _ask(server, monkeypatch, tmp_path, script, 2)
        assert code == 0 and outcome.captured == 1
    assert marker.read_text().split() == ["0", "16", "16"]  # each child its own copy of the stock (JAX 0.10.2)


def test_a_jax_that_reuses_its_contexts_gets_a_smaller_stock_where_it_makes_them():
    """JAX 0.11 makes contexts in `_create_ir_context` and reuses each up to 10 times in
    `make_ir_context` (jax-ml/jax cec06d11); simulated on the installed JAX."""
    import subprocess
    import sys

    code = ("from jax._src.interpreters import mlir\n"
            "def _create_ir_context():\n"
            "    return plain()\n"
            "plain = mlir.make_ir_context\n"
            "mlir._create_ir_context = _create_ir_context\n"
            "reusing = lambda: mlir._create_ir_context()\n"
            "mlir.make_ir_context = reusing\n"
            "from semcheck.frontends import mlir_contexts\n"
            "mlir_contexts.stock()\n"
            "stock = list(mlir._create_ir_context.semcheck_stock)\n"
            "assert mlir.make_ir_context is reusing and len(stock) == 3\n"
            "got = [mlir.make_ir_context() for _ in range(4)]\n"
            "assert {id(c) for c in got[:3]} == {id(c) for c in stock} and len({id(c) for c in got}) == 4\n"
            "print('ok')\n")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=300).stdout.strip() == "ok"
