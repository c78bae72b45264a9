"""The CI entry points: the pre-commit hook's command and the project's own gate."""

import os
import re
import shlex

from semcheck import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hook_field(name):
    with open(os.path.join(ROOT, ".pre-commit-hooks.yaml")) as f:
        return re.search(rf"^[\s-]*{name}:\s*(.+)$", f.read(), re.M).group(1).strip()


def test_pre_commit_hook_runs_semcheck_with_expectations_on_the_changed_files(capsys):
    entry = shlex.split(hook_field("entry"))
    assert entry[:3] == ["semcheck", "verify", "--expectations"]
    assert hook_field("id") == "semcheck" and hook_field("language") == "python"
    files = re.compile(hook_field("files"))
    changed = ["models/circular_wait.py", "models/ring_allgather.py"]
    assert all(files.search(path) for path in changed)
    code = cli.main(entry[1:] + [os.path.join(ROOT, path) for path in changed] + ["--devices", "2"])
    capsys.readouterr()
    assert code == 0  # a known bug, declared, does not block the commit


def test_ci_gate_checks_models_and_examples_with_expectations():
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        script = f.read()
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    blocks = re.findall(r"```sh\n(.*?)\n```", readme, flags=re.S)
    test_command = blocks[1]  # the README's second command runs the tests
    assert f"\n{test_command}  #" in script or f"\n{test_command}\n" in script  # exactly it
    assert test_command.endswith('-m "not slow"') and "\n.venv/bin/python -m pytest -m slow\n" in script
    gate = script[script.index(".venv/bin/python -m pytest -m slow\n"):]
    assert "gate=(models/)" in gate and "gate+=(examples/)" in gate
    assert "--expectations" in gate and "--format sarif" in gate and "tests.sarif_schema" in gate


# --- a commit that changes a helper module (--changed-files) ----------------------------------

HELPER = """\
from jax import lax
from jax.experimental import pallas as pl


def handshake(ready):
    right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
{signal}    pl.semaphore_wait(ready, 1)
"""
SIGNAL = '    pl.semaphore_signal(ready, 1, device_id=(right,))\n'

KERNEL_SCRIPT = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

{imports}

mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
x = jnp.ones((mesh.size * 8, 128), jnp.float32)


def {name}_kernel(x_ref, o_ref, ready):
    handshake(ready)
    o_ref[...] = x_ref[...]


def per_device(block):
    return pl.pallas_call({name}_kernel, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR])(block)


if __name__ == "__main__":
    f = jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    jax.jit(f)(x)
