"""The Mosaic GPU collectives shipped in the jax wheel (nobody on the team wrote them), as a
user would check them: a driver script builds a mesh of CPU devices and calls the kernel;
`semcheck verify` captures the `plgpu.kernel` it traces. Then mutants of their source, made
here at test time, must be caught at the mutated line.

* all_gather_mgpu / reduce_scatter_mgpu: every block multicasts one signal on its own
  per-block scratch semaphore to every device, then waits, without decrementing, for one
  signal from each device.
* collective_matmul_mgpu.all_gather_lhs_matmul: a ring of `pl.get_global` signals with
  cumulative non-decrementing waits (step k needs (k+1)*num_sms), inside the warp-specialized
  Hopper matmul pipeline (three warpgroups per block, TMA copies and mbarriers). A CPU device
  has no SM count, so the driver gives the module one (`SMS`).
"""

from __future__ import annotations

import inspect
import os

import pytest

from semcheck.api import verify_path

MESH = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, PartitionSpec as P

mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
"""

COLLECTIVE = MESH + """\
{import_line}

x = jnp.ones((mesh.size * 8, 128), jnp.float32)
per_device = lambda block: mod.{function}(block, axis_name="x", num_blocks=2)
f = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P({in_spec}), out_specs=P({out_spec}),
                          check_vma=False))
jax.block_until_ready(f(x))
"""

MATMUL = MESH + """\
import types
from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm
{import_line}

SMS = {sms}


class _DeviceWithSms:
    core_count = SMS

    def __init__(self, device):
        self._device = device

    def __getattr__(self, name):
        return getattr(self._device, name)


class _JaxWithSms(types.ModuleType):
    def __getattr__(self, name):
        return getattr(jax, name)


# The module reads its SM count from jax.devices()[0].core_count, which a CPU device lacks.
mod.jax = _JaxWithSms("jax")
mod.jax.devices = lambda *a: [_DeviceWithSms(d) for d in jax.devices(*a)]

n = mesh.size
config = hm.TuningConfig(tile_m=64, tile_n=64, tile_k=64, max_concurrent_steps=2)
lhs = jnp.ones((n * 64, 128), jnp.float16)
rhs = jnp.ones((128, n * 128), jnp.float16)
per_device = lambda a, b: mod.all_gather_lhs_matmul(a, b, "x", config=config)
f = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P(None, "x")),
                          out_specs=P(None, "x"), check_vma=False))
