"""Hostile and careless input (issue 17's gate holes, issue 13's): nothing a user's file does
ends semcheck or changes its exit code, bad usage is exit 2 before any work, folder walks
run only kernels, and a gate cannot pass by checking less than it was asked to."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import semcheck
from semcheck import cli
from semcheck.run import expectations
from semcheck.frontends import discover

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(semcheck.__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")


def semcheck_process(*argv, cwd=None, env_extra=None, timeout=120):
    """`python -m semcheck ...` in a process of its own (a hostile file could end this one)."""
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    env.pop("SEMCHECK_DEBUG", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "semcheck", *argv], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return str(path)


SAFE_MODEL = """\
from semcheck.model import ProtocolBuilder


def model(devices):
    p = ProtocolBuilder("{name}", devices=devices, backend="tpu")
    ready = p.semaphore("ready")
    for d in range(devices):
        t = p.thread(d)
        t.signal(ready)
        t.wait(ready, 1)
    return p.build()
"""


# --- model files that try to end the process -----------------------------------------------

ENDINGS = {
    "sys_exit": "import sys\nsys.exit(0)\n",
    "os_exit": "import os\nos._exit(0)\n",
    "raise_system_exit": "raise SystemExit(0)\n",
    "keyboard_interrupt": "raise KeyboardInterrupt\n",
    "exit_in_model": "import sys\n\ndef model(devices):\n    sys.exit(0)\n",
    "os_exit_in_model": "import os\n\ndef model(devices):\n    os._exit(0)\n",
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_model_file_cannot_end_semcheck_or_its_exit_code(tmp_path, ending):
    source = ENDINGS[ending]
    if "def model" not in source:
        source += "\n\ndef model(devices):\n    return None\n"
    hostile = write(tmp_path / f"{ending}.py", source)
    report = tmp_path / "report.json"
    proc = semcheck_process("verify", hostile, os.path.join(MODELS, "circular_wait.py"), "--devices", "2",
                            "--format", "json", "-o", str(report), "-q")
    assert proc.returncode == 2, proc.stderr  # the hostile file is an error, beside a deadlock
    doc = json.loads(report.read_text())
    verdicts = {r["kernel"]: r["verdict"] for r in doc["results"]}
    assert verdicts == {ending: "error", "circular_wait": "violation"}
    [error] = [r for r in doc["results"] if r["verdict"] == "error"]
    assert error["line"] > 0  # the line of the file that tried to end the process
    assert "exit" in error["error"].lower() or "KeyboardInterrupt" in error["error"]


def test_a_model_file_that_forks_is_checked_once(tmp_path):
    forking = write(tmp_path / "forking.py", "import os\nos.fork()\n" + SAFE_MODEL.format(name="forking"))
    proc = semcheck_process("verify", forking, "--devices", "2", "--format", "json", "-q")
    assert proc.returncode == 0, proc.stderr
    [result] = json.loads(proc.stdout)["results"]  # one report: no second semcheck went on
    assert result["verdict"] == "safe"


def test_a_model_file_that_hangs_is_stopped(tmp_path):
    from semcheck.frontends import LoadError, model_file

    hanging = write(tmp_path / "hanging.py", "import time\ntime.sleep(60)\n" + SAFE_MODEL.format(name="h"))
    with pytest.raises(LoadError, match="did not finish within 1 s"):
        model_file.load(hanging, 2, timeout=1)


def test_a_model_files_assumptions_still_count(tmp_path):
    from semcheck.frontends import load

    path = write(tmp_path / "bounded.py", """\
        import semcheck
        from semcheck.model import ProtocolBuilder

        semcheck.assume("n", 1, 2)


        def model(devices):
            p = ProtocolBuilder("bounded", devices=devices, backend="tpu")
            p.input("n", 0, 100)
            for d in range(devices):
                p.thread(d)
            return p.build()
    """)
    [protocol] = load(path, 2)
    assert [(i.name, i.lo, i.hi) for i in protocol.inputs] == [("n", 1, 2)]


# --- encodings -------------------------------------------------------------------------------


def test_binary_latin1_and_bom_files_give_one_error_each_and_the_rest_is_checked(tmp_path, capsys):
    (tmp_path / "binary.py").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00garbage")
    (tmp_path / "latin1.py").write_bytes(b"# caf\xe9\n" + SAFE_MODEL.format(name="latin1").encode())
    (tmp_path / "latin1_declared.py").write_bytes(
        b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + SAFE_MODEL.format(name="latin1_declared").encode())
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbf" + SAFE_MODEL.format(name="bom").encode())
    code, out, err = run(capsys, "verify", str(tmp_path), "--devices", "2,4", "--format", "json", "-q")
    assert code == 2, err
    results = json.loads(out)["results"]
    by_file = {}
    for r in results:
        by_file.setdefault(os.path.basename(r["file"]), []).append(r)
    assert sorted((f, [r["verdict"] for r in rs]) for f, rs in by_file.items()) == [
        ("binary.py", ["error"]),
        ("bom.py", ["safe", "safe"]),
        ("latin1.py", ["error"]),
        ("latin1_declared.py", ["safe", "safe"]),
    ]
    assert "null bytes" in by_file["binary.py"][0]["error"]
    assert "not valid UTF-8" in by_file["latin1.py"][0]["error"]


# --- usage errors before any work ------------------------------------------------------------

BAD_ARGUMENTS = {
    "timeout_nan": (["--timeout", "nan"], "--timeout"),
    "timeout_negative": (["--timeout", "-1"], "--timeout"),
    "timeout_zero": (["--timeout", "0"], "--timeout"),
    "max_states_negative": (["--max-states", "-5"], "--max-states"),
    "max_states_zero": (["--max-states", "0"], "--max-states"),
    "max_memory_nan": (["--max-memory", "nan"], "--max-memory"),
    "max_memory_negative": (["--max-memory", "-1"], "--max-memory"),
    "unroll_negative": (["--unroll", "-1"], "--unroll"),
    "invocations_zero": (["--invocations", "0"], "--invocations"),
    "trace_steps_negative": (["--max-trace-steps", "-2"], "--max-trace-steps"),
    "empty_assume_range": (["--assume", "n=5..3"], "range is empty"),
    "devices_with_an_empty_part": (["--devices", "2,,4"], "'2,,4'"),
    "devices_with_a_trailing_comma": (["--devices", "2,4,"], "'2,4,'"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_bad_arguments_are_usage_errors(capsys, case):
    extra, message = BAD_ARGUMENTS[case]
    with pytest.raises(SystemExit) as exc:
        cli.main(["verify", os.path.join(MODELS, "ring_allgather.py"), "--devices", "2", *extra])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == ""
    assert message in err


BAD_ENVIRONMENT = {
    "SEMCHECK_TIMEOUT": ["abc", "nan", "-1"],
    "SEMCHECK_MAX_STATES": ["-5", "1.5", "many"],
    "SEMCHECK_MAX_MEMORY_MB": ["x", "0"],
    "SEMCHECK_CAPTURE_TIMEOUT": ["soon"],
    "SEMCHECK_CAPTURE_CACHE": [os.path.join(MODELS, "ring_allgather.py", "below_a_file"),
                               os.path.join(MODELS, "ring_allgather.py")],
}


@pytest.mark.parametrize("name,value", [(n, v) for n, vs in sorted(BAD_ENVIRONMENT.items()) for v in vs])
def test_bad_environment_values_are_usage_errors(capsys, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    code, out, err = run(capsys, "verify", os.path.join(MODELS, "ring_allgather.py"), "--devices", "2")
    assert code == 2 and out == ""
    assert f"{name}={value!r}" in err and "internal error" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_unwritable_output_paths_are_usage_errors_before_any_work(tmp_path, capsys):
    model = os.path.join(MODELS, "ring_allgather.py")
    for argv, message in [
        (["-o", str(tmp_path / "no" / "such" / "out.json")], "does not exist"),
        (["-o", str(tmp_path)], "is a folder"),
        (["--graph", str(tmp_path / "missing" / "cex.svg")], "does not exist"),
        (["--summary", str(tmp_path / "missing" / "summary.md")], "does not exist"),
        (["--sarif", str(tmp_path / "missing" / "out.sarif")], "does not exist"),
    ]:
        code, out, err = run(capsys, "verify", model, "--devices", "2", *argv)
        assert (code, out) == (2, ""), err
        assert message in err and "internal error" not in err
        assert len(err.strip().splitlines()) == 1, err


def test_the_job_summary_file_is_checked_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "missing" / "summary.md"))
    code, out, err = run(capsys, "verify", os.path.join(MODELS, "ring_allgather.py"), "--devices", "2")
    assert (code, out) == (2, "") and "GITHUB_STEP_SUMMARY" in err and "does not exist" in err


# --- named pipes: an error, never a wait for a writer that does not come ---------------------


def test_a_fifo_given_as_the_path_is_a_usage_error(tmp_path, capsys):
    pipe = tmp_path / "kernel.py"
    os.mkfifo(pipe)
    code, out, err = run(capsys, "verify", str(pipe), "--devices", "2")
    assert (code, out) == (2, "")
    assert err.strip() == f"semcheck: error: {pipe} is a named pipe (FIFO), not a kernel script, model file or folder"


def test_a_fifo_in_a_folder_is_one_error_and_the_rest_is_checked(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.py")
    write(tmp_path / "ok.py", SAFE_MODEL.format(name="ok"))
    code, out, err = run(capsys, "verify", str(tmp_path), "--devices", "2", "--format", "json", "-q")
    results = {r["kernel"]: r for r in json.loads(out)["results"]}
    assert code == 2 and results["ok"]["verdict"] == "safe"
    assert results["pipe"]["verdict"] == "error" and "is not a regular file (it is a named pipe" in results["pipe"]["error"]


def test_an_output_fifo_nothing_reads_is_a_usage_error(tmp_path, capsys):
    os.mkfifo(tmp_path / "out.json")
    code, out, err = run(capsys, "verify", os.path.join(MODELS, "ring_allgather.py"), "--devices", "2",
                         "-o", str(tmp_path / "out.json"))
    assert (code, out) == (2, "") and "is a named pipe (FIFO) that nothing reads" in err


# --- bad model IR: the builder says which line, before any engine ---------------------------

BAD_MODEL_LINES = {
    "negative_shape": ('p.buffer("b", (-4, 8))', "an extent of the shape of buffer 'b' must be at least 0, got -4"),
    "float_amount": ("p.thread(0).signal(ready, 1.5)", "signal: the amount must be an int"),
    "string_device": ('p.thread(0).signal(ready, device="left")', "signal: the device must be an int"),
    "negative_semaphore_array": ('p.semaphore("s", size=-1)', "the size of semaphore 's' must be at least 1, got -1"),
    "float_wait": ("p.thread(0).wait(ready, 0.5)", "wait: the amount must be an int"),
    "thread_outside": ("p.thread(5)", "thread (device 5, core 0) lies outside the protocol's 2 device(s)"),
    "string_index": ('p.thread(0).signal(ready["x"])', "the index of semaphore 'ready' must be an int"),
    "bad_dma_side": ('p.thread(0).dma_wait(ready, 4, side="both")', "dma_wait: side must be 'send' or 'recv'"),
    "negative_region_size": ('p.buffer("b", (4,)).region(0, size=(-1,))', "a size of a region of buffer 'b' must be at least 0"),
    "bool_amount": ("p.thread(0).signal(ready, True)", "signal: the amount must be an int"),
    "float_devices": ('ProtocolBuilder("x", devices=2.5)', "the number of devices must be a whole number"),
}


@pytest.mark.parametrize("case", sorted(BAD_MODEL_LINES))
def test_bad_model_ir_is_one_error_at_the_models_line(tmp_path, capsys, case):
    line, message = BAD_MODEL_LINES[case]
    path = write(tmp_path / "bad.py", f"""\
        from semcheck.model import ProtocolBuilder


        def model(devices):
            p = ProtocolBuilder("bad", devices=devices, backend="tpu")
            ready = p.semaphore("ready")
            {line}
            for d in range(devices):
                p.thread(d).signal(ready)
                p.thread(d).wait(ready)
            return p.build()
    """)
    code, out, err = run(capsys, "verify", path, "--devices", "2")
    assert code == 2 and "internal error" not in err
    [verdict] = [text for text in out.splitlines() if text.startswith("ERROR")]
    assert verdict.startswith(f"ERROR: bad [2 devices] {path}:7: bad model: {message}"), verdict


def test_a_missing_path_is_one_usage_error(capsys):
    code, out, err = run(capsys, "verify", "no/such.py", os.path.join(MODELS, "ring_allgather.py"))
    assert (code, out) == (2, "")
    assert err.count("no such file or folder: no/such.py") == 1


def test_an_empty_input_range_in_a_model_is_an_error_not_safe(tmp_path, capsys):
    path = write(tmp_path / "empty_range.py", """\
        from semcheck.model import ProtocolBuilder


        def model(devices):
            p = ProtocolBuilder("empty_range", devices=devices, backend="tpu")
            p.input("n", 5, 3)
            for d in range(devices):
                p.thread(d)
            return p.build()
    """)
    code, out, _ = run(capsys, "verify", path, "--devices", "2", "--format", "json", "-q")
    [r] = json.loads(out)["results"]
    assert (code, r["verdict"]) == (2, "error")
    assert "input n" in r["error"] and "empty" in r["error"] and r["line"] == 6


# --- folder walks ----------------------------------------------------------------------------


def test_folder_walks_skip_tooling_environments_and_git_ignored_files(tmp_path, capsys):
    assert shutil.which("git"), "git is needed to test that git-ignored files are skipped"
    trap = "raise SystemExit('semcheck ran a file it should have skipped')\n"
    for name in ["setup.py", "noxfile.py", "conftest.py", "docs/conf.py", "venv/lib/a.py", ".venv/b.py",
                 "node_modules/pkg/c.py", "build/lib/d.py", "dist/e.py", ".hidden/f.py", "generated/g.py",
                 "test_kernel.py", "_private.py", "myenv/h.py"]:
        write(tmp_path / name, trap)
    (tmp_path / "myenv" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / ".gitignore").write_text("generated/\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    write(tmp_path / "kernels" / "ring.py", SAFE_MODEL.format(name="ring"))
    assert discover([str(tmp_path)]) == [str(tmp_path / "kernels" / "ring.py")]
    code, out, err = run(capsys, "verify", str(tmp_path), "--devices", "2")
    assert code == 0, out + err
    [line] = [line for line in err.splitlines() if "skipped" in line]
    for word in ["setup.py", "conftest.py", "venv/", "node_modules/", "build/", "git-ignored", "test_kernel.py"]:
        assert word in line
    # -q: the skipped line is left out (it was printed: -q only silenced progress)
    code, out, err = run(capsys, "verify", str(tmp_path), "--devices", "2", "-q")
    assert (code, err) == (0, ""), out + err


def test_quiet_still_says_why_nothing_was_checked(tmp_path, capsys):
    # the skipped line is silenced by -q, but not where it is why nothing is left to check
    write(tmp_path / "setup.py", "raise SystemExit('semcheck ran a file it should have skipped')\n")
    write(tmp_path / "test_kernel.py", "raise SystemExit('semcheck ran a file it should have skipped')\n")
    code, out, err = run(capsys, "verify", str(tmp_path), "--devices", "2", "-q")
    assert (code, out) == (2, ""), out + err
    assert err.rstrip().endswith(f"semcheck: error: nothing to check: no kernel scripts or models in {tmp_path}"), err


def test_a_named_file_is_taken_even_where_a_walk_would_skip_it(tmp_path):
    path = write(tmp_path / "venv" / "model.py", SAFE_MODEL.format(name="named"))
    assert discover([path]) == [path]


# --- directives ------------------------------------------------------------------------------


@pytest.mark.parametrize("typo,meant", [
    ("# semcheck: expected deadlock", "# semcheck: expect deadlock"),
    ("# semcheck expect deadlock", "# semcheck: expect deadlock"),
    ("# semcheck: exepct deadlock", "# semcheck: expect deadlock"),
    ("# semcheck: deadlock", "# semcheck: expect deadlock"),
])
def test_near_miss_directives_are_warned_with_did_you_mean(tmp_path, capsys, typo, meant):
    source = open(os.path.join(MODELS, "circular_wait.py"), encoding="utf-8").read()
    path = tmp_path / "circular_wait.py"
    path.write_text(source.replace("# semcheck: expect deadlock", typo))
    [miss] = expectations.near_misses(str(path))
    assert miss.suggestion == meant
    code, _, err = run(capsys, "verify", str(path), "--devices", "2", "--expectations", "-q")
    assert code == 1  # the typo declares nothing, so the deadlock is unexpected
    assert f"did you mean {meant!r}" in err


def test_quiet_keeps_the_near_miss_warning_where_it_is_the_only_sign_the_gate_is_wrong(tmp_path, capsys):
    """A kernel fixed since its bug was declared, with the declaration misspelt: ignored, the
    check is judged as declaring nothing, and the gate passes where the declaration would
    have failed it (the finding is gone). -q, as the pre-commit hook and CI gates run,
    still prints the warning: it is the only sign; and -q's help says so."""
    source = open(os.path.join(MODELS, "ring_allgather.py"), encoding="utf-8").read()
    declared = tmp_path / "ring_allgather.py"
    declared.write_text(source.replace("# semcheck: expect safe", "# semcheck: expect unsatisfied_wait"))
    code, _, err = run(capsys, "verify", str(declared), "--devices", "2", "--expectations", "-q")
    assert code == 1, err  # declared, not found: the gate fails
    misspelt = tmp_path / "ring_allgather_misspelt.py"
    misspelt.write_text(source.replace("# semcheck: expect safe", "# semcheck expect unsatisfied_wait"))
    code, out, err = run(capsys, "verify", str(misspelt), "--devices", "2", "--expectations", "-q")
    assert code == 0, err
    assert err.splitlines() == [f"semcheck: warning: {misspelt}:22: ignored '# semcheck expect unsatisfied_wait': "
                                "did you mean '# semcheck: expect unsatisfied_wait'?"]
    with pytest.raises(SystemExit):
        cli.main(["verify", "--help"])
    usage = " ".join(capsys.readouterr().out.split())
    assert "warnings stay" in usage, usage


