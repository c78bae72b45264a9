"""Every modelling choice a verdict can rest on is stated in the result, with its basis in
JAX 0.10.2's source, and only when the kernel relies on it; and the reading of how the
TensorCores of one chip enter a kernel decides JAX's own core-local barrier, in both
engines (semcheck/passes/core_entry.py, docs/semantics.md)."""

from __future__ import annotations

import jax
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from semcheck import ir
from semcheck.api import check_protocol
from semcheck.passes.core_entry import ARRIVE as CORE_ARRIVE
from semcheck.result import Verdict
from tests.tpu_kernels import mesh, protocols

REGULAR = pltpu.SemaphoreType.REGULAR
CORES = 2
BARRIER_BASIS = "jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py"
SCRATCH_BARRIER_BASIS = "jax/_src/pallas/mosaic/lowering.py"
CORE_ENTRY_BASIS = "jax/_src/pallas/mosaic/helpers.py"


def core_kernel(body, *, collective_id=None, scratch=()):
    """per_device(block) running `body(x_hbm, o_hbm, *scratch)` once on each TensorCore."""
    cores = pltpu.create_tensorcore_mesh("core", num_cores=CORES)
    params = pltpu.CompilerParams(
        collective_id=collective_id, allow_collective_id_without_custom_barrier=collective_id is not None
    )

    def per_device(block):
        return pl.kernel(body, out_type=jax.ShapeDtypeStruct(block.shape, block.dtype), mesh=cores,
                         compiler_params=params, scratch_types=list(scratch))(block)

    return per_device


def jax_core_local_barrier(x_hbm, o_hbm):
    """The core-local barrier of JAX's own multi-core tests: every core signals every core's
    run_scoped REGULAR semaphore with `device_id={'core': j}`, then waits for all of them."""

    def scoped(core_sem):
        for j in range(CORES):
            pl.semaphore_signal(core_sem, 1, device_id={"core": j})
        pl.semaphore_wait(core_sem, CORES)
        rows = pl.ds(lax.axis_index("core") * 8, 8)
        pltpu.sync_copy(x_hbm.at[rows], o_hbm.at[rows])

    pl.run_scoped(scoped, REGULAR)


def kinds(result) -> set[str]:
    return {v.kind for v in result.errors}


@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.parametrize("engine", ["explicit", "z3"])
def test_jax_core_barrier_is_safe_when_cores_enter_together_and_early_when_they_do_not(engine, devices):
    [p] = protocols(core_kernel(jax_core_local_barrier, collective_id=7), mesh((devices,)), rows=8 * CORES)
    together = check_protocol(p, engine=engine)
    apart = check_protocol(p, engine=engine, cores_enter_together=False, exhaustive=True)
    assert together.verdict is Verdict.SAFE, together.errors
    assert apart.verdict is Verdict.VIOLATION and kinds(apart) == {"remote_before_entry"}
    # The finding says which reading it rests on.
    assert all("--no-assume-cores-enter-together" in v.message for v in apart.errors)
    # and names, in a field, the switch that takes the other reading
    assert all([r.switch for r in v.rests_on] == ["--assume-cores-enter-together"] for v in apart.errors)
    from semcheck.report import json as json_report, origins

    assert json_report.violation_dict(apart.errors[0])["rests_on"][0]["switch"] == "--assume-cores-enter-together"
    assert any(line.startswith("    rests on: ") and "--assume-cores-enter-together checks the other reading" in line
               for line in origins.provenance_lines(apart.errors[0]))
    assert any("entering and leaving each invocation of the kernel together" in n and CORE_ENTRY_BASIS in n
               for n in together.notes)
    assert any("entering the kernel on their own" in n for n in apart.notes)
    if engine == "explicit":  # the joint entry adds the cores' arrive/release steps, nothing else
        # (24 per device with the counting cut of the reduction; the other reading's count is unchanged)
        assert (together.stats.states, apart.stats.states) == (24 * devices, 37 * devices)


