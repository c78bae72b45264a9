"""The TPU all-gather shipped in the jax wheel (nobody on the team wrote it), as a user would
check it: a driver script that builds a mesh and calls `all_gather`. Then mutants of its
source, made here at test time, must be caught with the right violation kinds.

The kernel shares one receive semaphore between in-flight remote copies, which JAX's own
race detector reports as a data race. Finding races is another issue's job, so these tests
only pin the synchronization verdicts (no hang, no leftover, no bad id), never "race-free".
"""

from __future__ import annotations

import inspect
import os

import pytest

from semcheck.api import verify_path

SYNC_KINDS = {"deadlock", "unsatisfied_wait", "semaphore_leftover", "invalid_device_id", "invalid_core_index"}

DRIVER = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh

{import_line}

mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
x = jnp.ones((mesh.size * 8, 128), jnp.float32)
out = ag.all_gather(x, mesh=mesh, axis_name="x")
jax.block_until_ready(out)
print("all_gather", out.shape)
"""


def wheel_source() -> tuple[str, str]:
    from jax.experimental.pallas.ops.tpu import all_gather

    return os.path.abspath(all_gather.__file__), inspect.getsource(all_gather)


def write_driver(tmp_path, import_line: str) -> str:
    path = tmp_path / "driver.py"
    path.write_text(DRIVER.format(import_line=import_line))
    return str(path)


def mutant(tmp_path, replace: str, by: str) -> tuple[str, str]:
    """A copy of the wheel's all_gather with `replace` (which must occur once) replaced."""
    _, source = wheel_source()
    assert source.count(replace) == 1, f"the wheel's all_gather no longer contains {replace!r}"
    module = tmp_path / "ag_mutant.py"
    module.write_text(source.replace(replace, by))
    return write_driver(tmp_path, "import ag_mutant as ag"), str(module)


def line_of(path: str, text: str) -> int:
    with open(path, encoding="utf-8") as f:
        [number] = [n for n, line in enumerate(f, start=1) if text in line]
    return number


@pytest.mark.parametrize("devices", [2, 4, 8])
def test_wheel_all_gather_has_no_hang_leftover_or_bad_id(tmp_path, devices):
    driver = write_driver(tmp_path, "from jax.experimental.pallas.ops.tpu import all_gather as ag")
    [result] = verify_path(driver, [devices])
    assert result.error is None, result.error
    assert result.kernel == "ag_kernel" and result.devices == devices
    assert not {v.kind for v in result.errors} & SYNC_KINDS, [v.message for v in result.errors]
    wheel_file, _ = wheel_source()
    assert os.path.samefile(result.file, wheel_file)  # the kernel's own file, not the driver
    assert result.line == line_of(wheel_file, "def ag_kernel(")


@pytest.mark.parametrize("devices", [2, 4])
def test_wrong_barrier_wait_value_is_an_unsatisfied_wait(tmp_path, devices):
    driver, module = mutant(tmp_path, "pl.semaphore_wait(sem, 2)", "pl.semaphore_wait(sem, 3)")
    [result] = verify_path(driver, [devices])
    assert {v.kind for v in result.errors} == {"unsatisfied_wait"}
    [violation] = result.errors
    assert os.path.samefile(violation.location.file, module)
    assert violation.location.line == line_of(module, "pl.semaphore_wait(sem, 3)")
    assert all(b["needs"] == 3 and b["has"] == 2 for b in violation.blocked)


@pytest.mark.parametrize("devices", [2, 8])
def test_dropped_barrier_signal_is_an_unsatisfied_wait(tmp_path, devices):
    driver, module = mutant(tmp_path, "pl.semaphore_signal(sem, 1, device_id=right_neighbor)\n", "\n")
    [result] = verify_path(driver, [devices])
    assert {v.kind for v in result.errors} == {"unsatisfied_wait"}
    assert result.errors[0].location.line == line_of(module, "pl.semaphore_wait(sem, 2)")


def test_dropped_wait_in_the_loop_leaves_bytes_on_the_semaphores(tmp_path):
    driver, module = mutant(
        tmp_path,
        'with jax.named_scope("wait_right_dma"):\n        right_dma.wait()',
        'with jax.named_scope("wait_right_dma"):\n        pass',
    )
    by_devices = {r.devices: r for r in verify_path(driver, [2, 4])}
    # With two devices the loop runs once, so there is no earlier copy to wait for.
    assert not {v.kind for v in by_devices[2].errors} & SYNC_KINDS
    leftovers = by_devices[4].errors
    assert {v.kind for v in leftovers} == {"semaphore_leftover"}
    assert {"send_sem[1]", "recv_sem[1]"} <= {v.message.split()[2] for v in leftovers}
    start_line = line_of(module, "right_dma = pltpu.async_remote_copy(")
    assert all(start_line <= v.location.line <= start_line + 6 for v in leftovers)


def test_dropped_final_wait_leaves_bytes_on_the_semaphores(tmp_path):
    driver, _ = mutant(tmp_path, "    left_dma.wait()\n\n", "\n\n")
    [result] = verify_path(driver, [4])
    assert {v.kind for v in result.errors} == {"semaphore_leftover"}
