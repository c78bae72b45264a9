"""What a kernel author meets on a first run: the messages of the paths a new user takes
(an interrupted run, a script with no kernel, a primitive semcheck does not model, a gate's
list of mismatches, the help), each worded so that it needs no knowledge of semcheck."""

import json
import os
import shutil

import pytest

from semcheck import cli
from semcheck.cli import command
from semcheck.ir import Loc
from semcheck.kinds import Kind
from semcheck.report import text
from semcheck.result import Result, Stats, Verdict
from tests.test_hostile_input import semcheck_process, write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "ring_allgather.py")
RING_PERMUTE = os.path.join(ROOT, "examples", "tpu", "ring_permute.py")


def _interrupted_after_the_first_check(monkeypatch):
    real = command.check_paths

    def checks(*args, **kwargs):
        results = real(*args, **kwargs)
        yield next(results)
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "check_paths", checks)


PARTIAL = ("PARTIAL: semcheck was interrupted (Ctrl-C) after 1 check(s) finished; "
           "the checks after them were not run")


def test_an_interrupted_text_report_says_in_itself_that_it_is_partial(capsys, monkeypatch, tmp_path):
    # The stderr line goes to the terminal; the report alone (piped, written with -o, or
    # scrolled) said nothing of the checks that never ran, and read as a whole run.
    _interrupted_after_the_first_check(monkeypatch)
    code = cli.main(["verify", MODEL, "--devices", "2,4", "-q"])
    out = capsys.readouterr().out
    assert code == 130
    assert out.startswith("SAFE: ring_allgather [2 devices")
    assert out.splitlines()[-1] == PARTIAL
    report = tmp_path / "report.txt"
    assert cli.main(["verify", MODEL, "--devices", "2,4", "-q", "-o", str(report)]) == 130
    assert report.read_text().splitlines()[-1] == PARTIAL
    # json keeps the partial-run note in every result, and no line of prose after it
    assert cli.main(["verify", MODEL, "--devices", "2,4", "-q", "--format", "json"]) == 130
    [result] = json.loads(capsys.readouterr().out)["results"]
    assert any(note.startswith("partial run:") for note in result["notes"])


def test_a_script_that_compiles_no_kernel_is_explained(tmp_path):
    script = write(tmp_path / "no_kernel.py", "import jax.numpy as jnp\nprint(jnp.ones(3).sum())\n")
    proc = semcheck_process("verify", script, "--devices", "2")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    # one error and its hint, last: no "skipped" line about declared expectations before it
    assert lines[-2] == (f"semcheck: error: nothing to check: {script} ran with 2 devices but "
                         "compiled no Pallas kernel")
    assert lines[-1].startswith("  hint: semcheck checks the kernels a script compiles when run as "
                                "`python FILE` (pl.pallas_call, pl.kernel, pl.core_map, plgpu.kernel)")
    assert not any("skipped" in line for line in lines)


def test_an_unmodelled_effectful_primitive_is_named_with_its_effect_not_an_object_address(tmp_path):
    source = open(RING_PERMUTE).read().replace("# semcheck: expect safe\n", "")
    source = source.replace("    copy.wait()\n", "    copy.wait()\n"
                            "    pltpu.matmul_push_rhs(jnp.zeros((128, 128), jnp.float32), 0, 0)\n", 1)
    script = write(tmp_path / "mxu.py", source)
    line = source.splitlines().index("    pltpu.matmul_push_rhs(jnp.zeros((128, 128), jnp.float32), 0, 0)") + 1
    proc = semcheck_process("verify", script, "--devices", "2", "--format", "json", "-q")
    assert proc.returncode == 2, proc.stderr
    [result] = json.loads(proc.stdout)["results"]
    assert result["verdict"] == "error"
    assert result["error"].startswith(
        "matmul_push_rhs: semcheck has no model of this effectful primitive (effects: MXUEffect)")
    assert result["line"] == line  # the kernel's own line, not JAX's