def test_comments_that_are_not_directives_are_left_alone(tmp_path):
    path = write(tmp_path / "k.py", """\
        # semcheck checks this file
        # semcheck: expect deadlock
        x = "# semcheck: expected deadlock"  # in a string, not a comment
    """)
    assert expectations.near_misses(path) == []


# --- kernel scripts: the capture subprocess ---------------------------------------------------

KERNEL_SCRIPT = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

DEVICES = jax.devices(){devices}
mesh = Mesh(np.array(DEVICES), ("x",), axis_types=(AxisType.Auto,))
x = jnp.ones((mesh.size * 8, 128), jnp.float32)


def handshake_kernel(x_ref, o_ref, ready):
    right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
    pl.semaphore_signal(ready, 1, device_id=(right,))
    pl.semaphore_wait(ready, 1)
    o_ref[...] = x_ref[...]


def per_device(block):
    return pl.pallas_call(handshake_kernel, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR])(block)


def main():
    f = jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    return jax.jit(f)(x)
"""


def kernel_script(tmp_path, before_main: str = "", *, name="kernel.py", devices="", prefix="") -> str:
    body = prefix + KERNEL_SCRIPT.format(devices=devices) + textwrap.dedent(before_main)
    body += '\n\nif __name__ == "__main__":\n    main()\n'
    return write(tmp_path / name, body)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its reaper is gone for our purpose
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:  # gone between the kill and the read: ESRCH comes from read(), not open()
        return False


def test_the_capture_child_does_not_import_a_jax_py_from_the_working_directory(tmp_path):
    script = kernel_script(tmp_path / "kernels")
    shadow = tmp_path / "cwd"
    write(shadow / "jax.py", "raise SystemExit('imported the jax.py of the working directory')\n")
    proc = semcheck_process("verify", script, "--devices", "2", "--format", "json", "-q", cwd=shadow)
    [result] = json.loads(proc.stdout)["results"]
    assert (proc.returncode, result["kernel"], result["verdict"]) == (0, "handshake_kernel", "safe"), proc.stderr


def test_a_crashing_script_is_named_without_a_raw_traceback(tmp_path):
    script = kernel_script(tmp_path, prefix=(
        "import os, sys, traceback\n"
        "print(''.join(traceback.format_stack()), file=sys.stderr)\n"
        "os._exit(3)\n"))
    proc = semcheck_process("verify", script, "--devices", "2", "--format", "json", "-q")
    [result] = json.loads(proc.stdout)["results"]
    assert result["verdict"] == "error"
    assert f"the script called os._exit(3) at {script}:3" in result["error"] or \
        "called os._exit(3) at" in result["error"] and result["line"] == 3
    assert "Traceback" not in result["error"] and 'File "' not in result["error"]


def test_a_script_killed_by_a_signal_says_so_without_a_traceback(tmp_path):
    script = kernel_script(tmp_path, prefix=(
        "import os, signal, sys\n"
        "print('Traceback (most recent call last):\\n  File \"x.py\", line 1', file=sys.stderr)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"))
    proc = semcheck_process("verify", script, "--devices", "2", "--format", "json", "-q")
    [result] = json.loads(proc.stdout)["results"]
    assert result["verdict"] == "error" and "killed by SIGKILL" in result["error"]
    assert "Traceback" not in result["error"]


def test_a_background_child_of_the_script_does_not_hang_semcheck_and_is_killed(tmp_path):
    marker = tmp_path / "sleeper.pid"
    script = kernel_script(tmp_path, prefix=(
        "import subprocess\n"
        f"sleeper = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(marker)!r}, 'w').write(str(sleeper.pid))\n"))
    proc = semcheck_process("verify", script, "--devices", "2", "-q", timeout=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not pid_alive(int(marker.read_text()))


def test_the_script_gets_no_stdin(tmp_path):
    script = kernel_script(tmp_path, prefix="import sys\nassert sys.stdin.read() == ''\n")
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    with open(tmp_path / "out.txt", "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "semcheck", "verify", script, "--devices", "2", "-q"],
                                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            code = proc.wait(timeout=120)  # semcheck's stdin stays open (a terminal would) until it ends
        finally:
            proc.kill()
            proc.stdin.close()
    assert code == 0, (tmp_path / "out.txt").read_text()


def test_sigterm_kills_the_capture_child_and_what_the_script_started(tmp_path):
    import signal
    import time

    marker = tmp_path / "script.pid"
    script = kernel_script(tmp_path, prefix=(
        "import os, time\n"
        f"open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(300)\n"))
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "semcheck", "verify", script, "--devices", "2", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    deadline = time.monotonic() + 120
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    script_pid = int(marker.read_text())
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "interrupted (SIGTERM)" in err
    time.sleep(0.2)
    assert not pid_alive(script_pid)


def test_a_kernel_script_with_a_model_function_is_checked_as_a_kernel_script(tmp_path):
    script = kernel_script(tmp_path, "\n\ndef model(devices):\n    return None\n")
    proc = semcheck_process("verify", script, "--devices", "2", "--format", "json", "-q")
    [result] = json.loads(proc.stdout)["results"]
    assert (result["kernel"], result["verdict"]) == ("handshake_kernel", "safe"), proc.stderr
    assert any("checked as a kernel script" in note for note in result["notes"])


def test_a_mesh_smaller_than_devices_fails_the_gate(tmp_path):
    script = kernel_script(tmp_path, devices="[:2]")
    proc = semcheck_process("verify", script, "--devices", "2,4", "--format", "json", "--expectations", "-q")
    results = json.loads(proc.stdout)["results"]
    assert proc.returncode == 1, proc.stderr
    at_2, at_4 = results  # both checked 2 devices: a result says what was checked
    assert (at_2["devices"], at_4["devices"]) == (2, 2)
    assert at_2["violations"] == [] and at_2["expectation"]["matched"] is True
    [warning] = at_4["violations"]
    assert (warning["kind"], warning["severity"]) == ("mesh_smaller_than_devices", "warning")
    assert "the check ran with 4" in warning["message"]
    assert at_4["verdict"] == "safe"  # the warning is not a bug in the kernel...
    assert at_4["expectation"]["matched"] is False  # ...but the gate did not get what it asked for
    declared = tmp_path / "declared.py"
    declared.write_text("# semcheck: expect mesh_smaller_than_devices\n" + open(script).read())
    proc = semcheck_process("verify", str(declared), "--devices", "4", "--expectations", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # declared, so the gate accepts it


def test_a_named_file_that_compiles_no_kernel_is_skipped_with_a_note(tmp_path):
    helper = write(tmp_path / "helpers.py", "import jax\n\n\ndef double(x):\n    return 2 * x\n")
    model = os.path.join(MODELS, "ring_allgather.py")
    proc = semcheck_process("verify", helper, model, "--devices", "2", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert [r["kernel"] for r in json.loads(proc.stdout)["results"]] == ["ring_allgather"]
    assert "1 file that compiles no Pallas kernel (helpers.py)" in proc.stderr
    quiet = semcheck_process("verify", helper, model, "--devices", "2", "--format", "json", "-q")
    assert (quiet.returncode, quiet.stderr) == (0, "")  # -q leaves the skipped line out
    alone = semcheck_process("verify", helper, "--devices", "2", "-q")
    assert alone.returncode == 2 and "nothing to check" in alone.stderr
    # A file that declares a verdict is meant to hold a kernel: compiling none is an error.
    declared = write(tmp_path / "declared.py", "# semcheck: expect deadlock\nimport jax\n")
    proc = semcheck_process("verify", declared, "--devices", "2", "--format", "json", "-q")
    [result] = json.loads(proc.stdout)["results"]
    assert (proc.returncode, result["verdict"]) == (2, "error")


# --- interrupts ------------------------------------------------------------------------------


def _as_from_a_terminal() -> None:
    """Ctrl-C's default action in the child, as a terminal user's semcheck has it. A suite run
    as a background job of a non-interactive shell (`.ci/run &`) inherits SIGINT ignored, and
    Python then installs no KeyboardInterrupt handler: a background job must not see Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_an_interrupt_keeps_the_finished_results_marked_partial(tmp_path, signame):
    import signal
    import time

    report = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    # ring_allgather at 2 devices takes milliseconds; unreduced at 16 the explicit search
    # runs for minutes (auto's z3 proves it safe in seconds, which on a loaded machine ended
    # the run before the signal was sent).
    proc = subprocess.Popen(
        [sys.executable, "-m", "semcheck", "verify", os.path.join(MODELS, "ring_allgather.py"),
         "--devices", "2,16", "--no-reduction", "--no-split", "--engine", "explicit",
         "--format", "json", "-o", str(report)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
        preexec_fn=_as_from_a_terminal)
    deadline = time.monotonic() + 120
    seen = ""
    while "[16 devices" not in seen and time.monotonic() < deadline:  # the progress line of the second check
        seen += proc.stderr.read(1)
    proc.send_signal(getattr(signal, signame))
    # generous: it only guards against a hang (a loaded CI machine once needed more than 60 s
    # to stop the search, free its states and write both reports)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + getattr(signal, signame), err
    [result] = json.loads(report.read_text())["results"]
    assert (result["devices"], result["verdict"]) == (2, "safe")
    assert any(note.startswith("partial run: semcheck was interrupted") for note in result["notes"])
    assert "SAFE: ring_allgather [2 devices" in out  # the text report of what finished


def test_a_model_child_ends_when_semcheck_is_killed(tmp_path):
    import signal
    import time

    marker = tmp_path / "child.pid"
    path = write(tmp_path / "sleeper.py", (
        "import os, time\n"
        f"open({str(marker)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(300)\n\n\ndef model(devices):\n    pass\n"))
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "semcheck", "verify", path, "--devices", "2", "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(marker.read_text())
    proc.send_signal(signal.SIGKILL)  # no handler runs: the child must notice on its own
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(child)


# --- issue 30: signals during -j sweeps, daemons, a killed semcheck --------------------------

# A kernel script that starts a daemon (a session of its own, out of reach of a kill of the
# script's session), records its own pid and the daemon's, says it has started, and sleeps.
SLEEPING_SCRIPT = """\
import os, subprocess, time
daemon = subprocess.Popen(["sleep", "600"], start_new_session=True)
with open(__file__ + ".pids", "w") as f:
    f.write(f"{os.getpid()} {daemon.pid}")
os.replace(__file__ + ".pids", __file__ + ".started")
time.sleep(600)
"""


def _recorded_pids(folder, names) -> list[int]:
    return [int(p) for name in names for p in (folder / f"{name}.started").read_text().split()]


def _descendants(pid: int) -> list[int]:
    from semcheck.frontends.processes import descendants

    return descendants(pid)


def _wait_until_gone(pids, seconds=15.0) -> list[int]:
    import time

    deadline = time.monotonic() + seconds
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


def _sweep_of_sleepers(tmp_path, *extra):
    import time

    names = ["a.py", "b.py"]
    for name in names:
        kernel_script(tmp_path, prefix=SLEEPING_SCRIPT, name=name)
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "semcheck", "verify", str(tmp_path), "--devices", "2", "-j", "2",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                            preexec_fn=_as_from_a_terminal)
    deadline = time.monotonic() + 180
    while not all((tmp_path / f"{n}.started").exists() for n in names) and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc, _recorded_pids(tmp_path, names) + _descendants(proc.pid)


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_stops_a_sweep_with_jobs_at_once_and_leaves_nothing(tmp_path, signame):
    """Issue 30: with -j 2 a SIGTERM used to wait for the workers' captures (minutes); now
    the workers, the capture children, the scripts and the daemons they started all end,
    and the exit code is the signal's."""
    import signal

    proc, started = _sweep_of_sleepers(tmp_path)
    proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=120)  # a hang guard only: the scripts sleep 600 s
    assert proc.returncode == 128 + getattr(signal, signame), err
    name = "Ctrl-C" if signame == "SIGINT" else signame
    assert err.strip().splitlines()[-1] == f"semcheck: interrupted ({name}) before any check finished"
    assert _wait_until_gone(started) == []


