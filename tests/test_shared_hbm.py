"""TPU memory spaces as the hardware shares them (docs/semantics.md, "Memory spaces").

A kernel operand in HBM (memory space ANY or HBM) is one buffer per chip, shared by the
chip's TensorCores; VMEM/SMEM (scratch, pipelined blocks) and semaphores exist once per core.
So two cores of one chip copying into the same part of a shared output race, as JAX 0.10.2's
TPU interpreter reports (`detect_races=True`, both DMA modes): the slow tests here run it on
the same kernels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from semcheck import ir
from semcheck.engines.explicit import search as explicit
from semcheck.semantics import System
from semcheck.engines.options import ExplicitOptions
from tests.agreement import assert_engines_agree, kinds
from tests.tpu_kernels import mesh, protocols
from tests.test_tpu_differential import RUNNER
from tests.tpu_support import ROOT

REGULAR = pltpu.SemaphoreType.REGULAR
CORE_BARRIER_EXAMPLE = os.path.join(ROOT, "examples", "tpu", "core_barrier.py")
CORE_BARRIER_LINE = '    pltpu.core_barrier(barrier_sem, core_axis_name="core")\n'


def on_two_cores(body, scratch=()):
    cores = pltpu.create_tensorcore_mesh("core", num_cores=2)

    def per_device(block):
        return pl.kernel(body, out_type=jax.ShapeDtypeStruct(block.shape, block.dtype), mesh=cores,
                         scratch_types=list(scratch))(block)

    return per_device


def whole_output_after_barrier(x_hbm, o_hbm, scratch, sem):
    """Both cores meet, then each copies the whole input into the whole (shared) output."""
    pltpu.core_barrier(sem, core_axis_name="core")
    pltpu.sync_copy(x_hbm, o_hbm)


def own_half_after_barrier(x_hbm, o_hbm, scratch, sem):
    rows = pl.ds(lax.axis_index("core") * 4, 4)
    pltpu.core_barrier(sem, core_axis_name="core")
    pltpu.sync_copy(x_hbm.at[rows], o_hbm.at[rows])
    scratch[...] = jnp.zeros_like(scratch)  # every core has its own VMEM: no race


SCRATCH = [pltpu.VMEM((4, 128), jnp.float32), REGULAR]


def scopes(protocol: ir.Protocol) -> dict[str, str]:
    """Each buffer's scope; every semaphore is a core's (the interpreter's _allocate_semaphores)."""
    assert {s.scope for s in protocol.semaphores} == {ir.Scope.CORE}
    return {b.name: b.scope.value for b in protocol.buffers}


def test_hbm_operands_are_one_buffer_per_chip_and_vmem_and_semaphores_one_per_core():
    [p] = protocols(on_two_cores(own_half_after_barrier, SCRATCH), mesh((2,)))
    assert scopes(p) == {"x_hbm": "device", "o_hbm": "device", "scratch": "core"}
    system = System(p)
    assert len(system.buffer_instances) == 2 + 2 + 2 * 2  # x, o per device; scratch per core
    assert any("HBM" in note and "interpret_pallas_call.py" in note for note in p.notes)


def test_a_pipelined_blocks_vmem_is_per_core_and_an_any_operand_is_the_chips():
    def kernel(x_hbm, o_ref):
        o_ref[...] = jnp.ones_like(o_ref)

    def per_device(block):
        return pl.pallas_call(
            kernel, grid=(2,), out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)], out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        )(block)

    found = protocols(per_device, mesh((2,)), rows=16)
    assert [p.cores for p in found] == [1, 2]
    one, two = found
    assert scopes(one) == {"x_hbm": "device", "o_ref": "core"}
    # on two cores the output's blocks are written back into its HBM array, the chip's
    assert scopes(two) == {"x_hbm": "device", "o_ref": "core", "o_ref (HBM array)": "device"}


@pytest.mark.parametrize("devices", [1, 2])
def test_two_cores_copying_into_the_whole_shared_output_race(devices):
    [p] = protocols(on_two_cores(whole_output_after_barrier, SCRATCH), mesh((devices,)))
    by_search, _ = assert_engines_agree(p)
    assert kinds(by_search) == {"data_race"}
    full = explicit.explore(System(p), ExplicitOptions(reduce=False, silence_reported_races=False))
    reduced = explicit.explore(System(p), ExplicitOptions(silence_reported_races=False))
    assert set(full.findings) == set(reduced.findings)


@pytest.mark.parametrize("devices, states, unreduced", [(1, 24, 68), (2, 48, 3344)])
def test_two_cores_copying_their_own_halves_of_the_shared_output_are_safe(devices, states, unreduced):
    [p] = protocols(on_two_cores(own_half_after_barrier, SCRATCH), mesh((devices,)))
    by_search, _ = assert_engines_agree(p)
    full = explicit.explore(System(p), ExplicitOptions(reduce=False))
    assert (kinds(by_search), by_search.states) == (set(), states)
    assert (kinds(full), full.states) == (set(), unreduced)