def test_joint_entry_is_added_only_where_cores_talk_and_no_device_barrier_holds_them():
    [talking] = protocols(core_kernel(jax_core_local_barrier, collective_id=7), mesh((2,)), rows=8 * CORES)
    [behind_barrier] = protocols(core_kernel(jax_core_local_barrier), mesh((2,)), rows=8 * CORES)

    def silent(x_hbm, o_hbm):
        rows = pl.ds(lax.axis_index("core") * 8, 8)
        pltpu.sync_copy(x_hbm.at[rows], o_hbm.at[rows])

    [quiet] = protocols(core_kernel(silent, collective_id=7), mesh((2,)), rows=8 * CORES)
    from semcheck.passes.core_entry import apply

    def has_joint_entry(p):
        return CORE_ARRIVE in {d.name for d in apply(p).semaphores}

    assert has_joint_entry(talking)
    assert not has_joint_entry(behind_barrier) and not has_joint_entry(quiet)
    assert CORE_ARRIVE not in {d.name for d in apply(talking, together=False).semaphores}
    # The default barrier already holds every core back until all have entered: safe either way.
    for together in (True, False):
        assert check_protocol(behind_barrier, engine="explicit", cores_enter_together=together).verdict is Verdict.SAFE


def test_joint_entry_holds_across_invocations():
    from semcheck.passes.invocations import repeat

    [p] = protocols(core_kernel(jax_core_local_barrier, collective_id=7), mesh((2,)), rows=8 * CORES)
    twice = repeat(p, 2)
    for engine in ("explicit", "z3"):
        assert check_protocol(twice, engine=engine).verdict is Verdict.SAFE
        # Apart, a core can also enter the next invocation while its sibling's signal is due.
        assert "remote_before_entry" in kinds(check_protocol(twice, engine=engine, cores_enter_together=False))


def test_core_entry_note_only_for_multi_core_kernels():
    [multi] = protocols(core_kernel(jax_core_local_barrier, collective_id=7), mesh((2,)), rows=8 * CORES)
    one_core = pltpu.create_tensorcore_mesh("core", num_cores=1)

    def per_device(block):
        return pl.kernel(jax_core_local_barrier, out_type=jax.ShapeDtypeStruct(block.shape, block.dtype),
                         mesh=one_core)(block)

    [single] = protocols(per_device, mesh((2,)), rows=8 * CORES)
    entry_notes = [n for n in check_protocol(single, engine="explicit").notes if "TensorCores of one chip" in n]
    assert single.cores == 1 and entry_notes == []
    assert any("TensorCores of one chip" in n for n in check_protocol(multi, engine="explicit").notes)


def test_default_device_barrier_rule_is_stated_with_its_basis():
    [with_barrier] = protocols(core_kernel(jax_core_local_barrier), mesh((2,)), rows=8 * CORES)
    [without] = protocols(core_kernel(jax_core_local_barrier, collective_id=7), mesh((2,)), rows=8 * CORES)
    [ran] = [n for n in with_barrier.notes if "barrier across every device and core" in n]
    [skipped] = [n for n in without.notes if "no default device barrier runs before the body" in n]
    assert BARRIER_BASIS in ran and BARRIER_BASIS in skipped
    assert skipped.startswith("collective_id=7 is set")


def test_one_thread_relies_on_no_device_barrier_rule():
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def per_device(block):
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype))(block)

    [p] = protocols(per_device, mesh((1,)))
    assert not [n for n in p.notes if "device barrier" in n]