def test_an_error_with_no_known_line_names_the_file_without_line_0():
    r = Result("script", "kernels/script.py", 0, "tpu", "tpu", 2, 1, "", Verdict.ERROR, [], Stats(0, 0, 0.0),
               error="running kernels/script.py with 2 devices ended (killed by SIGABRT)")
    assert text.verdict_line(r).startswith("ERROR: script [2 devices] kernels/script.py: running")
    assert "script.py:0" not in text.render([r, r])
    assert text.verdict_line(Result("k", "a.py", 7, "tpu", "tpu", 2, 1, "", Verdict.ERROR, [], Stats(0, 0, 0.0),
                                    error="x")).startswith("ERROR: k [2 devices] a.py:7: x")
    assert Loc("a.py", 0).line == 0  # what a LoadError without a line carries


def test_the_list_of_checks_not_as_declared_names_files_as_the_report_does(capsys, monkeypatch, tmp_path):
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    shutil.copy(MODEL, kernels / "ring.py")
    (kernels / "ring.py").write_text("# semcheck: expect deadlock\n" + (kernels / "ring.py").read_text()
                                     .replace("# semcheck: expect safe\n", ""))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["verify", "kernels/", "--devices", "2", "--expectations", "-q"]) == 1
    err = capsys.readouterr().err
    assert "  kernels/ring.py ring_allgather at 2 devices: expected deadlock" in err
    assert str(tmp_path) not in err


def test_the_verify_help_names_every_family_of_finding(capsys):
    description = command.build_parser()._subparsers._group_actions[0].choices["verify"].description
    for words in ("deadlocks", "unsatisfied waits", "leftover semaphores", "data races", "early arrivals",
                  "semaphore ids", "DMA windows"):
        assert words in description, words


def test_the_devices_help_says_what_all_proves_in_words_a_user_has():
    [devices] = [a for a in command.build_parser()._subparsers._group_actions[0].choices["verify"]._actions
                 if "--devices" in a.option_strings]
    assert "one program in d and N" not in devices.help  # the proof's own notation, undefined in the help
    assert "its id and the device count" in devices.help and "inconclusive" in devices.help


def test_the_max_memory_help_gives_the_default_the_budget_uses():
    # it said "half of what is free"; the budget is what semcheck holds plus that (docs/cli.md)
    [memory] = [a for a in command.build_parser()._subparsers._group_actions[0].choices["verify"]._actions
                if "--max-memory" in a.option_strings]
    assert "SEMCHECK_MAX_MEMORY_MB, else what semcheck holds plus half of what is free" in memory.help


def test_the_job_summary_headline_is_the_gates_verdict_under_expectations(capsys, monkeypatch, tmp_path):
    # A folder of declared known bugs passes the gate (exit 0); its summary's headline said
    # "❌ violation" all the same, above "Every check as expected".
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    shutil.copy(os.path.join(ROOT, "models", "ring_allgather_missing_signal.py"), kernels / "bug.py")
    shutil.copy(MODEL, kernels / "ring.py")
    monkeypatch.chdir(tmp_path)
    summary = tmp_path / "summary.md"
    assert cli.main(["verify", "kernels/", "--devices", "2", "--expectations", "-q", "--summary", str(summary)]) == 0
    lines = summary.read_text().splitlines()
    assert lines[0] == "## semcheck: ✅ as expected"
    assert lines[2] == "2 checks of 2 kernels: 1 safe, 1 violation. Every check as expected."
    # declared safe, found a bug: the gate fails, and the headline says so
    (kernels / "ring.py").write_text((kernels / "bug.py").read_text().replace(
        "# semcheck: expect unsatisfied_wait", "# semcheck: expect safe"))
    assert cli.main(["verify", "kernels/", "--devices", "2", "--expectations", "-q", "--summary", str(summary)]) == 1
    assert summary.read_text().splitlines()[0] == "## semcheck: ❌ not as expected"
    # without --expectations the headline is the kernels' worst verdict, as before
    assert cli.main(["verify", "kernels/", "--devices", "2", "-q", "--summary", str(summary)]) == 1
    assert summary.read_text().splitlines()[0] == "## semcheck: ❌ violation"


