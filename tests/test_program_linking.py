"""Kernels linked into one program across call boundaries (semcheck/lower/program.py and the
capture's inlined calls in semcheck/frontends/capture.py): a start kernel and its done
kernels each in a nested `jax.jit` (examples/tpu/async_remote_copy_nested_jit*.py), traced
in this process with `semcheck.verify`'s capture. The examples' verdicts through the script
path, at 2, 4 and 8 devices, are in tests/test_tpu_examples.py."""

from __future__ import annotations

import importlib.util
import os

import pytest

from semcheck.api import check_protocol
from semcheck.engines.options import ExplicitOptions
from tests.tpu_support import ROOT

EXAMPLES = os.path.join(ROOT, "examples", "tpu")
NESTED = "async_remote_copy_nested_jit.py"
WAITS_TWICE = "async_remote_copy_nested_jit_waits_twice.py"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), os.path.join(EXAMPLES, name))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sharded(fn, devices: int):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:devices]), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.zeros((devices * 8, 128), jnp.float32)
    return jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False), x


def _protocols(fn, devices: int):
    from semcheck.frontends.capture import capture_function, lower_captures

    f, x = _sharded(fn, devices)
    protocols, errors = lower_captures(capture_function(f, x))
    assert not errors, [e.message for e in errors]
    return protocols


def _program(example: str, devices: int):
    [program] = _protocols(_module(example).shift_right, devices)
    return program


def test_kernels_in_nested_jits_are_one_program():
    p = _program(NESTED, 2)
    assert p.kernels == ("start_kernel", "send_done_kernel", "recv_done_kernel")
    handed = p.notes[0]
    assert "start_kernel.send_sem -> send_done_kernel.send_sem" in handed
    assert "start_kernel.recv_sem -> recv_done_kernel.recv_sem" in handed
    # The done kernels' "starts at 0" notes are gone: the program counts what start did.
    assert not any("start at 0 here" in n for n in p.notes)


@pytest.mark.parametrize("devices, states", [(2, 120), (4, 735)])
def test_nested_start_and_done_are_safe_with_the_states_of_the_flat_program(devices, states):
    # The same program as examples/tpu/async_remote_copy.py (kernels called directly), so the
    # same states: inlining the calls changes what is linked, not what is checked.
    nested = check_protocol(_program(NESTED, devices), engine="explicit")
    assert nested.verdict.value == "safe" and nested.stats.states == states
    flat = _module("async_remote_copy.py").shift_right
    [direct] = _protocols(flat, devices)
    assert check_protocol(direct, engine="explicit").stats.states == states


@pytest.mark.parametrize("devices, states", [(2, 115), (4, 716)])
def test_waiting_twice_across_nested_jits_is_an_unsatisfied_wait(devices, states):
    r = check_protocol(_program(WAITS_TWICE, devices), engine="explicit")
    assert {v.kind for v in r.errors} == {"unsatisfied_wait"} and r.stats.states == states
    [hang] = r.errors
    assert hang.location.file.endswith(WAITS_TWICE) and "recv_done_kernel" in {s.kernel for s in hang.trace}


@pytest.mark.parametrize("devices", [2, 4, 8])
@pytest.mark.parametrize("example", [NESTED, WAITS_TWICE])
def test_engines_agree_on_nested_programs(example, devices):
    p = _program(example, devices)
    explicit = check_protocol(p, engine="explicit")
    z3 = check_protocol(p, engine="z3")
    assert explicit.verdict == z3.verdict
    assert {(v.kind, v.location) for v in explicit.errors} == {(v.kind, v.location) for v in z3.errors}


# The unreduced search has 664 states at 2 devices, 10,696 at 3 and 180,600 at 4 (the slow tier).
@pytest.mark.parametrize("devices", [2, 3, 4])
@pytest.mark.parametrize("example", [NESTED, WAITS_TWICE])
def test_reduction_keeps_every_finding_on_nested_programs(example, devices):
    from semcheck.engines.explicit import search as explicit
    from semcheck.semantics import System

    p = _program(example, devices)
    reduced = explicit.explore(System(p), ExplicitOptions(reduce=True, silence_reported_races=False))
    full = explicit.explore(System(p), ExplicitOptions(reduce=False, silence_reported_races=False))
    assert set(reduced.findings) == set(full.findings)
    assert full.exhausted is None and reduced.states <= full.states


def test_one_nested_jit_called_twice_is_two_kernels_of_the_program():
    """JAX lowers a nested jit once per jaxpr and calls it from every site; captured
    inline, each call is a kernel of its own, and each takes the semaphore its own start
    returned."""
    import jax

    m = _module(NESTED)
    send_done, recv_done = jax.jit(m.send_done), jax.jit(m.recv_done)

    def twice(x):
        for _ in range(2):
            x, out, send_sem, recv_sem = jax.jit(m.copy_start)(x)
            x = send_done(x, send_sem)
            x = recv_done(x, out, recv_sem)
        return x

    [p] = _protocols(twice, 2)
    assert p.kernels == ("start_kernel", "send_done_kernel", "recv_done_kernel",
                         "start_kernel#2", "send_done_kernel#2", "recv_done_kernel#2")
    assert "start_kernel#2.recv_sem -> recv_done_kernel#2.recv_sem" in p.notes[0]
    assert check_protocol(p, engine="explicit").verdict.value == "safe"