def test_scratch_barrier_semaphore_is_stated_only_when_allocated():
    def with_scratch_barrier(x_hbm, o_hbm, sem):
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 1)

    def with_regular(x_hbm, o_hbm, sem):
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 1)

    [barrier] = protocols(core_kernel(with_scratch_barrier, collective_id=7, scratch=[pltpu.SemaphoreType.BARRIER]),
                          mesh((2,)), rows=8 * CORES)
    [regular] = protocols(core_kernel(with_regular, collective_id=7, scratch=[REGULAR]), mesh((2,)), rows=8 * CORES)
    [note] = [n for n in barrier.notes if "scratch SemaphoreType.BARRIER" in n]
    assert SCRATCH_BARRIER_BASIS in note and note.startswith("sem:")
    assert not [n for n in regular.notes if "SemaphoreType.BARRIER" in n]
    [decl] = [d for d in barrier.semaphores if d.name == "sem"]
    assert (decl.kind, decl.origin) == (ir.SemKind.BARRIER, ir.SemOrigin.SCRATCH)


@pytest.mark.parametrize("engine", ["explicit", "z3"])
def test_an_entry_barrier_on_a_scratch_barrier_semaphore_says_so_at_the_finding(engine):
    def body(x_hbm, o_hbm, sem):
        peer = {"x": 1 - lax.axis_index("x"), "core": lax.axis_index("core")}
        pl.semaphore_signal(sem, 1, device_id=peer)
        pl.semaphore_wait(sem, 1)

    [p] = protocols(core_kernel(body, collective_id=7, scratch=[pltpu.SemaphoreType.BARRIER]),
                    mesh((2,)), rows=8 * CORES)
    result = check_protocol(p, engine=engine)
    assert kinds(result) == {"remote_before_entry"}
    for v in result.errors:
        assert "sem is a scratch SemaphoreType.BARRIER semaphore" in v.message
        assert "--no-assume-cores-enter-together" not in v.message  # between devices: no core reading


def test_cli_option_takes_the_other_reading_of_core_entry(capsys):
    """`--no-assume-cores-enter-together` reaches the check from the command line; the default
    reading is the one JAX's code assumes (exit 0, safe)."""
    import json
    import os

    from semcheck import cli

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples", "tpu", "core_local_barrier.py")
    verdicts = {}
    for flag in ("--assume-cores-enter-together", "--no-assume-cores-enter-together"):
        code = cli.main(["verify", path, "--devices", "2", "--engine", "explicit", "--format", "json", "-q", flag])
        [result] = json.loads(capsys.readouterr().out)["results"]
        verdicts[flag] = (code, result["verdict"], {v["kind"] for v in result["violations"]})
        assert any("TensorCores of one chip" in n for n in result["notes"])
    assert verdicts == {
        "--assume-cores-enter-together": (0, "safe", set()),
        "--no-assume-cores-enter-together": (1, "violation", {"remote_before_entry"}),
    }


def test_gpu_remote_ref_stores_are_race_checked_and_carry_no_such_note():
    import os

    from semcheck.api import verify_path

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "gpu", "ready_ring.py")
    [result] = verify_path(path, [2], engine="explicit")
    assert result.verdict == "safe"
    assert not [n for n in result.notes if "plgpu.remote_ref" in n or "not checked for data races" in n]


@pytest.mark.parametrize("printer", ["pl.debug_print", "jax.debug.print"])
def test_a_print_in_a_kernel_is_noted_as_not_modelled(printer):
    # a print was dropped without a word: a reader could not tell it was seen at all
    def body(x_ref, o_ref):
        if printer == "pl.debug_print":
            pl.debug_print("copying")
        else:
            jax.debug.print("copying")
        o_ref[...] = x_ref[...]

    def plain(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def per_device(kernel):
        def call(block):
            return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype))(block)
        return call

    [printed] = protocols(per_device(body), mesh((2,)))
    [unprinted] = protocols(per_device(plain), mesh((2,)))
    [note] = [n for n in printed.notes if "print" in n]
    assert "not modelled" in note and "no effect on synchronization" in note
    assert not [n for n in unprinted.notes if "print" in n]
    result = check_protocol(printed, engine="explicit")
    assert result.verdict is Verdict.SAFE and note in result.notes