def test_a_script_that_fails_inside_an_installed_package_is_located_at_its_own_line(tmp_path):
    # numpy raised; the error pointed at numpy/linalg/_linalg.py, a file the user never wrote
    script = write(tmp_path / "raises.py", (
        "import jax\nimport numpy as np\n\n\ndef helper(x):\n    return np.linalg.inv(x)\n\n\n"
        "helper(np.zeros((2, 3)))\n"))
    proc = semcheck_process("verify", script, "--devices", "2", "--format", "json", "-q")
    assert proc.returncode == 2, proc.stderr
    [result] = json.loads(proc.stdout)["results"]
    assert (result["file"], result["line"]) == (script, 6)
    assert result["error"].startswith(f"the script raised LinAlgError: Last 2 dimensions of the array must be "
                                      f"square at {script}:6 before any Pallas kernel was compiled")


def test_a_tensorcore_mesh_without_a_core_count_says_to_pass_one(tmp_path):
    # JAX 0.10.2's create_tensorcore_mesh asks jax.devices()[0] for num_cores; a CPU device
    # has none and raises an AttributeError with no message: the error read
    # "the script raised AttributeError:  at ...", which says nothing a user can act on.
    script = write(tmp_path / "cores.py", (
        "from jax.experimental.pallas import tpu as pltpu\n\n"
        "mesh = pltpu.create_tensorcore_mesh('core')\n"))
    proc = semcheck_process("verify", script, "--devices", "2", "--format", "json", "-q")
    assert proc.returncode == 2, proc.stderr
    [result] = json.loads(proc.stdout)["results"]
    assert (result["file"], result["line"]) == (script, 3)
    assert result["error"].startswith(f"the script raised AttributeError at {script}:3; a CPU device "
                                      "has no `num_cores`")
    assert "pass `num_cores=`" in result["error"]


def test_a_script_whose_import_is_not_installed_gets_a_hint_to_install_it(tmp_path):
    script = write(tmp_path / "needs.py", "import not_installed_anywhere.sub\n")
    proc = semcheck_process("verify", script, "--devices", "2", "-q")
    assert proc.returncode == 2
    assert "the script raised ModuleNotFoundError: No module named 'not_installed_anywhere'" in proc.stdout
    [hint] = [line for line in proc.stdout.splitlines() if line.startswith("  hint: ")]
    assert hint.startswith("  hint: semcheck runs the script with its own Python (")
    assert "-m pip install not_installed_anywhere` (the package's name on PyPI may differ)" in hint


def test_a_module_missing_from_a_package_the_script_found_is_not_called_not_installed(tmp_path):
    # A script that puts a partial copy of a package on its path (tpu-inference's kernels
    # without its logger) was told "`tpu_inference` is not installed: pip install tpu_inference".
    package = tmp_path / "vendored" / "mypkg"
    package.mkdir(parents=True)
    write(package / "__init__.py", "")
    script = write(tmp_path / "needs.py", (
        "import os, sys\n"
        "sys.path.insert(0, os.path.join(os.path.dirname(__file__), 'vendored'))\n"
        "import mypkg.logger\n"))
    proc = semcheck_process("verify", script, "--devices", "2", "-q")
    assert proc.returncode == 2
    assert "the script raised ModuleNotFoundError: No module named 'mypkg.logger'" in proc.stdout
    [hint] = [line for line in proc.stdout.splitlines() if line.startswith("  hint: ")]
    assert hint == (f"  hint: `mypkg` was found at {package}, but it has no `mypkg.logger`: the script "
                    "imports a module that copy of `mypkg` lacks (add it there, or put a complete `mypkg` "
                    "first on the script's path)")


def test_a_module_the_script_imports_that_does_not_parse_is_named_at_its_own_line(tmp_path):
    # tokamax's MLA kernel, run through the package's __init__, stopped "at
    # tokamax/autotuning.py:18" (the import) with "invalid syntax (api.py, line 53)": one of
    # the package's many api.py files held a Python 3.12 `type` statement, and the report named
    # neither that file nor the Python semcheck ran the script with.
    import sys

    module = write(tmp_path / "pkg" / "api.py", "x = 1\nvalue = = 2\n")
    write(tmp_path / "pkg" / "__init__.py", "")
    script = write(tmp_path / "needs.py", "import pkg.api\n")
    proc = semcheck_process("verify", script, "--devices", "2", "-q")
    assert proc.returncode == 2
    [error] = [line for line in proc.stdout.splitlines() if line.startswith("ERROR: ")]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert error == (
        f"ERROR: needs [2 devices] {module}:2: the script raised SyntaxError: invalid syntax "
        f"(api.py, line 2) at {module}:2; semcheck runs the script with Python {version} "
        f"({sys.executable}), which cannot parse that line: if it is written for a newer Python "
        "(a `type X = ...` alias needs 3.12), run semcheck with that Python "
        "before any Pallas kernel was compiled (ran with 2 devices)")


