"""Warp-level `core_map` (plgpu.WarpMesh, plgpu.warp_map) on Mosaic GPU: each warp of a
Pallas thread is a thread of the protocol, forked and joined by the warpgroup barriers of
Lane lowering (semcheck/lower/gpu_warps.py), and what Mosaic GPU refuses in warp code is an
error at the kernel's line."""

from __future__ import annotations

import functools

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from semcheck import ir
from semcheck.api import check_protocol
from semcheck.engines.options import ExplicitOptions
from tests.test_gpu_lowering import body, error, gpu_call, protocol
from tests.tpu_kernels import line_of

HERE = __file__


def _kinds(instrs) -> list[str]:
    return [type(i).__name__ for i in instrs]


def test_each_warp_that_does_something_is_a_thread_forked_and_joined_by_its_pallas_thread():
    def kernel(x_ref, o_ref, barrier):
        @pl.core_map(plgpu.WarpMesh(axis_name="warp"))
        def _():
            warp = lax.axis_index("warp")

            @pl.when(warp == 2)
            def _():
                plgpu.barrier_arrive(barrier)

        plgpu.barrier_wait(barrier)

    p = protocol(gpu_call(kernel, grid=(1,), scratch=[plgpu.Barrier()]), devices=1)
    # warps 1 and 3 do nothing the protocol sees, so they take no part in the fork
    assert sorted(t.sub for t in p.threads) == [0, 2]
    parent, warp = body(p, sub=0), body(p, sub=2)
    assert _kinds(parent) == ["Signal", "Wait", "Wait"]  # fork warp 2, join warp 2, the barrier
    fork, join, wait = parent
    assert (fork.sem.alloc, fork.sem.index) == ("warp_fork", 2)
    assert (join.sem.alloc, join.sem.index, join.decrement) == ("warp_join", 2, True)
    assert wait.sem.alloc == "barrier"
    assert _kinds(warp) == ["Wait", "Signal", "Signal"]  # fork, the arrival, join
    assert warp[1].sem.alloc == "barrier"
    assert fork.loc.line == line_of(HERE, '@pl.core_map(plgpu.WarpMesh(axis_name="warp"))')
    result = check_protocol(p)
    assert result.verdict.value == "safe"
    assert result.stats.states == 7  # one schedule: the fork and join order all six steps
    assert any("warp-level core_map" in n for n in result.notes)


def test_warp_threads_are_numbered_after_the_pallas_threads_of_the_block():
    def kernel(x_ref, o_ref, barrier):
        @plgpu.warp_map
        def _(warp):
            @pl.when(warp == 1)
            def _():
                plgpu.barrier_arrive(barrier)

    p = protocol(gpu_call(kernel, grid=(1,), num_threads=2, thread_name="wg",
                          scratch=[plgpu.Barrier(num_arrivals=2)]), devices=1)
    # warp 1 of Pallas thread t is thread 1 * num_threads + t
    assert sorted(t.sub for t in p.threads) == [0, 1, 2, 3]
    assert {d.name for d in p.semaphores} >= {"warp_fork_thread0", "warp_fork_thread1"}


def test_the_bodies_of_successive_core_maps_follow_each_other_in_a_warps_program():
    def kernel(x_ref, o_ref, barrier):
        for _ in range(2):
            @plgpu.warp_map
            def _(warp):
                @pl.when(warp == 1)
                def _():
                    plgpu.barrier_arrive(barrier)

        plgpu.barrier_wait(barrier)

    p = protocol(gpu_call(kernel, grid=(1,), scratch=[plgpu.Barrier(num_arrivals=2)]), devices=1)
    assert _kinds(body(p, sub=1)) == ["Wait", "Signal", "Signal"] * 2
    result = check_protocol(p)
    assert result.verdict.value == "safe", [v.message for v in result.violations]


def test_a_warp_reading_smem_before_the_barrier_wait_races_with_the_tma_copy():
    def kernel(x_ref, o_ref, tile, barrier):
        @plgpu.warp_map
        def _(warp):
            @pl.when(warp == 0)
            def _():
                plgpu.copy_gmem_to_smem(x_ref, tile, barrier)

            @pl.when(warp == 1)
            def _():
                o_ref[0, 0] = tile[0, 0]  # read before the wait
                plgpu.barrier_wait(barrier)

    scratch = [plgpu.SMEM((8, 128), jnp.float32), plgpu.Barrier()]
    p = protocol(gpu_call(kernel, grid=(1,), scratch=scratch), devices=1)
    result = check_protocol(p)
    assert {v.kind for v in result.errors} == {"data_race"}
    lines = {v.location.line for v in result.errors} | {r.line for v in result.errors for r in v.related}
    assert line_of(HERE, "o_ref[0, 0] = tile[0, 0]  # read before the wait") in lines


