"""The JAX our users have (issue 26, section 5): semcheck accepts any JAX from 0.10.2 on,
says in one line when it runs with one it was not tested with, and where a JAX internal it
needs is not where the versions it knows keep it, stops with an error (exit 2) naming the
JAX version and what it looked for, never a traceback and never a silent "safe".

Only JAX 0.10.2 installs here, so what newer versions changed is tested through fakes: fake
module tables, a fake installed version, and fake eqns carrying the newer params
(`get_barrier_semaphore(tag=...)`, Mosaic GPU's `get_barrier_semaphore`, a signal's
`device_id_type=None` and `_unsafe_no_write_effect`), lowered by the real rules.
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

from semcheck import ir, jax_compat
from semcheck.api import JaxVersionWarning, check_protocol
from semcheck.errors import LoadError
from semcheck.ir import Backend, Scope, SemKind, SemOrigin
from semcheck.lower.context import KernelContext, MeshShape, ThreadLowering
from semcheck.lower.gpu_kernel import GPU, GpuKernelContext, GpuThreadLowering
from semcheck.lower.interpreter import dispatch
from semcheck.lower.values import Known, RefValue
from semcheck.model import ProtocolBuilder, Sem
from tests.test_cli import ROOT, model

LOC = ir.Loc(__file__, 1)


@pytest.fixture
def fresh_modules(monkeypatch):
    """An empty cache of looked-up modules, restored afterwards."""
    monkeypatch.setattr(jax_compat, "_loaded", {})
    return jax_compat


# --- looking internals up ------------------------------------------------------------------


def test_a_known_internal_is_the_module_itself(fresh_modules):
    from jax._src import core

    assert fresh_modules.jax_internal("core").Literal is core.Literal
    assert fresh_modules.jax_internal("xla_client").OpSharding is not None  # an attribute of jax._src.lib


def test_the_first_place_that_has_a_module_is_used(fresh_modules, monkeypatch):
    """JAX 0.11 moved the TPU generation registry (jax/_src/tpu_info.py, with a shim at the
    old place); the newest place is tried first and a JAX without it uses the old one."""
    monkeypatch.setitem(fresh_modules.MODULES, "tpu_info", ("jax._src.no_such_tpu_info", "jax._src.pallas.mosaic.tpu_info"))
    from jax._src.pallas.mosaic import tpu_info

    assert fresh_modules.jax_internal("tpu_info").registry is tpu_info.registry


def test_a_missing_module_names_the_jax_version_and_every_place_looked_in(fresh_modules, monkeypatch):
    monkeypatch.setitem(fresh_modules.MODULES, "mpmd", ("jax._src.pallas.renamed_mpmd", "jax._src.pallas.old_mpmd"))
    monkeypatch.setattr(fresh_modules, "installed_version", lambda: "0.12.0")
    with pytest.raises(fresh_modules.JaxInternalMissing) as raised:
        fresh_modules.jax_internal("mpmd")
    message = str(raised.value)
    assert "JAX 0.12.0: semcheck looked for the module jax._src.pallas.renamed_mpmd" in message
    assert "jax._src.pallas.old_mpmd" in message and "tested with JAX 0.10.2" in message
    assert isinstance(raised.value, LoadError)


def test_a_missing_attribute_names_the_module_and_the_attribute(fresh_modules):
    with pytest.raises(fresh_modules.JaxInternalMissing, match=r"jax\._src\.pallas\.mosaic_gpu\.core\.PeerMemRefV2"):
        fresh_modules.jax_internal("gpu_core").PeerMemRefV2  # noqa: B018 - the lookup is the test


def test_a_renamed_attribute_is_found_by_any_of_its_names(fresh_modules):
    from jax._src.pallas import mpmd

    assert fresh_modules.first_attr("mpmd", "mpmd_map_p_v2", "mpmd_map_p") is mpmd.mpmd_map_p
    with pytest.raises(fresh_modules.JaxInternalMissing, match="mpmd_a or jax._src.pallas.mpmd.mpmd_b"):
        fresh_modules.first_attr("mpmd", "mpmd_a", "mpmd_b")


def test_no_module_of_semcheck_imports_jax_internals_around_the_door():
    import re

    package = os.path.join(ROOT, "semcheck")
    pattern = re.compile(r"^\s*(from jax\._src|import jax\._src)", re.M)
    offenders = []
    for folder, _dirs, files in os.walk(package):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    if pattern.search(f.read()):
                        offenders.append(os.path.relpath(os.path.join(folder, name), ROOT))
    assert offenders == []


def test_a_kernel_whose_lowering_meets_a_missing_internal_is_an_error_naming_it(fresh_modules, monkeypatch):
    """The capture's and the lowering's lookups end in an error result (exit 2), not a
    traceback and not a verdict."""
    import jax.numpy as jnp
    from jax.experimental.pallas import mosaic_gpu as plgpu

    from tests.test_gpu_lowering import gpu_call, lower

    def kernel(x_ref, o_ref, tile, barrier):
        plgpu.copy_gmem_to_smem(x_ref.at[0], tile, barrier)
        plgpu.barrier_wait(barrier)

    monkeypatch.setitem(fresh_modules.MODULES, "gpu_core", ("jax._src.pallas.mosaic_gpu.core_v2",))
    found, [error] = lower(gpu_call(kernel, grid=(1,), scratch=[plgpu.SMEM((128,), jnp.float32), plgpu.Barrier()]))
    assert not found
    assert f"JAX {fresh_modules.installed_version()}: semcheck looked for the module jax._src.pallas.mosaic_gpu.core_v2" \
        in error.message
    assert "internal error" not in error.message
    from semcheck.result import EXIT_CODES, Verdict

    assert EXIT_CODES[Verdict.ERROR] == 2


# --- versions ------------------------------------------------------------------------------


@pytest.mark.parametrize("version, expected", [
    ("0.10.2", None),
    ("0.11.1", "whose source semcheck's names were read from"),
    ("0.11.1.dev20260808+cec06d1", "whose source semcheck's names were read from"),
    ("0.12.0", "which semcheck has not seen"),
    ("0.9.2", "older than semcheck supports"),
])
def test_the_version_notice(version, expected):
    notice = jax_compat.version_notice(version)
    if expected is None:
        assert notice is None
    else:
        assert expected in notice and f"JAX {version}" in notice and "\n" not in notice


def test_versions_are_read_as_numbers():
    assert jax_compat.parse("0.11.1.dev20260808+cec06d1") == (0, 11, 1)
    assert jax_compat.parse("0.12.0rc1") == (0, 12, 0)
    assert jax_compat.parse("0.10.2") > jax_compat.parse("0.9.10") and jax_compat.FLOOR == (0, 10, 2)


def test_the_pin_is_a_floor():
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    assert '"jax>=0.10.2",' in text and "jax>=0.10.2,<" not in text


def _cli_with_jax(version: str, *args: str) -> tuple[int, str]:
    """`semcheck verify ARGS` in a fresh interpreter whose installed JAX reads as `version`
    (a fork after this process imported JAX could hang)."""
    import subprocess

    code = ("import sys\nfrom semcheck import cli, jax_compat\n"
            f"jax_compat.installed_version = lambda: {version!r}\n"
            f"sys.exit(cli.main(['verify', *{list(args)!r}, '-q']))\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    return proc.returncode, proc.stderr


def test_the_cli_says_it_once_per_run_for_kernel_scripts_only():
    code, err = _cli_with_jax("0.12.0", model("ring_allgather"), "--devices", "2")
    assert code == 0 and "0.12.0" not in err  # a model file needs no JAX
    kernel = os.path.join(ROOT, "examples", "tpu", "ring_permute.py")
    code, err = _cli_with_jax("0.12.0", kernel, "--devices", "2,4")
    assert code == 0
    assert err.count("semcheck: note: JAX 0.12.0 is not a version semcheck was tested with") == 1
    code, err = _cli_with_jax("0.10.2", kernel, "--devices", "2")
    assert code == 0 and "semcheck: note: JAX" not in err


def test_the_api_warns_once(monkeypatch):
    monkeypatch.setattr(jax_compat, "installed_version", lambda: "0.12.0")
    monkeypatch.setattr(jax_compat, "_noticed", False)
    from semcheck import api

    with pytest.warns(JaxVersionWarning, match="JAX 0.12.0"):
        api._notice_jax_version()
    assert jax_compat.notice_once() is None


# --- newer JAX's constructs, on fake eqns lowered by the real rules ---------------------------


def fake_eqn(name: str, outvars=(), **params):
    return SimpleNamespace(primitive=SimpleNamespace(name=name), params=params, outvars=list(outvars),
                           invars=[], source_info=SimpleNamespace(traceback=None), effects=set())


def tpu_thread(collective_id=None, axes=("x",), sizes=(4,)) -> ThreadLowering:
    ctx = KernelContext("k", MeshShape(axes, sizes), 1, LOC, collective_id=collective_id)
    return ThreadLowering(ctx, 0, 0)


def test_get_barrier_semaphore_with_a_tag_is_the_kernels_barrier_semaphore():
    t = tpu_thread(collective_id=0)
    [ref] = dispatch(t, fake_eqn("get_barrier_semaphore", tag="all_gather"), [])
    assert ref.alloc == "barrier_semaphore" and t.kernel.semaphores["barrier_semaphore"].kind is SemKind.BARRIER
    assert any("tag=" in note for note in t.kernel.notes)


def test_get_barrier_semaphore_with_a_tag_and_no_collective_id_is_an_error_naming_the_version(monkeypatch):
    monkeypatch.setattr(jax_compat, "installed_version", lambda: "0.12.0")
    with pytest.raises(LoadError, match=r"tag='ag'\) in a kernel without a collective_id \(JAX 0.12.0\)"):
        dispatch(tpu_thread(), fake_eqn("get_barrier_semaphore", tag="ag"), [])


def _signal(t: ThreadLowering, device_id, device_id_type, **params):
    from jax import tree_util

    sem = t.kernel.declare_ref("sem", SimpleNamespace(shape=(), dtype=_regular_dtype()), SemOrigin.SCRATCH, LOC)
    leaves, tree = tree_util.tree_flatten((sem, (), Known(_np(1)), device_id, None),
                                          is_leaf=lambda x: isinstance(x, (RefValue, Known)))
    eqn = fake_eqn("semaphore_signal", args_tree=tree, device_id_type=device_id_type, **params)
    dispatch(t, eqn, leaves)
    [signal] = t.emitter.build()
    return signal


def _np(v):
    import numpy as np

    return np.asarray(v, np.int32)


def _regular_dtype():
    from jax._src.pallas import core as pl_core

    return pl_core.Semaphore()


def test_a_signal_with_device_id_type_none_reads_the_ids_form():
    t = tpu_thread()
    signal = _signal(t, Known(_np(2)), None, _unsafe_no_write_effect=True)
    assert signal.sem.device == 2  # one axis: mesh and logical ids agree
    t2 = tpu_thread(axes=("x", "y"), sizes=(2, 2))
    assert _signal(t2, (Known(_np(1)), Known(_np(1))), None).sem.device == 3  # a tuple: mesh coordinates


def test_a_single_id_with_device_id_type_none_on_a_2d_mesh_is_an_error(monkeypatch):
    monkeypatch.setattr(jax_compat, "installed_version", lambda: "0.12.0")
    with pytest.raises(LoadError, match=r"device_id_type=None on a mesh of several axes \(x, y; JAX 0.12.0\)"):
        _signal(tpu_thread(axes=("x", "y"), sizes=(2, 2)), Known(_np(1)), None)


def gpu_thread(collective_id=None) -> GpuThreadLowering:
    ctx = GpuKernelContext("k", MeshShape(("x",), (2,)), 1, LOC, backend=GPU,
                           gpu_compiler_params=SimpleNamespace(collective_id=collective_id))
    return GpuThreadLowering(ctx, 0, 0, 0)


def test_mosaic_gpu_get_barrier_semaphore_is_a_device_wide_array_kept_across_kernels():
    t = gpu_thread(collective_id=3)
    out = SimpleNamespace(aval=SimpleNamespace(shape=(1024,), dtype=None))
    [ref] = dispatch(t, fake_eqn("get_barrier_semaphore", outvars=[out]), [])
    decl = t.kernel.semaphores[ref.alloc]
    assert (decl.size, decl.scope, decl.origin, decl.collective_id) == (1024, Scope.DEVICE, SemOrigin.BARRIER, 3)
    with pytest.raises(LoadError, match="needs collective_id in plgpu.CompilerParams"):
        dispatch(gpu_thread(), fake_eqn("get_barrier_semaphore", outvars=[out]), [])


def test_a_gpu_barrier_semaphore_left_non_zero_is_a_leftover_and_a_scratch_one_is_not():
    def protocol(origin: SemOrigin) -> ir.Protocol:
        p = ProtocolBuilder("gpu_barrier", devices=2, cores=1, backend="gpu")
        p._sems.append(ir.SemDecl("sems", SemKind.GPU_GLOBAL, 4, origin, Scope.DEVICE, 3, LOC))
        for d in range(2):
            p.thread(d, 0).signal(Sem("sems", 4), 1, device=1 - d)
        return p.build()

    leftover = check_protocol(protocol(SemOrigin.BARRIER))
    assert {v.kind for v in leftover.violations} == {"semaphore_leftover"}
    assert "collective_id 3 starts from it" in leftover.violations[0].message
    assert check_protocol(protocol(SemOrigin.GLOBAL)).verdict.value == "safe"
    assert protocol(SemOrigin.BARRIER).backend is Backend.GPU


def test_a_copy_without_a_barrier_is_refused_by_name():
    """JAX 0.11's pre-Hopper copy_gmem_to_smem (has_barrier=False, awaited by
    wait_gmem_to_smem)."""
    t = gpu_thread()
    with pytest.raises(LoadError, match="copy without a barrier .*wait_gmem_to_smem"):
        dispatch(t, fake_eqn("copy_gmem_to_smem", has_barrier=False), [])


def test_the_shipped_kernels_of_a_public_jax_pallas_namespace_are_user_code():
    import jax

    from semcheck.lower.source import is_user_file

    jax_dir = os.path.dirname(jax.__file__)
    assert is_user_file(os.path.join(jax_dir, "experimental", "pallas", "ops", "tpu", "all_gather.py"))
    assert is_user_file(os.path.join(jax_dir, "pallas", "ops", "tpu", "all_gather.py"))
    assert not is_user_file(os.path.join(jax_dir, "pallas", "tpu.py"))
    assert not is_user_file(os.path.join(jax_dir, "_src", "pallas", "core.py"))
    assert sys.modules["jax"] is jax


def test_a_gpu_kernel_that_skips_the_device_barrier_says_what_its_check_assumes():
    """Mosaic GPU's CompilerParams(skip_device_barrier=True) (newer JAX) is read off a fake
    of the params, on a kernel captured here."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    from semcheck.frontends.capture import capture_function, lower_captures
    from tests.test_gpu_lowering import gpu_call
    from tests.tpu_kernels import mesh, sharded

    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, device_id=0)

    fn, x = sharded(gpu_call(kernel, grid=(1,), scratch=[plgpu.SemaphoreType.REGULAR]), mesh((2,)))
    notes = []
    for skip in (False, True):
        [capture] = capture_function(fn, x)
        capture.params = {**capture.params, "compiler_params": SimpleNamespace(skip_device_barrier=skip)}
        [p], errors = lower_captures([capture])
        assert not errors
        notes.append(any("skip_device_barrier=True" in note for note in p.notes))
    assert notes == [False, True]


def test_a_missing_internal_met_while_the_script_runs_is_said_as_semchecks_own(tmp_path, monkeypatch):
    """The capture hooks run inside the user's jitted code: when one meets an unknown JAX,
    the script's failure is reported as semcheck's, with the version and the name."""
    from semcheck.frontends import capture

    script = tmp_path / "kernel.py"
    script.write_text("from semcheck.jax_compat import JaxInternalMissing\n"
                      "raise JaxInternalMissing('jax._src.pallas.mpmd.mpmd_map_p')\n")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    why, where = capture._run_script(str(script), [None])
    assert why.startswith("semcheck stopped the script: JAX ") and "jax._src.pallas.mpmd.mpmd_map_p" in why
    assert where is not None and where.line == 2