"""


def helper_repository(tmp_path, *, signal: bool = True) -> str:
    """A repository whose kernels/ holds a helper (sync.py, compiling nothing), a kernel script
    importing it (ring.py), one importing it through a private module (relay.py, via
    _shared.py), one importing it as a package from the root and one that does not import it
    (unrelated.py, a copy of the handshake of its own); tools/ has a script importing it too,
    outside kernels/, so not run."""
    import subprocess

    root = tmp_path / "repo"
    (root / "kernels").mkdir(parents=True)
    (root / "tools").mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "kernels" / "sync.py").write_text(HELPER.format(signal=SIGNAL if signal else ""))
    (root / "kernels" / "_shared.py").write_text("from sync import handshake  # noqa: F401\n")
    (root / "kernels" / "ring.py").write_text(KERNEL_SCRIPT.format(imports="from sync import handshake", name="ring"))
    (root / "kernels" / "relay.py").write_text(KERNEL_SCRIPT.format(imports="from _shared import handshake",
                                                                    name="relay"))
    own = HELPER.format(signal=SIGNAL).replace("from jax import lax\nfrom jax.experimental import pallas as pl\n", "")
    (root / "kernels" / "unrelated.py").write_text(KERNEL_SCRIPT.format(
        imports="from jax import lax\n" + own, name="unrelated"))
    (root / "kernels" / "orphan.py").write_text("BLOCK = 128\n")
    (root / "tools" / "bench.py").write_text("raise SystemExit('semcheck ran a script outside kernels/')\n"
                                             "import kernels.sync\n")
    return str(root)


def test_importers_of_a_helper_are_the_kernel_scripts_of_its_folder(tmp_path, monkeypatch):
    from semcheck.frontends.importers import Reach, importers_of

    monkeypatch.chdir(helper_repository(tmp_path))
    reach = importers_of(["kernels/sync.py"])
    assert reach.scripts == (os.path.join("kernels", "relay.py"), os.path.join("kernels", "ring.py"))
    assert reach.searched == ("kernels",)
    assert importers_of(["kernels/orphan.py"]).scripts == ()
    assert importers_of(["kernels/ring.py"]).scripts == ()  # a kernel nobody imports brings in nothing
    # [tool.semcheck] paths widen the search: tools/bench.py imports kernels.sync from the root
    assert importers_of(["kernels/sync.py"], ["tools"]).scripts == (
        os.path.join("kernels", "relay.py"), os.path.join("kernels", "ring.py"), os.path.join("tools", "bench.py"))
    # a helper in a subfolder: its own folder has no kernel script; [tool.semcheck] paths has
    (tmp_path / "repo" / "kernels" / "utils").mkdir()
    (tmp_path / "repo" / "kernels" / "utils" / "blocks.py").write_text("SIZE = 8\n")
    (tmp_path / "repo" / "kernels" / "ring.py").write_text("from utils.blocks import SIZE\n")
    assert importers_of(["kernels/utils/blocks.py"]) == Reach((), (os.path.join("kernels", "utils"),))
    assert importers_of(["kernels/utils/blocks.py"], ["kernels"]).scripts == (os.path.join("kernels", "ring.py"),)


def test_relative_and_package_imports_and_a_helper_at_the_root(tmp_path, monkeypatch):
    """A package's modules link scripts to a helper, but one that imports relatively is no
    script (`python FILE` fails on its import), so it is not run; a helper in a subfolder
    is found from its parent folder only with [tool.semcheck] paths; a helper at the root
    looks at the root's own files."""
    from semcheck.frontends.importers import importers_of

    root = tmp_path / "repo"
    (root / "pkg" / "ops").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "ops" / "__init__.py").write_text("")
    (root / "pkg" / "ops" / "blocks.py").write_text("SIZE = 8\n")
    (root / "pkg" / "ops" / "rel.py").write_text("def f():\n    from .blocks import SIZE\n    return SIZE\n")
    (root / "pkg" / "up.py").write_text("from .ops import blocks\n")
    (root / "pkg" / "full.py").write_text("import pkg.ops.blocks\n")
    (root / "pkg" / "star.py").write_text("from pkg.ops import *\n")  # runs ops/__init__.py only
    (root / "pkg" / "via_rel.py").write_text("from pkg.ops.rel import f\n")
    (root / "settings.py").write_text("N = 2\n")
    (root / "top.py").write_text("import settings\n")
    (root / "pkg" / "deep.py").write_text("import settings\n")  # below the root: not looked at
    monkeypatch.chdir(root)
    assert importers_of(["pkg/ops/blocks.py"]).scripts == ()  # rel.py imports it, relatively
    assert importers_of(["pkg/ops/blocks.py"], ["pkg"]).scripts == ("pkg/full.py", "pkg/via_rel.py")
    assert importers_of(["pkg/ops/__init__.py"], ["pkg"]).scripts == ("pkg/full.py", "pkg/star.py", "pkg/via_rel.py")
    assert importers_of(["settings.py"]).scripts == ("top.py",)


def test_the_hook_checks_the_kernels_a_changed_helper_reaches_and_catches_its_bug(capsys, tmp_path, monkeypatch):
    """The hook's own command on a commit that changes only kernels/sync.py: without
    --changed-files it was exit 2 (nothing to check: sync.py compiles no kernel); now the
    two kernel scripts that import it run, and the signal the helper lost is an
    unsatisfied wait in both, which blocks the commit."""
    monkeypatch.chdir(helper_repository(tmp_path, signal=False))
    entry = shlex.split(hook_field("entry"))
    code = cli.main(entry[1:] + ["kernels/sync.py", "--devices", "2", "--format", "concise"])
    out, err = capsys.readouterr()
    assert code == 1, err
    assert {line.split(":")[0] for line in out.splitlines() if "unsatisfied_wait" in line} == {
        "kernels/sync.py"}, out  # the finding is at the helper's wait, found through both scripts
    assert "[ring_kernel, 2 devices]" in out and "[relay_kernel, 2 devices]" in out and "unrelated" not in out