def test_code_after_the_join_is_ordered_after_every_warp():
    def kernel(x_ref, o_ref, tile):
        @plgpu.warp_map
        def _(warp):
            @pl.when(warp == 3)
            def _():
                tile[0, 0] = 1.0

        o_ref[...] = tile[...]  # after the join: no race with warp 3's store

    p = protocol(gpu_call(kernel, grid=(1,), scratch=[plgpu.SMEM((8, 128), jnp.float32)]), devices=1)
    result = check_protocol(p)
    assert result.verdict.value == "safe", [v.message for v in result.violations]


def test_another_axis_inside_a_warp_body_is_an_error_at_its_line():
    def kernel(x_ref, o_ref):
        @plgpu.warp_map
        def _(warp):
            x_ref[0, 0] = lax.axis_index("g0").astype(jnp.float32)  # not the warp axis

    e = error(gpu_call(kernel, grid=(2,)))
    assert "only its warp axis" in e.message
    assert e.line == line_of(HERE, 'lax.axis_index("g0").astype(jnp.float32)  # not the warp axis')


def test_a_vector_load_in_warp_code_is_an_error():
    def kernel(x_ref, o_ref):
        @plgpu.warp_map
        def _(warp):
            o_ref[0] = x_ref[0]  # a whole row

    e = error(gpu_call(kernel, grid=(1,)))
    assert "warp-level code can only load scalars" in e.message
    assert e.line == line_of(HERE, "o_ref[0] = x_ref[0]  # a whole row")


def test_a_wait_after_warps_waited_unequally_is_an_error_naming_the_core_map():
    def kernel(x_ref, o_ref, barrier):
        plgpu.barrier_arrive(barrier)

        @plgpu.warp_map
        def _(warp):
            @pl.when(warp == 0)
            def _():
                plgpu.barrier_wait(barrier)

        plgpu.barrier_arrive(barrier)
        plgpu.barrier_wait(barrier)  # warp 0 is at phase 1, warps 1-3 at phase 0

    e = error(gpu_call(kernel, grid=(1,), scratch=[plgpu.Barrier()]))
    assert "a different number of times in the warp-level core_map" in e.message
    assert e.line == line_of(HERE, "plgpu.barrier_wait(barrier)  # warp 0 is at phase 1")


def test_a_warp_core_map_without_auto_barriers_is_refused():
    def kernel(x_ref, o_ref):
        @plgpu.warp_map
        def _(warp):
            pass

    e = error(gpu_call(kernel, grid=(1,), compiler_params=plgpu.CompilerParams(unsafe_no_auto_barriers=True)))
    assert "unsafe_no_auto_barriers" in e.message


def test_a_cluster_barrier_arrival_from_a_warp_is_refused():
    def kernel(x_ref, o_ref):
        @functools.partial(pl.run_scoped, barrier=plgpu.ClusterBarrier(collective_axes=("c",)))
        def _(barrier):
            @plgpu.warp_map
            def _(warp):
                plgpu.barrier_arrive(barrier)

    e = error(gpu_call(kernel, grid=(1,), cluster=(2,), cluster_names=("c",)))
    assert "ClusterBarrier from warp-level code" in e.message


def test_warp_threads_are_in_the_protocol_ir():
    def kernel(x_ref, o_ref, barrier):
        @plgpu.warp_map
        def _(warp):
            plgpu.barrier_arrive(barrier)

    p = protocol(gpu_call(kernel, grid=(2,), scratch=[plgpu.Barrier(num_arrivals=4)]))
    assert sorted((t.device, t.core, t.sub) for t in p.threads) == [
        (d, b, s) for d in range(2) for b in range(2) for s in range(4)
    ]
    assert all(isinstance(t, ir.Thread) for t in p.threads)


