"""Error results of a sweep's task say what was checked: the kernel's mesh, not --devices.

A kernel that cannot be lowered (with no prefix to check) or cannot be repeated
(`--invocations` on Mosaic GPU) still ran on its mesh; its error result has the mesh's
device count and, when that is smaller than --devices, the same mesh_smaller_than_devices
warning a checked kernel gets. `tasks.run_task` is run here on a load that is faked (no
capture), so these need no JAX."""

import pytest

from semcheck.run import checks, tasks
from semcheck.errors import LoadError
from semcheck.ir import Loc
from semcheck.model import ProtocolBuilder


def _run(monkeypatch, tmp_path, loaded, requested, **options):
    monkeypatch.setattr(checks, "load_within", lambda *args, **kwargs: loaded)
    task = tasks.Task(0, "kernel.py", requested, tasks.SweepOptions(**options), str(tmp_path))
    return tasks.run_task(task).results


def _lowering_error(mesh_devices):
    error = LoadError("semcheck cannot lower this kernel", Loc("kernel.py", 12))
    error.kernel, error.devices = "k", mesh_devices
    return error


def _kinds(result):
    return [v.kind for v in result.violations]


@pytest.mark.parametrize("mesh, requested, warned", [(2, 4, True), (4, 4, False)])
def test_a_kernel_that_cannot_be_lowered_is_reported_at_its_mesh(monkeypatch, tmp_path, mesh, requested, warned):
    [result] = _run(monkeypatch, tmp_path, [_lowering_error(mesh)], requested)
    assert result.verdict.value == "error" and result.devices == mesh
    assert _kinds(result) == (["mesh_smaller_than_devices"] if warned else [])


def test_an_error_with_no_mesh_known_keeps_the_requested_count(monkeypatch, tmp_path):
    error = _lowering_error(None)
    [result] = _run(monkeypatch, tmp_path, [error], 4)
    assert result.devices == 4 and _kinds(result) == []


def test_a_gpu_kernel_run_twice_is_an_error_at_its_mesh(monkeypatch, tmp_path):
    p = ProtocolBuilder("gpu_kernel", devices=2, backend="gpu")
    p.thread(0).signal(p.semaphore("s"))
    [result] = _run(monkeypatch, tmp_path, [p.build()], 4, invocations=2)
    assert result.verdict.value == "error" and "--invocations > 1" in result.error
    assert result.devices == 2 and _kinds(result) == ["mesh_smaller_than_devices"]


def test_a_captured_kernel_that_cannot_be_lowered_carries_its_mesh_size():
    from semcheck.frontends.capture import lower_captures
    from semcheck.lower import KernelCapture, MeshShape

    capture = KernelCapture("no_such_primitive", {"name": "k"}, 0, MeshShape(("x",), (2,)))
    protocols, [error] = lower_captures([capture])
    assert protocols == [] and error.devices == 2 and error.to_load_error().devices == 2