def test_on_a_terminal_a_violations_prose_wraps_at_words_under_its_own_indent():
    # Only verdict lines and notes wrapped; a violation's message, trace and fix ran to 300
    # columns and the terminal cut them mid-word at column 80, indent lost.
    from semcheck.api import verify_path

    # with a second kernel (a model file), so that the report ends with its summary table
    results = verify_path([os.path.join(ROOT, "examples", "tpu", "ring_permute_right_handshake.py"),
                           os.path.join(ROOT, "models", "ring_allgather.py")], [4, 8])
    wide, narrow = text.render(results), text.render(results, width=80)
    assert max(len(line) for line in wide.splitlines()) > 200
    body = narrow.split("\nsummary:\n")[0].splitlines()
    quotes = [line for line in body if text._SOURCE_QUOTE.match(line)]
    # the kernel's line, as written: the signal the root cause names
    assert quotes == ["       37 |     pl.semaphore_signal(barrier, 1, device_id=(right,))"]
    assert all(len(line) <= 80 for line in body)
    assert " ".join(narrow.split()) == " ".join(wide.split())  # nothing lost, no word cut
    assert "\nsummary:\n" + wide.split("\nsummary:\n")[1] in narrow  # the table keeps its columns
    # the DMA step (step 6) continues under its actor, right of its number
    [six] = [i for i, line in enumerate(body) if line.startswith("         6. device 1 ")]
    assert body[six + 1].startswith(" " * 14) and not text._TRACE_STEP.match(body[six + 1])
    [fix] = [i for i, line in enumerate(body) if line.startswith("    fix: ")]
    assert body[fix + 1].startswith("        ") and body[fix + 1].strip()  # the fix goes on, indented


def test_a_script_stopped_by_the_time_budget_does_not_claim_a_search(tmp_path):
    # It read "INCONCLUSIVE: hangs [2 devices, unknown rules] ...: the search stopped early:
    # ... (0 states, 0 transitions, 5.74 s, auto)": no rules, no search and no states were involved.
    script = write(tmp_path / "hangs.py", "import time\nimport jax\ntime.sleep(1000)\n")
    proc = semcheck_process("verify", script, "--devices", "2", "--timeout", "2", "-q")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    line = proc.stdout.splitlines()[0]
    assert line.startswith(f"INCONCLUSIVE: hangs [2 devices] {script}: no verdict: time budget ")
    assert "before it compiled any Pallas kernel" in line
    assert "rules" not in line and "search" not in line and "states" not in line


def test_a_script_stopped_by_the_time_budget_says_where_it_was_and_how_to_give_it_longer(tmp_path):
    # Its one note read "no verdict: time budget ran out while running ...": the verdict line again.
    script = write(tmp_path / "hangs.py", "import time\nimport jax\n\nwhile True:\n    time.sleep(0.05)\n")
    # The budget must outlast starting the capture and importing JAX, which took more than
    # 3 s on a loaded 2-core machine (the note then named line 2): 15 s leaves room for that.
    proc = semcheck_process("verify", script, "--devices", "2", "--timeout", "15", "--format", "json", "-q")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    [result] = json.loads(proc.stdout)["results"]
    [note] = result["notes"]
    assert "no verdict" not in note and "ran out while running" not in note  # the verdict line's words
    assert note.startswith("semcheck stopped the script after ")
    assert f"while it ran line 5 of {script}: time.sleep(0.05), before it compiled any Pallas kernel" in note
    assert note.endswith("needs a larger budget: --timeout S (or SEMCHECK_TIMEOUT)")