def test_an_interrupted_pool_ends_its_thread_before_semcheck_exits():
    """The CI failure of 2026-12-07: after SIGHUP a sweep's last line was CPython 3.11's
    "OSError: [Errno 9] Bad file descriptor", printed by its pools' exit hook, which writes to
    a pool thread's wake-up pipe without a lock while that thread, seeing its workers killed,
    closes it. An interrupt now returns only once that thread has ended (and the workers)."""
    import multiprocessing
    import time
    from concurrent.futures import ProcessPoolExecutor

    from semcheck.run.sweep import _stopped_on_interrupt

    pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("fork"))
    with pytest.raises(KeyboardInterrupt):
        with _stopped_on_interrupt(pool) as workers:
            for _ in range(2):
                workers.submit(time.sleep, 600)
            while len(pool._processes) < 2:
                time.sleep(0.01)
            manager, started = pool._executor_manager_thread, list(pool._processes.values())
            raise KeyboardInterrupt
    assert not manager.is_alive()
    assert not any(worker.is_alive() for worker in started)


def test_a_killed_sweep_leaves_no_worker_capture_or_daemon_behind(tmp_path):
    """SIGKILL: no handler of semcheck runs; the workers notice their parent is gone, and the
    capture server its owner, and each ends what it ran."""
    import signal

    proc, started = _sweep_of_sleepers(tmp_path)
    assert len(started) > 4  # the scripts, their daemons, the workers (and the capture server)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=120)
    assert _wait_until_gone(started) == []


