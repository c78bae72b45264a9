"""Capturing kernels from scripts and functions: what happens when the script fails, when it
compiles no kernel, when a kernel uses something semcheck cannot model, and the in-process
`semcheck.verify` API."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from semcheck import cli
from semcheck.api import verify, verify_path
from semcheck.frontends.capture import capture_script
from semcheck.frontends import LoadError
from semcheck.ir import display_path

HEADER = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
x = jnp.ones((mesh.size * 8, 128), jnp.float32)


def handshake_kernel(x_ref, o_ref, ready):
    right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
    pl.semaphore_signal(ready, 1, device_id=(right,))
    pl.semaphore_wait(ready, 1)
    o_ref[...] = x_ref[...]


def run(kernel, scratch=(), **kw):
    def per_device(block):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
                              scratch_shapes=list(scratch), **kw)(block)
    f = jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    return jax.jit(f)(x)
"""


def script(tmp_path, body: str, name: str = "kernel.py") -> str:
    path = tmp_path / name
    path.write_text(HEADER + "\n" + textwrap.dedent(body))
    return str(path)


def line_of(path: str, text: str) -> int:
    with open(path, encoding="utf-8") as f:
        [number] = [n for n, line in enumerate(f, start=1) if text in line]
    return number


def test_a_script_that_fails_after_the_kernel_ran_is_still_checked(tmp_path):
    path = script(tmp_path, """
        out = run(handshake_kernel, [pltpu.SemaphoreType.REGULAR])
        assert float(out.sum()) == out.size, "wrong result"
    """)
    [result] = verify_path(path, [2])
    assert result.verdict.value == "safe"
    [note] = [n for n in result.notes if "script raised" in n]
    assert "AssertionError: wrong result" in note and f"kernel.py:{line_of(path, 'assert float')}" in note
    assert "captured 1 kernel" in note


def test_a_script_that_compiles_no_kernel_is_an_error(tmp_path, capsys):
    path = script(tmp_path, "print(jnp.sum(x))\n")
    [result] = verify_path(path, [2])
    assert result.verdict.value == "error"
    assert "without compiling any Pallas kernel" in result.error
    assert "jax.shard_map" in result.error  # the hint says what semcheck expects
    assert cli.main(["verify", path, "--devices", "2", "-q"]) == 2


def test_a_script_that_fails_before_any_kernel_is_an_error(tmp_path):
    path = script(tmp_path, "raise ValueError('no data')\n")
    [result] = verify_path(path, [2])
    assert result.verdict.value == "error"
    assert "ValueError: no data" in result.error and f"kernel.py:{line_of(path, 'raise ValueError')}" in result.error
    # the hint says how to see the whole traceback, not how to write a kernel script
    assert (f"XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu python {display_path(path)}"
            in result.error)
    assert "jax.shard_map" not in result.error


def test_an_unsupported_construct_names_the_primitive_and_line_and_other_kernels_are_still_checked(tmp_path):
    path = script(tmp_path, """
        def data_dependent_kernel(ids_ref, x_ref, o_ref, sem):
            target = x_ref[0, 0].astype(jnp.int32)
            pl.semaphore_signal(sem, 1, device_id=(target,))
            pl.semaphore_wait(sem, 1)

        def per_device(block):
            ids = jnp.zeros((1,), jnp.int32)
            return pl.pallas_call(
                data_dependent_kernel,
                out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
                grid_spec=pltpu.PrefetchScalarGridSpec(
                    num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                    out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.REGULAR]),
            )(ids, block)

        run(handshake_kernel, [pltpu.SemaphoreType.REGULAR])
        jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)
    """)
    results = {r.kernel: r for r in verify_path(path, [2])}
    assert results["handshake_kernel"].verdict.value == "safe"
    error = results["data_dependent_kernel"]
    assert error.verdict.value == "error"
    assert error.error.startswith("semaphore_signal: the signal device id depends on the value loaded from x_ref")
    assert (error.file, error.line) == (path, line_of(path, "pl.semaphore_signal(sem, 1, device_id=(target,))"))
    assert cli.main(["verify", path, "--devices", "2", "-q"]) == 2


def test_a_barrier_semaphore_without_collective_id_is_an_error(tmp_path):
    path = script(tmp_path, """
        def kernel(x_ref, o_ref):
            barrier = pltpu.get_barrier_semaphore()
            pl.semaphore_signal(barrier, 1)
            pl.semaphore_wait(barrier, 1)

        run(kernel)
    """)
    [result] = verify_path(path, [2])
    # JAX's own TPU lowering refuses it (a violation: not_lowerable), and semcheck's lowering
    # stops at the same call, which the result notes
    assert result.verdict.value == "violation"
    [refused] = result.errors
    assert refused.kind == "not_lowerable" and "collective_id has to be specified" in refused.message
    [stop] = [note for note in result.notes if note.startswith("lowering stopped at")]
    assert f"kernel.py:{line_of(path, 'barrier = pltpu.get_barrier_semaphore()')} " in stop
    assert "get_barrier_semaphore: the kernel uses the barrier semaphore but sets no collective_id" in stop


