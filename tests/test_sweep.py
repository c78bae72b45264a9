"""Sweeps that scale out: `-j N` worker processes and `--executor ray` give the same report
as a serial run, in the same order (the time fields are the only difference), and a task
that dies where it runs is an error Result for its check, never a lost one."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from semcheck import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMES = re.compile(r'"seconds": [0-9.e+-]+')
JOINED_AT = re.compile(r"joined it at [0-9.]+ s")  # auto's note: when the other engines joined

# A model whose load kills the process it runs in: what a segfaulting or OOM-killed worker does.
CRASHES = textwrap.dedent('''\
    import os

    from semcheck.model import ProtocolBuilder


    def model(devices: int):
        os._exit(7)
''')


def json_report(capsys, tmp_path, name, *argv):
    out = tmp_path / f"{name}.json"
    code = cli.main(["verify", *argv, "--format", "json", "-o", str(out), "-q"])
    capsys.readouterr()
    return code, out.read_text()


# auto's note when other engines joined a running search (engines/auto.py); z3's turns are
# slices of CPU time, so which engine ends such a check first depends on the machine
HANDED_OVER = re.compile(r"engine auto: the explicit search looked wide .* so (?:\w+ and )?z3 joined it")


def without_times(text: str) -> str:
    """The report with its times zeroed, and, for a check where auto's z3 joined the search
    (taking turns of CPU time), only what the check decided: what each engine had done by
    then (states, queries, which trace, the first counterexample's kind) depends on the
    machine's speed."""
    data = json.loads(text)
    for k, r in enumerate(data["results"]):
        if any(HANDED_OVER.match(note) for note in r.get("notes", [])):
            data["results"][k] = {key: r.get(key) for key in ("kernel", "file", "devices", "verdict")}
            # The groups are made from the results' findings: where one was decided by
            # whichever engine came first, its witness (and so its group) may differ.
            data.pop("groups", None)
    text = json.dumps(data, indent=2, sort_keys=True)
    return JOINED_AT.sub("joined it at 0 s", TIMES.sub('"seconds": 0', text))


def _seconds_keys(node) -> int:
    if isinstance(node, dict):
        return sum(key == "seconds" for key in node) + sum(_seconds_keys(v) for v in node.values())
    if isinstance(node, list):
        return sum(_seconds_keys(v) for v in node)
    return 0


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """Serial JSON of models/ and of models/ + examples/ at 2 and 4 devices, from the root."""
    out = tmp_path_factory.mktemp("serial")
    old = os.getcwd()
    os.chdir(ROOT)
    try:
        reports = {}
        for name, paths in {"models": ["models/"], "all": ["models/", "examples/"]}.items():
            path, sarif = out / f"{name}.json", out / f"{name}.sarif"
            code = cli.main(["verify", *paths, "--devices", "2,4", "-j", "1", "--format", "json",
                             "-o", str(path), "--sarif", str(sarif), "-q"])
            reports[name] = (code, path.read_text())
            reports[name + ".sarif"] = sarif.read_text()
    finally:
        os.chdir(old)
    return reports


def test_the_serial_report_has_times_to_normalise(serial):
    code, text = serial["all"]
    assert code == 1
    results = json.loads(text)["results"]
    assert {r["file"].split("/")[0] for r in results} == {"models", "examples"}
    # every check has its time, and the pattern that zeroes times matches every time and nothing
    # else (a check auto decided with both engines also has each engine's time)
    assert len(TIMES.findall(text)) == _seconds_keys(json.loads(text)) >= len(results)


def test_the_sarif_of_the_whole_sweep_stays_small(serial):
    """Code flows keep the threads involved, and beyond the fewest devices only the essential
    steps, so each finding stays small however many kernels the sweep has: the largest of
    models/ and examples/ at 2 and 4 devices is 46 KB (a data race of the MoE expert pipeline);
    full code flows were about 140 KB per finding. The whole sweep (532 KB for 66 findings of
    100 kernels) stays a tenth of code scanning's 10 MB upload limit
    (benchmarks/gate.py prints the size of examples/ at 2, 4 and 8 devices)."""
    sarif = json.loads(serial["all.sarif"])
    results = sarif["runs"][0]["results"]
    assert results
    assert max(len(json.dumps(r, separators=(",", ":"))) for r in results) < 64_000
    assert len(serial["all.sarif"].encode()) < 1_000_000


def test_two_jobs_give_the_serial_report_byte_for_byte_but_the_times(serial, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, text = json_report(capsys, tmp_path, "j2", "models/", "examples/", "--devices", "2,4", "-j", "2")
    assert code == serial["all"][0]
    assert without_times(text) == without_times(serial["all"][1])


def test_a_worker_process_that_dies_is_an_error_result_and_loses_no_other(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "crashes.py").write_text(CRASHES)
    (tmp_path / "ring.py").write_text(open(os.path.join(ROOT, "models", "ring_allgather.py")).read())
    code, text = json_report(capsys, tmp_path, "crash", "crashes.py", "ring.py", "--devices", "2,3", "-j", "2")
    assert code == 2
    results = json.loads(text)["results"]
    assert [(r["file"], r["devices"]) for r in results] == [
        ("crashes.py", 2), ("crashes.py", 3), ("ring.py", 2), ("ring.py", 3)]
    for r in results[:2]:  # a model file's os._exit is caught where it is loaded, or kills the worker
        assert r["verdict"] == "error" and ("worker process running it failed" in r["error"] or "os._exit" in r["error"])
    # The checks that shared the broken pool are run again, each in a worker of its own.
    assert [(r["verdict"], r["stats"]["states"]) for r in results[2:]] == [("safe", 17), ("safe", 40)]


def test_with_jax_loaded_workers_come_from_a_clean_forkserver(serial, tmp_path):
    """A process that imported JAX (a test suite, a notebook) must not fork itself: its
    workers are forks of a server that never loaded JAX. Same report."""
    out = tmp_path / "forkserver.json"
    script = textwrap.dedent(f'''
        import sys
        import jax  # noqa: F401
        from semcheck import cli
        from semcheck.run import sweep

        if __name__ == "__main__":
            assert sweep._process_context().get_start_method() == "forkserver"
            sys.exit(cli.main(["verify", "models/", "--devices", "2,4", "-j", "2", "--format", "json",
                               "-o", {str(out)!r}, "-q"]))
    ''')
    (tmp_path / "run.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(tmp_path / "run.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == serial["models"][0], proc.stderr[-2000:]
    assert without_times(out.read_text()) == without_times(serial["models"][1])


@pytest.fixture(scope="module")
def ray_cluster():
    """A real local Ray cluster on this machine, two CPUs, no dashboard."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}})
    yield ray
    ray.shutdown()


def test_ray_gives_the_serial_report_byte_for_byte_but_the_times(serial, ray_cluster, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, text = json_report(capsys, tmp_path, "ray", "models/", "--devices", "2,4", "--executor", "ray")
    assert code == serial["models"][0] == 1
    assert without_times(text) == without_times(serial["models"][1])
    assert ray_cluster.is_initialized()  # the cluster the test started is left to it


def test_a_task_that_kills_its_ray_worker_is_an_error_result(ray_cluster, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "crashes.py").write_text(CRASHES)
    (tmp_path / "ring.py").write_text(open(os.path.join(ROOT, "models", "ring_allgather.py")).read())
    code, text = json_report(capsys, tmp_path, "ray-crash", "crashes.py", "ring.py", "--devices", "2",
                             "--executor", "ray")
    assert code == 2
    crashed, ring = json.loads(text)["results"]
    assert (crashed["file"], crashed["verdict"]) == ("crashes.py", "error")
    assert "the Ray task checking it failed" in crashed["error"] or "os._exit" in crashed["error"]
    assert (ring["file"], ring["verdict"], ring["stats"]["states"]) == ("ring.py", "safe", 17)