jax.block_until_ready(f(lhs, rhs))
"""

KERNELS = {
    "all_gather_mgpu": dict(function="all_gather", in_spec='"x"', out_spec="None"),
    "reduce_scatter_mgpu": dict(function="reduce_scatter", in_spec="None", out_spec='"x"'),
}


def wheel_module(name: str):
    import importlib

    return importlib.import_module(f"jax.experimental.pallas.ops.gpu.{name}")


def driver(tmp_path, module: str, import_line: str, sms: int = 1) -> str:
    path = tmp_path / "driver.py"
    if module == "collective_matmul_mgpu":
        path.write_text(MATMUL.format(import_line=import_line, sms=sms))
    else:
        path.write_text(COLLECTIVE.format(import_line=import_line, **KERNELS[module]))
    return str(path)


def wheel_driver(tmp_path, module: str, sms: int = 1) -> str:
    return driver(tmp_path, module, f"from jax.experimental.pallas.ops.gpu import {module} as mod", sms)


def mutant(tmp_path, module: str, replace: str, by: str, sms: int = 1) -> tuple[str, str]:
    """A driver of a copy of the wheel module with `replace` (which must occur once) replaced."""
    source = inspect.getsource(wheel_module(module))
    assert source.count(replace) == 1, f"the wheel's {module} no longer contains {replace!r}"
    path = tmp_path / f"{module}_mutant.py"
    path.write_text(source.replace(replace, by))
    return driver(tmp_path, module, f"import {module}_mutant as mod", sms), str(path)


def line_of(path: str, text: str) -> int:
    with open(path, encoding="utf-8") as f:
        [number] = [n for n, line in enumerate(f, start=1) if text in line]
    return number


@pytest.mark.parametrize("devices", [2, 4, 8])
@pytest.mark.parametrize("module", sorted(KERNELS))
def test_wheel_collective_is_safe(tmp_path, module, devices):
    [result] = verify_path(wheel_driver(tmp_path, module), [devices])
    assert result.error is None, result.error
    assert result.verdict.value == "safe", [v.message for v in result.violations]
    assert (result.frontend, result.devices, result.cores) == ("gpu", devices, 2)
    wheel_file = os.path.abspath(wheel_module(module).__file__)
    assert os.path.samefile(result.file, wheel_file)  # the kernel's own file, not the driver
    assert result.line == line_of(wheel_file, "def kernel(")


WAIT = "pl.semaphore_wait(done_barrier, num_devices, decrement=False)"
SIGNAL = "plgpu.semaphore_signal_multicast(done_barrier, collective_axes=axis_name)\n"


@pytest.mark.parametrize("module", sorted(KERNELS))
def test_waiting_for_one_more_signal_is_an_unsatisfied_wait(tmp_path, module):
    bad_wait = WAIT.replace("num_devices,", "num_devices + 1,")
    path, source = mutant(tmp_path, module, WAIT, bad_wait)
    [result] = verify_path(path, [4])
    assert {v.kind for v in result.errors} == {"unsatisfied_wait"}
    [violation] = result.errors
    assert os.path.samefile(violation.location.file, source)
    assert violation.location.line == line_of(source, bad_wait)
    assert all(b.needs == 5 and b.has == 4 for b in violation.blocked)


@pytest.mark.parametrize("module", sorted(KERNELS))
def test_a_dropped_multicast_signal_is_an_unsatisfied_wait(tmp_path, module):
    path, source = mutant(tmp_path, module, SIGNAL, "\n")
    [result] = verify_path(path, [2])
    assert {v.kind for v in result.errors} == {"unsatisfied_wait"}
    assert result.errors[0].location.line == line_of(source, WAIT)


def test_collective_matmul_is_safe_on_one_sm_at_8_devices(tmp_path):
    # Between device steps the warpgroups meet at the barrier that begins the pipeline's
    # thread-collective run_scoped, so the loader cannot refill the SMEM slot that the previous
    # step's TMA store to the peer is still reading (without that barrier this is a race).
    [result] = verify_path(wheel_driver(tmp_path, "collective_matmul_mgpu", sms=1), [8])
    assert result.error is None, result.error
    assert result.verdict.value == "safe", [v.message for v in result.violations]
    assert (result.kernel, result.devices, result.cores) == ("kernel_body", 8, 1)
    wheel_file = os.path.abspath(wheel_module("collective_matmul_mgpu").__file__)
    assert os.path.samefile(result.file, wheel_file)


@pytest.mark.parametrize("devices, verdict", [(2, "safe"), (3, "violation"), (4, "violation")])
def test_collective_matmul_on_two_sms_lets_a_fast_block_signal_for_a_slow_one(tmp_path, devices, verdict):
    """A real race in the wheel's kernel (JAX 0.10.2, unchanged upstream in August 2026). The
    wait for step k counts (k+1)*num_sms signals of any block of the sender, and a block with
    nothing to send (no tile with n_idx == 0) signals at once. With two SMs and three devices,
    the sender's idle block signals for step 0 and, having passed its own step-0 wait, for
    step 1: two signals, so the receiver starts reading scratch slot 0 while the sender's
    other block is still storing its tile into it. Two devices have no step 1 that sends."""
    [result] = verify_path(wheel_driver(tmp_path, "collective_matmul_mgpu", sms=2), [devices])
    assert result.error is None, result.error
    assert result.verdict.value == verdict, [v.message for v in result.violations]
    if verdict == "safe":
        return
    wheel_file = wheel_module("collective_matmul_mgpu").__file__
    [race] = result.errors
    assert race.kind == "data_race"
    assert race.location.line == line_of(wheel_file, "plgpu.copy_smem_to_gmem(a_smem, send_ref.at[")
    assert "writes scratch_ref on device" in race.message


MATMUL_WAIT = "pl.semaphore_wait(received_sem, value=(device_offset + 1) * num_sms, decrement=False)"
MATMUL_SIGNAL = "pl.semaphore_signal(received_sem, device_id=send_dev_id)\n"


def test_collective_matmul_waiting_for_one_more_signal_is_a_deadlock(tmp_path):
    # Each device waits for a signal its sender would only send after passing the same
    # wait: the waits form a cycle around the ring.
    bad_wait = MATMUL_WAIT.replace("* num_sms,", "* num_sms + 1,")
    path, source = mutant(tmp_path, "collective_matmul_mgpu", MATMUL_WAIT, bad_wait)
    [result] = verify_path(path, [4])
    assert {v.kind for v in result.errors} == {"deadlock"}
    [violation] = result.errors
    assert violation.location.line == line_of(source, bad_wait)
    assert len(violation.cycle) >= 4  # every device is in it


def test_collective_matmul_dropped_signal_is_caught(tmp_path):
    path, source = mutant(tmp_path, "collective_matmul_mgpu", MATMUL_SIGNAL, "pass\n")
    [result] = verify_path(path, [8])
    assert {v.kind for v in result.errors} == {"unsatisfied_wait"}
    assert result.errors[0].location.line == line_of(source, MATMUL_WAIT)