def test_both_engines_find_the_same_racing_pairs_between_warps():
    """Two warps storing into one SMEM cell race; the Pallas thread's read after the join
    races with neither, in both engines."""
    from tests.agreement import assert_engines_agree

    def kernel(x_ref, o_ref, tile):
        @plgpu.warp_map
        def _(warp):
            @pl.when(warp == 1)
            def _():
                tile[0, 0] = 1.0  # warp 1's store

            @pl.when(warp == 2)
            def _():
                tile[0, 0] = 2.0  # warp 2's store

        o_ref[0, 0] = tile[0, 0]

    p = protocol(gpu_call(kernel, grid=(1,), scratch=[plgpu.SMEM((8, 128), jnp.float32)]), devices=1)
    by_search, _ = assert_engines_agree(p)
    races = [f for f, _, _ in by_search.findings.values() if f.kind.value == "data_race"]
    assert len(races) == 1
    lines = {line_of(HERE, "tile[0, 0] = 1.0  # warp 1's store"), line_of(HERE, "tile[0, 0] = 2.0  # warp 2's store")}
    [race] = races
    assert {race.loc.line, race.other.line} == lines


def _warp_kernels():
    """Kernels where some warps are idle: a race, a phase overrun, a hang, and a safe one."""
    def racy(x_ref, o_ref, tile, barrier):
        @plgpu.warp_map
        def _(warp):
            @pl.when(warp == 0)
            def _():
                plgpu.copy_gmem_to_smem(x_ref, tile, barrier)

            @pl.when(warp == 3)
            def _():
                o_ref[0, 0] = tile[0, 0]
                plgpu.barrier_wait(barrier)

    def overrun(x_ref, o_ref, tile, barrier):
        @plgpu.warp_map
        def _(warp):
            @pl.when(warp == 1)
            def _():
                plgpu.barrier_arrive(barrier)
                plgpu.barrier_arrive(barrier)

            @pl.when(warp == 2)
            def _():
                plgpu.barrier_wait(barrier)

    def hangs(x_ref, o_ref, tile, barrier):
        @plgpu.warp_map
        def _(warp):
            @pl.when(warp == 2)
            def _():
                plgpu.barrier_wait(barrier)

    def safe(x_ref, o_ref, tile, barrier):
        @plgpu.warp_map
        def _(warp):
            @pl.when(warp == 1)
            def _():
                plgpu.copy_gmem_to_smem(x_ref, tile, barrier)
                plgpu.barrier_wait(barrier)
                tile[0, 0] = 1.0

        o_ref[0, 0] = tile[0, 0]

    return [racy, overrun, hangs, safe]


def test_leaving_idle_warps_out_finds_exactly_what_keeping_them_finds(monkeypatch):
    from semcheck.engines.explicit import search as explicit
    from semcheck.lower import gpu_warps
    from semcheck.semantics import System

    scratch = [plgpu.SMEM((8, 128), jnp.float32), plgpu.Barrier()]
    kinds = {}
    for kernel in _warp_kernels():
        found = {}
        for prune in (True, False):
            monkeypatch.setattr(gpu_warps, "PRUNE_IDLE_WARPS", prune)
            p = protocol(gpu_call(kernel, grid=(1,), scratch=scratch), devices=1)
            run = explicit.explore(System(p), ExplicitOptions(reduce=False, silence_reported_races=False))
            assert run.exhausted is None
            # a finding's key names threads by index, which differ; compare what and where
            found[prune] = ({(f.kind, f.loc, f.other) for f, _, _ in run.findings.values()}, len(p.threads))
        assert found[True][0] == found[False][0], kernel.__name__
        assert found[True][1] < found[False][1] == 4
        kinds[kernel.__name__] = {kind.value for kind, _, _ in found[True][0]}
    assert kinds == {"racy": {"data_race"}, "overrun": {"barrier_phase_overrun"},
                     "hangs": {"unsatisfied_wait"}, "safe": set()}


def test_a_warp_keeps_its_own_phases_from_one_core_map_to_the_next():
    """Each lane keeps its barrier parities in its own registers, so a warp that waited on a
    barrier in one core_map waits for the next phase in the next one; only a wait by the
    whole warpgroup on a barrier the warps count differently is an error."""
    def kernel(x_ref, o_ref, barrier):
        for _ in range(2):
            plgpu.barrier_arrive(barrier)

            @plgpu.warp_map
            def _(warp):
                @pl.when(warp == 1)
                def _():
                    plgpu.barrier_wait(barrier)

    p = protocol(gpu_call(kernel, grid=(1,), scratch=[plgpu.Barrier()]), devices=1)
    waits = [i for i in body(p, sub=1) if isinstance(i, ir.Wait) and i.sem.alloc == "barrier"]
    assert [w.value for w in waits] == [1, 2]  # phases 0 and 1
    assert check_protocol(p).verdict.value == "safe"