# --- separate top-level calls --------------------------------------------------------------

SEPARATE_CALLS = """
import jax, jax.numpy as jnp, numpy as np, sys
from jax.sharding import AxisType, Mesh, PartitionSpec as P
sys.path.insert(0, {examples!r})
from async_remote_copy import copy_start, send_done

mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
x = jnp.zeros((mesh.size * 8, 128), jnp.float32)
start = jax.jit(jax.shard_map(copy_start, mesh=mesh, in_specs=P("x"),
                              out_specs=(P("x"), P("x"), P(), P()), check_vma=False))
wait_send = jax.jit(jax.shard_map(send_done, mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"),
                                  check_vma=False))
x, out, send_sem, recv_sem = start(x)
wait_send(x, send_sem)
"""


def test_a_semaphore_cannot_leave_a_top_level_jit_and_the_capture_says_why(tmp_path):
    """JAX 0.10.2 fails when a jitted function returns a semaphore (no result handler for
    the semaphore dtype), so start and done in separate top-level calls never run as a
    program; the capture reports JAX's failure with the reason and the way out."""
    from semcheck.frontends.capture import SEMAPHORE_RESULT, capture_script

    script = tmp_path / "separate_calls.py"
    script.write_text(SEPARATE_CALLS.format(examples=EXAMPLES))
    outcome = capture_script(str(script), 2)
    assert outcome.script_error is not None and SEMAPHORE_RESULT in outcome.script_error
    assert "global_sharded_result_handler" in outcome.script_error
    assert [p.name for p in outcome.protocols] == ["start_kernel"]  # the done kernel never ran


# --- GPU kernels passing a semaphore ---------------------------------------------------------


def gpu_signal_kernel(x_ref, o_ref, ready_ref):
    from jax import lax
    from jax.experimental import pallas as pl

    del x_ref, o_ref
    right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
    pl.semaphore_signal(ready_ref, device_id=right)


def gpu_wait_kernel(x_ref, ready_ref, o_ref):
    from jax.experimental import pallas as pl

    del x_ref, o_ref
    pl.semaphore_wait(ready_ref, 1)


def _gpu_signal_then_wait(x):
    import jax
    from jax.experimental.pallas import mosaic_gpu as plgpu

    sem = jax.ShapeDtypeStruct((), plgpu.SemaphoreType.REGULAR.get_array_aval().dtype)
    row = jax.ShapeDtypeStruct(x.shape, x.dtype)
    out, ready = plgpu.kernel(gpu_signal_kernel, out_type=(row, sem), grid=(1,), grid_names=("b",))(x)
    return plgpu.kernel(gpu_wait_kernel, out_type=row, grid=(1,), grid_names=("b",))(out, ready)


def test_gpu_kernels_passing_a_semaphore_are_each_checked_alone_and_never_a_violation():
    from semcheck.passes.programs import GPU_PROGRAM_REASON, gpu_program_note

    signal, wait = _protocols(_gpu_signal_then_wait, 2)
    assert (signal.name, wait.name) == ("gpu_signal_kernel", "gpu_wait_kernel")
    assert signal.ports.results == ("o_ref", "ready_ref") and wait.ports.operands == ("x_ref", "ready_ref")
    assert gpu_program_note(["gpu_wait_kernel"]) in signal.notes
    assert gpu_program_note(["gpu_signal_kernel"]) in wait.notes
    for engine in ("explicit", "z3"):
        alone = check_protocol(wait, engine=engine)
        assert alone.verdict.value == "inconclusive" and not alone.errors
        assert "semcheck does not compose GPU kernels into a program" in alone.unjustified
        assert check_protocol(signal, engine=engine).verdict.value == "safe"
    assert "zero_init_gmem_scratch" in GPU_PROGRAM_REASON


# --- kernels in two shard_maps of one jitted function --------------------------------------

TWO_SHARD_MAPS = os.path.join(ROOT, "tests", "data_kernels", "start_wait_two_shard_maps.py")


@pytest.mark.parametrize("waits, devices, verdict, states", [
    (1, 2, "safe", 71), (1, 4, "safe", 256), (2, 2, "violation", 0)])
def test_semaphores_leaving_one_shard_map_for_another_link_the_two_kernels(monkeypatch, waits, devices,
                                                                             verdict, states):
    # A reshard "future" (google-deepmind/simply's kernels/reshard.py, sweep 7 of
    # benchmarks/public_kernels.md): the start kernel's shard_map returns the DMA semaphores,
    # the wait kernel's shard_map takes them. Each shard_map's body was lowered with a module
    # context of its own and its values behind an sdy.manual_computation, so the two kernels
    # were checked alone: the wait kernel inconclusive ("handed to the kernel from outside
    # everything captured"), the waiting twice unseen.
    from semcheck.frontends import LoadError, load

    monkeypatch.setenv("WAITS", str(waits))
    [p] = load(TWO_SHARD_MAPS, devices)
    assert not isinstance(p, LoadError), p
    assert p.kernels == ("start_kernel", "wait_kernel")
    assert "start_kernel.sems -> wait_kernel.sems" in p.notes[0]
    r = check_protocol(p, engine="explicit")
    assert r.verdict.value == verdict
    if verdict == "safe":
        assert r.stats.states == states
    else:
        assert {v.kind for v in r.errors} == {"unsatisfied_wait"}