def core_barrier_mutant(tmp_path) -> str:
    """examples/tpu/core_barrier.py without its pltpu.core_barrier: each core reads back the
    half of the shared output the other core may still be writing."""
    with open(CORE_BARRIER_EXAMPLE, encoding="utf-8") as f:
        source = f.read()
    assert source.count(CORE_BARRIER_LINE) == 1
    path = tmp_path / "core_barrier_deleted.py"
    path.write_text(source.replace(CORE_BARRIER_LINE, "    pass  # mutant: core_barrier deleted\n"))
    return str(path)


def copy_lines(path: str) -> set[int]:
    with open(path, encoding="utf-8") as f:
        return {n for n, line in enumerate(f, start=1) if "pltpu.sync_copy(" in line}


def test_deleting_the_core_barrier_of_the_example_is_a_race_between_its_copies(tmp_path):
    from semcheck.api import verify_path

    path = core_barrier_mutant(tmp_path)
    [result] = verify_path(path, [2], engine="explicit")
    races = [v for v in result.errors if v.kind == "data_race"]
    assert races and {v.kind for v in result.errors} == {"data_race"}
    assert {races[0].location.line, *(loc.line for loc in races[0].related)} == copy_lines(path)
    [kept] = verify_path(CORE_BARRIER_EXAMPLE, [2], engine="explicit")
    assert kept.verdict.value == "safe"


# --- the same kernels in JAX's TPU interpreter ---------------------------------------------------

WHOLE_OUTPUT_SCRIPT = '''
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh, PartitionSpec as P

def body(x_hbm, o_hbm, scratch, sem):
    pltpu.core_barrier(sem, core_axis_name="core")
    pltpu.sync_copy(x_hbm, o_hbm)

cores = pltpu.create_tensorcore_mesh("core", num_cores=2)

def per_device(block):
    return pl.kernel(body, out_type=jax.ShapeDtypeStruct(block.shape, block.dtype), mesh=cores,
                     scratch_types=[pltpu.VMEM((4, 128), jnp.float32), pltpu.SemaphoreType.REGULAR])(block)

mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
x = jnp.ones((mesh.size * 8, 128), jnp.float32)
f = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
jax.block_until_ready(f(x))
'''


def interpreter_reports_a_race(path: str, mode: str) -> bool:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu",
               PYTHONPATH=ROOT)
    params = json.dumps({"detect_races": True, "dma_execution_mode": mode})
    proc = subprocess.run([sys.executable, "-c", RUNNER, path, params], env=env, capture_output=True,
                          text=True, timeout=300, cwd=os.path.dirname(path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return "RACE DETECTED" in proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["on_wait", "eager"])
def test_the_interpreter_reports_the_races_semcheck_reports_on_shared_hbm(tmp_path, mode):
    whole = tmp_path / "whole_output.py"
    whole.write_text(WHOLE_OUTPUT_SCRIPT)
    assert interpreter_reports_a_race(str(whole), mode)
    assert interpreter_reports_a_race(core_barrier_mutant(tmp_path), mode)
    assert not interpreter_reports_a_race(CORE_BARRIER_EXAMPLE, mode)


def test_data_one_core_copies_into_shared_hbm_is_not_taken_from_the_operand_values():
    """Core 0 copies x into the shared output; core 1 reads it back and signals that many
    times. Each core's lowering follows its own data only, so the read value is unknown
    (not the output's initial contents), and the protocol it decides is an error that says why."""
    from semcheck.frontends.capture import capture_function, lower_captures
    from tests.tpu_kernels import sharded

    def body(x_hbm, o_hbm, smem, sem):
        core = lax.axis_index("core")

        @pl.when(core == 0)
        def _():
            pltpu.sync_copy(x_hbm.at[0, pl.ds(0, 8)], o_hbm.at[0, pl.ds(0, 8)])

        pltpu.core_barrier(sem, core_axis_name="core")
        pltpu.sync_copy(o_hbm.at[0, pl.ds(0, 8)], smem)
        pl.semaphore_signal(sem, smem[0].astype(jnp.int32))
        pl.semaphore_wait(sem, smem[0].astype(jnp.int32))

    scratch = [pltpu.SMEM((8,), jnp.float32), REGULAR]
    found, errors = lower_captures(capture_function(*sharded(on_two_cores(body, scratch), mesh((1,)))))
    text = " ".join(str(e) for e in errors) + " ".join(n for p in found for n in p.notes)
    assert "another TensorCore of the chip copies into (shared HBM)" in text, (found, errors)