def test_the_hook_passes_a_change_with_nothing_to_check_with_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(helper_repository(tmp_path))
    entry = shlex.split(hook_field("entry"))
    code = cli.main(entry[1:] + ["kernels/orphan.py", "--devices", "2"])
    out, err = capsys.readouterr()
    assert (code, out) == (0, ""), err
    assert err.splitlines() == [
        "semcheck: nothing to check: kernels/orphan.py ran with 2 devices but compiled no Pallas kernel; "
        "no kernel script in kernels/ imports the changed files, so the change passes (--changed-files)"]
    # without the flag, as semcheck verify by hand: nothing checked is still an error
    assert cli.main(["verify", "kernels/orphan.py", "--devices", "2", "-q"]) == 2


def test_a_change_with_nothing_to_check_passes_with_every_device_count_too(capsys, tmp_path, monkeypatch):
    """--changed-files with --devices all: the same pass as at given counts (it was exit 2,
    "nothing to check", since the sweep of every count never asked the flag)."""
    monkeypatch.chdir(helper_repository(tmp_path))
    code = cli.main(["verify", "--changed-files", "kernels/orphan.py", "--devices", "all", "-q"])
    out, err = capsys.readouterr()
    assert (code, out) == (0, ""), err
    assert err.splitlines() == [
        "semcheck: nothing to check: kernels/orphan.py compiled no Pallas kernel at any device count; "
        "no kernel script in kernels/ imports the changed files, so the change passes (--changed-files)"]
    assert cli.main(["verify", "kernels/orphan.py", "--devices", "all", "-q"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "semcheck: error: nothing to check: kernels/orphan.py compiled no Pallas kernel at any device count"]


def test_importlib_with_a_literal_name_is_an_import_and_with_a_computed_one_may_import_anything(tmp_path, monkeypatch,
                                                                                                 capsys):
    """`importlib.import_module("sync")` imports sync.py as `import sync` does; a script that
    imports a computed name (`import_module(f"_{name}")`) may import the changed helper, so
    it is checked too, and the line that adds it says why (before, neither was followed and
    the hook could pass a change that breaks them)."""
    from semcheck.frontends.importers import importers_of

    monkeypatch.chdir(helper_repository(tmp_path))
    literal = "import importlib\nhandshake = importlib.import_module('sync').handshake"
    computed = "from importlib import import_module\nhandshake = import_module('_' + 'shared').handshake"
    kernels = tmp_path / "repo" / "kernels"
    (kernels / "by_name.py").write_text(KERNEL_SCRIPT.format(imports=literal, name="by_name"))
    (kernels / "plugin.py").write_text(KERNEL_SCRIPT.format(imports=computed, name="plugin"))
    reach = importers_of(["kernels/sync.py"])
    assert reach.scripts == tuple(os.path.join("kernels", f) for f in (
        "by_name.py", "plugin.py", "relay.py", "ring.py")), reach
    assert reach.computed == (os.path.join("kernels", "plugin.py"),)
    # a computed import reaches even a changed file nothing else imports
    assert importers_of(["kernels/orphan.py"]).scripts == (os.path.join("kernels", "plugin.py"),)
    from semcheck.cli.gate import with_importers

    import argparse
    with_importers(argparse.Namespace(paths=["kernels/orphan.py"], project_paths=(), quiet=False))
    assert capsys.readouterr().err.splitlines() == [
        "semcheck: also checking 1 kernel script that imports a changed file: kernels/plugin.py (1 of them may "
        "not: kernels/plugin.py imports a module by a name computed at run time)"]