def test_a_daemon_the_script_started_does_not_outlive_semcheck(tmp_path):
    marker = tmp_path / "daemon.pid"
    script = kernel_script(tmp_path, prefix=(
        "import subprocess\n"
        "daemon = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        f"open({str(marker)!r}, 'w').write(str(daemon.pid))\n"))
    proc = semcheck_process("verify", script, "--devices", "2", "-q", timeout=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _wait_until_gone([int(marker.read_text())]) == []


def test_a_script_that_exits_0_before_its_kernel_says_so(tmp_path):
    script = kernel_script(tmp_path, prefix="import sys\nsys.exit(0)\n")
    proc = semcheck_process("verify", script, "--devices", "2", "--format", "json", "-q")
    [result] = json.loads(proc.stdout)["results"]
    assert (proc.returncode, result["verdict"], result["line"]) == (2, "error", 2)
    assert result["error"].startswith("the script exited with sys.exit(0) before any Pallas kernel was compiled")
    assert "nothing to check" not in proc.stderr


def test_a_violation_before_the_lowering_stops_is_a_violation(tmp_path):
    """Issue 30's MoE mutants: a hang found in what semcheck lowered, before a DMA wait
    whose size depends on data stops it, is a violation (exit 1), the stop noted."""
    source = open(os.path.join(ROOT, "examples", "tpu", "moe_dispatch_combine.py"), encoding="utf-8").read()
    signal_line = "            pl.semaphore_signal(barrier, 1, device_id=(d,))\n"
    assert signal_line in source
    mutant = write(tmp_path / "moe_mutant.py", source.replace(signal_line, "            pass\n", 1))
    proc = semcheck_process("verify", mutant, "--devices", "2", "--format", "json", "-q", timeout=600)
    [result] = json.loads(proc.stdout)["results"]
    assert (proc.returncode, result["verdict"]) == (1, "violation"), proc.stderr
    assert "unsatisfied_wait" in {v["kind"] for v in result["violations"]}
    assert any("lowering stopped at" in n and "it stopped there because dma_wait" in n for n in result["notes"])


def test_the_builder_takes_any_whole_number_and_keeps_what_it_was_given():
    """numpy integers (a model computing ids with numpy) are whole numbers; what the builder
    records is a plain int, so the protocol is the one built from ints."""
    import numpy as np

    from semcheck.model import ModelError, ProtocolBuilder

    def build(number):
        p = ProtocolBuilder("n", devices=number(2))
        ready = p.semaphore("ready", size=number(2))
        t = p.thread(number(1))
        t.signal(ready[number(1)], number(3), device=number(0))
        t.wait(ready[number(1)], number(3))
        return p.build()

    assert build(np.int64) == build(int)
    with pytest.raises(ModelError, match="the number of devices must be a whole number, got True"):
        ProtocolBuilder("b", devices=True)


def test_killing_a_tree_returns_once_its_processes_have_exited_and_a_zombie_counts_as_exited():
    """kill_tree tells its caller the tree is gone: it waits for each killed process to exit
    (a SIGKILL takes effect when its target next runs, which on a loaded machine is later;
    a loaded test run once found a capture still running after the kill returned). A zombie has
    exited: it holds nothing but its entry until its parent reaps it."""
    import subprocess
    from semcheck.frontends.processes import kill_tree, running

    sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
    assert running(sleeper.pid)
    kill_tree(sleeper.pid)
    assert not running(sleeper.pid)
    assert os.waitpid(sleeper.pid, os.WNOHANG)[0] == sleeper.pid  # it was a zombie, not reaped
    sleeper.returncode = -9
    assert not running(sleeper.pid)  # reaped: gone