def test_json_report_locates_violations_in_the_script(tmp_path, capsys):
    path = script(tmp_path, """
        def stuck_kernel(x_ref, o_ref, ready):
            pl.semaphore_wait(ready, 3)

        run(stuck_kernel, [pltpu.SemaphoreType.REGULAR])
    """)
    assert cli.main(["verify", path, "--devices", "2", "--format", "json", "-q"]) == 1
    report = json.loads(capsys.readouterr().out)
    [result] = report["results"]
    assert (result["backend"], result["devices"], result["verdict"]) == ("tpu", 2, "violation")
    [violation] = result["violations"]
    assert violation["kind"] == "unsatisfied_wait"
    assert violation["location"]["line"] == line_of(path, "pl.semaphore_wait(ready, 3)")
    assert os.path.basename(violation["location"]["file"]) == "kernel.py"


def test_a_script_that_never_finishes_is_stopped_and_its_kernels_checked(tmp_path):
    path = script(tmp_path, """
        import time
        run(handshake_kernel, [pltpu.SemaphoreType.REGULAR])
        while True:
            time.sleep(1)
    """)
    outcome = capture_script(path, 2, timeout=8)
    assert outcome.captured == 1 and len(outcome.protocols) == 1
    assert "did not finish within 8 s" in outcome.script_error


def test_the_script_runs_as_main_with_its_folder_on_the_path(tmp_path):
    (tmp_path / "helper_kernels.py").write_text(HEADER)
    path = script(tmp_path, """
        import sys
        from helper_kernels import handshake_kernel as imported
        assert __name__ == "__main__" and sys.argv == [__file__]
        run(imported, [pltpu.SemaphoreType.REGULAR])
    """)
    [result] = verify_path(path, [4])
    assert result.verdict.value == "safe" and result.devices == 4
    assert result.file.endswith("helper_kernels.py")


# --- the in-process API ----------------------------------------------------------------------------


def _handshake(wait_first: bool):
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from tests.tpu_kernels import mesh, sharded

    def kernel(x_ref, o_ref, ready):
        right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
        if wait_first:
            pl.semaphore_wait(ready, 1)
        pl.semaphore_signal(ready, 1, device_id=(right,))
        if not wait_first:
            pl.semaphore_wait(ready, 1)

    def per_device(block):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(block.shape, jnp.float32),
                              scratch_shapes=[pltpu.SemaphoreType.REGULAR])(block)

    return sharded(per_device, mesh((4,)))


def test_verify_checks_the_kernels_a_function_calls():
    import semcheck

    [safe] = semcheck.verify(*_handshake(wait_first=False), devices=4)
    assert safe.verdict.value == "safe" and safe.devices == 4 and safe.kernel == "kernel"
    [stuck] = semcheck.verify(*_handshake(wait_first=True))
    assert {v.kind for v in stuck.errors} == {"deadlock"}


def test_verify_explains_when_the_process_has_too_few_devices():
    with pytest.raises(LoadError) as error:
        verify(*_handshake(wait_first=False), devices=64)
    assert "only 8 JAX device(s)" in str(error.value)
    assert "--xla_force_host_platform_device_count=64" in str(error.value)
    with pytest.raises(LoadError, match="runs on a mesh of 4 device"):
        verify(*_handshake(wait_first=False), devices=2)


def test_verify_explains_when_the_function_calls_no_kernel():
    import jax.numpy as jnp

    with pytest.raises(LoadError, match="calls no Pallas kernel"):
        verify(lambda x: x + 1, jnp.ones(3))


def test_a_raw_core_map_under_run_state_is_captured_after_jax_discharges_it(tmp_path):
    path = script(tmp_path, """
        cores = pltpu.create_tensorcore_mesh("core", num_cores=2)

        def per_device(block):
            def stateful(refs):
                x_ref, o_ref = refs

                @pl.core_map(cores)
                def _():
                    def scoped(sem):
                        # Each core its own half: the output is one HBM buffer of the chip.
                        rows = pl.ds(lax.axis_index("core") * 4, 4)
                        pltpu.core_barrier(sem, core_axis_name="core")
                        pltpu.sync_copy(x_ref.at[rows], o_ref.at[rows])

                    pl.run_scoped(scoped, pltpu.SemaphoreType.REGULAR)

            _, out = pl.run_state(stateful)((block, jnp.zeros_like(block)))
            return out

        jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))(x)
    """)
    [result] = verify_path(path, [2])
    assert (result.verdict.value, result.devices, result.cores) == ("safe", 2, 2)
    assert result.file == path  # the kernel's body, not JAX's discharge wrapper