def test_the_proof_note_counts_its_pairs_of_steps_in_english():
    from semcheck.parametric.prove import Proof

    # it read "each of 1 pairs of steps that could race or arrive early is ordered"
    assert Proof(holds=True, from_n=2, obligations=1)._ordered() == (
        "the 1 pair of steps that could race or arrive early is ordered")
    assert Proof(holds=True, from_n=2, obligations=3)._ordered() == (
        "each of the 3 pairs of steps that could race or arrive early is ordered")
    assert Proof(holds=True, from_n=2)._ordered() == "no two steps could race or arrive early"


def test_a_bare_semcheck_says_what_to_type(capsys):
    # it said argparse's "the following arguments are required: command"
    assert cli.main([]) == 2
    assert capsys.readouterr().err == (
        "semcheck: error: no command given: `semcheck verify PATH...` checks kernel scripts, model files "
        "or folders of them, `semcheck explain KIND` says what a finding means (semcheck --help lists "
        "the options)\n")
    assert cli.main(["--devcies"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("semcheck: error: unknown option: --devcies")
    assert err.endswith("(options go after the command: `semcheck verify [OPTIONS] PATH...`)\n")


def test_drawing_a_counterexample_leaves_graphviz_warnings_out_of_the_terminal(capfd, tmp_path):
    # dot printed "Warning: some nodes with margin (3.20,3.20) touch - falling back to straight
    # line edges" for this one, between semcheck's own lines
    svg = tmp_path / "race.svg"
    script = os.path.join(ROOT, "examples", "gpu", "tma_barrier_early_read.py")
    assert cli.main(["verify", script, "--devices", "2", "-q", "--graph", str(svg)]) == 1
    err = capfd.readouterr().err
    assert err == f"semcheck: counterexample drawn to {svg}\n"
    assert "<svg" in svg.read_text()


def test_a_failed_test_assertion_shows_the_notes_and_steps_it_cannot_ask_for_with_v():
    # A pytest user cannot add -v: the message said "-v shows every step" and "1 modelling
    # note (what the verdicts rest on): shown with -v", and never showed the note.
    import pytest

    from semcheck import testing
    from semcheck.api import verify_path

    bug = os.path.join(ROOT, "examples", "tpu", "ring_permute_right_handshake.py")
    with pytest.raises(AssertionError) as failed:
        testing.assert_protocol_safe(bug, devices=4)
    message = str(failed.value)
    [result] = verify_path([bug], [4])
    assert result.notes and all(f"  note: {note}" in message.splitlines() for note in result.notes)
    assert "-v" not in message
    assert "trace to the remote_before_entry at line 41 on device 1: the 7 of its 9 steps that it depends on" in message
    with pytest.raises(AssertionError) as failed:
        testing.assert_violation(bug, "deadlock", devices=4)
    assert "-v" not in str(failed.value) and "  note: " in str(failed.value)


def test_an_option_before_the_command_says_options_go_after_it(capsys):
    # `semcheck --devices 2 k.py` said "argument command: invalid choice: '2' (choose from verify)"
    with pytest.raises(SystemExit) as stopped:  # argparse's own exit, with semcheck's message
        cli.main(["--devices", "2", "k.py"])
    assert stopped.value.code == 2
    assert "'2' is not a command (the commands are verify and explain; options go after the command: " \
        in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["verfy", "k.py"])
    assert "'verfy' is not a command; did you mean verify?" in capsys.readouterr().err


def test_semcheck_explain_prints_a_kinds_page(capsys):
    """A report names its findings by kind; `semcheck explain KIND` shows what the kind means
    (the page SARIF rules carry: a bad and a good pattern, the fix), in the terminal."""
    from semcheck.report.kinds import help_markdown

    assert cli.main(["explain", "data_race"]) == 0
    out, err = capsys.readouterr()
    assert out == help_markdown(Kind.DATA_RACE) and out.startswith("# data_race\n") and "**Bad**" in out
    assert err == ""
    assert cli.main(["explain", "Data-Race"]) == 0  # as a user may type it
    assert capsys.readouterr().out == out


def test_semcheck_explain_of_a_misspelt_kind_says_which_it_meant_and_lists_them(capsys):
    assert cli.main(["explain", "data_rcae"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("semcheck: error: 'data_rcae' is not a violation kind; did you mean data_race?\n")
    assert all(f"  {kind.value} " in err for kind in Kind)
    assert cli.main(["explain", "zzz"]) == 2  # nothing close: the list alone
    assert capsys.readouterr().err.startswith("semcheck: error: 'zzz' is not a violation kind\nviolation kinds:\n")


def test_semcheck_explain_alone_lists_every_kind_with_its_meaning(capsys):
    from semcheck.kinds import DESCRIPTIONS

    assert cli.main(["explain"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the meanings are wrapped to the terminal
    for kind, meaning in DESCRIPTIONS.items():
        assert f" {kind.value} {meaning}" in out
    assert "semcheck explain KIND shows a kind's page" in out
    assert cli.main(["explain", "data_race", "deadlock"]) == 2
    assert "unrecognized argument: deadlock" in capsys.readouterr().err


@pytest.mark.parametrize("line, said", [
    ("space = pltpu.MemorySpace.ANY", "the script raised AttributeError: ANY"),
    ("pltpu.emit_pipeline(lambda: None, grid=(1,), should_accumulate_out=False)",
     "the script raised TypeError: emit_pipeline() got an unexpected keyword argument 'should_accumulate_out'"),
])
def test_a_name_jax_removed_says_when_and_what_replaced_it(tmp_path, line, said):
    # A kernel written for a JAX before 0.10 (tpu-inference's reduce-scatter matmul) failed
    # with "the script raised AttributeError: ANY at ...", which does not say that the name
    # was JAX's once nor what to write now.
    script = write(tmp_path / "old_jax.py", f"from jax.experimental.pallas import tpu as pltpu\n\n{line}\n")
    proc = semcheck_process("verify", script, "--devices", "2", "--format", "json", "-q")
    assert proc.returncode == 2, proc.stderr
    [result] = json.loads(proc.stdout)["results"]
    assert (result["file"], result["line"]) == (script, 3)
    assert result["error"].startswith(f"{said} at {script}:3; ")
    assert "removed in JAX 0.10.0" in result["error"]


def test_a_model_that_returns_no_protocol_is_located_at_its_model_function(tmp_path):
    # the error named the file without a line; the user's model() is where the return is missing
    from semcheck.api import verify_path

    model = write(tmp_path / "forgot_return.py", "from semcheck.model import ProtocolBuilder\n\n\n"
                  "def model(devices):\n    p = ProtocolBuilder('x', devices=devices)\n    p.thread(0)\n")
    [result] = verify_path(model, [2])
    assert result.verdict is Verdict.ERROR
    assert (result.file, result.line) == (model, 4)
    assert result.error.startswith("model(2) returned NoneType, not a Protocol")


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - the exception JAX raises is what is asked about
        return e
    raise AssertionError("expected JAX to refuse the old name")


@pytest.mark.parametrize("old, version", [
    (lambda: __import__("jax.experimental.pallas", fromlist=["pallas_call"]).pallas_call(
        lambda o_ref: None, out_shape=None, backend="mosaic_tpu"), "removed in JAX 0.9.1"),
    (lambda: __import__("jax.experimental.pallas.tpu", fromlist=["x"]).TPUMemorySpace, "removed in JAX 0.7.2"),
    (lambda: __import__("jax.experimental.pallas.tpu", fromlist=["x"]).TPUCompilerParams, "removed in JAX 0.7.2"),
    # a name JAX 0.11 added (tokamax's gmm_v2, sweep 6): what JAX 0.10.2 spells instead
    (lambda: __import__("jax.experimental.pallas.tpu", fromlist=["x"]).TensorCoreMesh,
     "with an older JAX write `pltpu.create_tensorcore_mesh"),
])
def test_backend_and_the_tpu_prefixed_names_say_when_jax_removed_them(old, version):
    # JAX's own interpreter tests of 2025 (jax-ml/jax 30930554, run in sweep 6) pass
    # `backend='mosaic_tpu'` and use `pltpu.TPUMemorySpace.ANY` / `pltpu.TPUCompilerParams`:
    # the script's error said only "unexpected keyword argument 'backend'".
    from semcheck.frontends.jax_removals import removed_api

    found = removed_api(_raised(old))
    assert found is not None and version in found.advice
