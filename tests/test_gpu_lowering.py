"""Lowering of each Mosaic GPU primitive and construct to the IR, on small kernels traced in
this process (the path of `semcheck.verify`): threads per (device, block, Pallas thread),
per-block scratch and per-launch `pl.get_global` semaphores, remote, multicast and parallel
signals, mbarrier phases, TMA copies, cluster barriers, and the errors for what Mosaic GPU
rejects."""

from __future__ import annotations

import functools
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.experimental.pallas import tpu as pltpu

from semcheck import ir
from semcheck.api import check_protocol
from semcheck.frontends.capture import capture_function, lower_captures
from semcheck.lower.gpu_kernel import BLOCK_BARRIER
from tests.tpu_kernels import line_of, mesh, sharded

HERE = __file__
REGULAR = plgpu.SemaphoreType.REGULAR


def gpu_call(kernel, *, grid=(2,), scratch=(), **kw):
    def per_device(block):
        return plgpu.kernel(
            kernel,
            out_type=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid=grid,
            grid_names=tuple(f"g{k}" for k in range(len(grid))) if "grid_names" not in kw else kw.pop("grid_names"),
            scratch_types=list(scratch),
            **kw,
        )(block)

    return per_device


def lower(per_device, devices=2):
    fn, x = sharded(per_device, mesh((devices,)))
    return lower_captures(capture_function(fn, x))


def protocol(per_device, devices=2) -> ir.Protocol:
    found, errors = lower(per_device, devices)
    assert not errors, [e.message for e in errors]
    [p] = found
    return p


def error(per_device, devices=2):
    found, errors = lower(per_device, devices)
    assert not found
    [e] = errors
    return e


def body(p: ir.Protocol, device=0, block=0, sub=0) -> tuple:
    [t] = [t for t in p.threads if (t.device, t.core, t.sub) == (device, block, sub)]
    return t.body


# --- threads and allocations ---------------------------------------------------------------


def test_one_thread_per_device_block_and_pallas_thread():
    def kernel(x_ref, o_ref):
        pass

    p = protocol(gpu_call(kernel, grid=(2, 3), num_threads=2, thread_name="wg"))
    assert (p.backend, p.frontend, p.devices, p.cores) == (ir.Backend.GPU, "gpu", 2, 6)
    assert sorted((t.device, t.core, t.sub) for t in p.threads) == [
        (d, b, s) for d in range(2) for b in range(6) for s in range(2)
    ]


def test_pl_kernel_over_a_gpu_mesh_is_captured_like_plgpu_kernel():
    def kernel(x_ref, o_ref):
        sem = pl.get_global(REGULAR)
        pl.semaphore_signal(sem)
        pl.semaphore_wait(sem, 3, decrement=False)

    def per_device(block):
        gpu_mesh = plgpu.Mesh(grid=(3,), grid_names=("blocks",))
        return pl.kernel(kernel, out_type=jax.ShapeDtypeStruct(block.shape, block.dtype), mesh=gpu_mesh)(block)

    p = protocol(per_device)
    assert (p.frontend, p.devices, p.cores) == ("gpu", 2, 3)
    assert check_protocol(p).verdict.value == "safe"


def test_grid_cluster_and_thread_axes_follow_the_block_and_thread():
    def kernel(x_ref, o_ref, sem):
        g, c, wg = lax.axis_index("g0"), lax.axis_index("c"), lax.axis_index("wg")
        pl.semaphore_signal(sem, 100 * g + 10 * c + wg + 1)

    p = protocol(gpu_call(kernel, grid=(2,), cluster=(2,), cluster_names=("c",), num_threads=2,
                          thread_name="wg", scratch=[REGULAR]))
    assert p.cores == 4  # the grid counts clusters; Mosaic GPU launches grid * cluster blocks
    for t in p.threads:
        [signal] = [i for i in t.body if isinstance(i, ir.Signal) and i.sem.alloc != BLOCK_BARRIER]
        g, c = divmod(t.core, 2)
        assert signal.inc == 100 * g + 10 * c + t.sub + 1


def test_every_thread_collective_scope_begins_with_a_barrier_of_the_blocks_threads():
    # Mosaic GPU emits gpu.barrier on entering a thread-collective run_scoped of a kernel with
    # several threads (plgpu.kernel's own scratch scope included): the k-th entry of a thread
    # waits for k arrivals of each thread. One thread needs no barrier.
    def kernel(x_ref, o_ref, sem, axes=("wg",)):
        for _ in range(2):
            pl.run_scoped(lambda tile: None, plgpu.SMEM((8, 128), jnp.float32), collective_axes=axes)

    p = protocol(gpu_call(kernel, num_threads=3, thread_name="wg", scratch=[REGULAR]))
    [decl] = [d for d in p.semaphores if d.name == BLOCK_BARRIER]
    assert (decl.kind, decl.scope, decl.arrivals_per_phase) == (ir.SemKind.MBARRIER, ir.Scope.CORE, 0)
    for t in p.threads:
        sync = [(type(i).__name__, i.value if isinstance(i, ir.Wait) else i.inc)
                for i in t.body if isinstance(i, (ir.Signal, ir.Wait)) and i.sem.alloc == BLOCK_BARRIER]
        assert sync == [("Signal", 1), ("Wait", 3), ("Signal", 1), ("Wait", 6), ("Signal", 1), ("Wait", 9)]
    single = protocol(gpu_call(functools.partial(kernel, axes=()), scratch=[REGULAR]))
    assert BLOCK_BARRIER not in {d.name for d in single.semaphores}


def test_scratch_semaphores_are_per_block_and_get_global_is_per_launch():
    def kernel(x_ref, o_ref, scratch_sem):
        shared = pl.get_global(REGULAR)
        pl.semaphore_signal(scratch_sem)
        pl.semaphore_signal(shared)

    p = protocol(gpu_call(kernel, scratch=[REGULAR]))
    by_kind = {d.kind: d for d in p.semaphores}
    assert by_kind[ir.SemKind.REGULAR].scope is ir.Scope.CORE
    glob = by_kind[ir.SemKind.GPU_GLOBAL]
    # named as the kernel's line names it (it was `global#0`)
    assert (glob.scope, glob.origin, glob.name, glob.shown_as) == (ir.Scope.DEVICE, ir.SemOrigin.GLOBAL, "shared", "")
    assert glob.loc.line == line_of(HERE, "shared = pl.get_global(REGULAR)")


def test_the_barrier_plgpu_emit_pipeline_allocates_is_named_by_the_call_the_kernel_made():
    """JAX allocates the pipeline's barrier in a run_scoped of its own and names it after
    its keyword, `barrier_ref`, which the kernel has nowhere."""
    def body(_index, x_smem, o_smem):
        o_smem[...] = x_smem[...] + 1.0

    def kernel(x_ref, o_ref, done):
        plgpu.emit_pipeline(body, grid=(1,), in_specs=[plgpu.BlockSpec((64, 128), lambda i: (0, 0))],
                            out_specs=[plgpu.BlockSpec((64, 128), lambda i: (0, 0))])(x_ref, o_ref)
        pl.semaphore_signal(done)

    p = protocol(gpu_call(kernel, grid=(1,), scratch=[REGULAR]), devices=1)
    [barrier] = [d for d in p.semaphores if d.kind is ir.SemKind.MBARRIER]
    line = line_of(HERE, "plgpu.emit_pipeline(body, grid=(1,)")  # where the call starts
    assert (barrier.name, barrier.shown_as) == ("barrier_ref", f"the barrier of `plgpu.emit_pipeline` at line {line}")
    # plgpu.kernel allocates the kernel's scratch in a run_scoped of its own too, for the
    # kernel's body: the kernel's parameter names it
    assert [(d.name, d.shown_as) for d in p.semaphores if d.kind is ir.SemKind.REGULAR and d.origin is ir.SemOrigin.SCOPED] == [("done", "")]


def test_each_get_global_call_site_is_its_own_semaphore():
    def kernel(x_ref, o_ref):
        a = pl.get_global(REGULAR)
        b = pl.get_global(REGULAR((3,)))
        pl.semaphore_signal(a)
        pl.semaphore_signal(b.at[2])

    p = protocol(gpu_call(kernel))
    globals_ = [d for d in p.semaphores if d.kind is ir.SemKind.GPU_GLOBAL]
    assert [(d.name, d.size) for d in globals_] == [("a", 1), ("b", 3)]
    signals = [i for i in body(p) if isinstance(i, ir.Signal)]
    assert [(s.sem.alloc, s.sem.index) for s in signals] == [("a", 0), ("b", 2)]


def test_a_get_global_its_line_binds_to_no_name_is_named_by_its_line():
    """A semaphore its line does not name (used in place) says where it comes from, never an
    invented `global#0`, and two such on one line say which of the line's calls each is;
    a tuple unpacked into names names each by its own; one helper called twice makes two
    semaphores under one local, told apart."""
    def make():
        sem = pl.get_global(REGULAR)  # helper
        return sem

    def kernel(x_ref, o_ref):
        pl.semaphore_signal(pl.get_global(REGULAR))  # in place
        a, b = pl.get_global(REGULAR), pl.get_global(REGULAR)  # two at once
        pl.semaphore_signal(a)
        pl.semaphore_signal(b)
        pl.semaphore_signal(pl.get_global(REGULAR), pl.semaphore_read(pl.get_global(REGULAR)))  # two in place
        pl.semaphore_signal(make())  # first call
        pl.semaphore_signal(make())  # second call

    p = protocol(gpu_call(kernel))
    in_place, two = line_of(HERE, "# in place"), line_of(HERE, "# two in place")
    helper, first_call, second_call = (line_of(HERE, f"# {what}") for what in ("helper", "first call", "second call"))
    globals_ = [(d.name, d.shown_as) for d in p.semaphores if d.kind is ir.SemKind.GPU_GLOBAL]
    assert globals_ == [
        (f"global semaphore (line {in_place})", f"the global semaphore of line {in_place}"),
        ("a", ""), ("b", ""),
        (f"global semaphore (line {two})", f"the first global semaphore of line {two}"),
        (f"global semaphore (line {two})#2", f"the second global semaphore of line {two}"),
        ("sem", f"`sem` of line {helper} (called from line {first_call})"),
        ("sem#2", f"`sem` of line {helper} (called from line {second_call})"),
    ]


def test_two_get_globals_of_one_line_read_apart_in_the_report():
    """Two `pl.get_global` of one line read alike in a report: "the global semaphore of
    line 14" both, where the line binds neither, and where it unpacks them into a tuple of
    names, which the statement should use."""
    from semcheck.report import causes, text

    def in_place(x_ref, o_ref):
        pl.semaphore_wait(pl.get_global(REGULAR), pl.semaphore_read(pl.get_global(REGULAR)) + 1)  # both in place

    line = line_of(HERE, "# both in place")
    result = check_protocol(protocol(gpu_call(in_place, grid=(1,)), devices=1))
    [v] = result.errors
    [step] = v.trace
    assert step.text == f"read the second global semaphore of line {line} = 0 into read1"
    assert step.semaphore == f"global semaphore (line {line})#2@d0"  # the model's own name stays
    first = f"the first global semaphore of line {line} on device 0"
    assert f"for {first} to reach 1" in v.message
    assert [b.semaphore for b in v.blocked] == [first]
    assert f"what could add to {first} (needs 1, has 0):" in text.render([result])

    def unpacked(x_ref, o_ref):
        started, arrived = pl.get_global(REGULAR), pl.get_global(REGULAR)
        pl.semaphore_signal(started)
        pl.semaphore_signal(arrived)
        pl.semaphore_wait(arrived, 2)  # competing waits

    line = line_of(HERE, "# competing waits")
    result = check_protocol(protocol(gpu_call(unpacked), devices=1))
    [v] = result.errors
    assert causes.statement(v.cause).startswith(f"the waits at line {line} compete for one count of `arrived`:")
    assert [s.text for s in v.trace[:2]] == ["signal started@d0 += 1 (0 -> 1)", "signal arrived@d0 += 1 (0 -> 1)"]


def test_gpu_semaphores_may_end_non_zero_and_waits_on_a_global_compete():
    def barrier(x_ref, o_ref):
        sem = pl.get_global(REGULAR)
        pl.semaphore_signal(sem)
        pl.semaphore_wait(sem, 2, decrement=False)

    result = check_protocol(protocol(gpu_call(barrier), devices=1))
    assert result.verdict.value == "safe" and result.stats.states == 5  # one path: nothing conflicts

    def competing(x_ref, o_ref):
        sem = pl.get_global(REGULAR)
        pl.semaphore_signal(sem)
        pl.semaphore_wait(sem, 2)

    result = check_protocol(protocol(gpu_call(competing), devices=1))
    assert {v.kind for v in result.errors} == {"unsatisfied_wait"}
    assert result.stats.states == 5  # both signals, then either wait takes the count


# --- signals ----------------------------------------------------------------------------------


def test_a_remote_signal_reaches_the_same_block_of_the_peer():
    def kernel(x_ref, o_ref, sem):
        right = lax.rem(lax.axis_index("x") + 1, 2)
        plgpu.semaphore_signal(sem, 1, device_id=right, memory_scope="sys")
        plgpu.semaphore_wait(sem, 1)

    p = protocol(gpu_call(kernel, scratch=[REGULAR]))
    [signal] = [i for i in body(p, device=1, block=1) if isinstance(i, ir.Signal)]
    assert (signal.sem.device, signal.sem.core) == (0, None)  # core None: the signaller's block
    assert check_protocol(p).verdict.value == "safe"


def test_multicast_signals_every_device():
    def kernel(x_ref, o_ref, sem):
        plgpu.semaphore_signal_multicast(sem, 2, collective_axes="x")
        pl.semaphore_wait(sem, 8, decrement=False)

    p = protocol(gpu_call(kernel, scratch=[REGULAR]), devices=4)
    signals = [i for i in body(p) if isinstance(i, ir.Signal)]
    assert [(s.sem.device, s.inc) for s in signals] == [(d, 2) for d in range(4)]
    assert check_protocol(p).verdict.value == "safe"


def test_parallel_signals_are_independent_signals():
    def kernel(x_ref, o_ref, a, b):
        me = lax.axis_index("x")
        plgpu.semaphore_signal_parallel(
            plgpu.SemaphoreSignal(a, device_id=1 - me),
            plgpu.SemaphoreSignal(b, device_id=me, inc=3),
        )
        pl.semaphore_wait(a, 1)
        pl.semaphore_wait(b, 3)

    p = protocol(gpu_call(kernel, grid=(1,), scratch=[REGULAR, REGULAR]))
    signals = [i for i in body(p, device=1) if isinstance(i, ir.Signal)]
    assert [(s.sem.device, s.inc) for s in signals] == [(0, 1), (1, 3)]
    assert len({s.sem.alloc for s in signals}) == 2
    assert check_protocol(p).verdict.value == "safe"


def test_semaphore_read_on_gpu_becomes_a_register():
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 2)
        n = pl.semaphore_read(sem)
        pl.semaphore_wait(sem, n, decrement=False)

    p = protocol(gpu_call(kernel, grid=(1,), scratch=[REGULAR]))
    assert any(isinstance(i, ir.Read) for i in body(p))
    assert check_protocol(p).verdict.value == "safe"


# --- mbarriers -----------------------------------------------------------------------------------


def test_each_barrier_wait_waits_for_the_next_phase():
    def kernel(x_ref, o_ref, barrier):
        for _ in range(3):
            plgpu.barrier_arrive(barrier.at[1])
        for _ in range(3):
            plgpu.barrier_wait(barrier.at[1])

    scratch = [plgpu.Barrier(num_arrivals=1, num_barriers=2)]
    p = protocol(gpu_call(kernel, grid=(1,), scratch=scratch))
    waits = [i for i in body(p) if isinstance(i, ir.Wait)]
    assert [(w.sem.index, w.value, w.decrement) for w in waits] == [(1, 1, False), (1, 2, False), (1, 3, False)]
    [decl] = [d for d in p.semaphores if d.kind is ir.SemKind.MBARRIER]
    assert decl.size == 2 and decl.scope is ir.Scope.CORE


def test_a_tma_copy_arrives_on_its_barrier_when_it_lands():
    def kernel(x_ref, o_ref, tile, barrier):
        plgpu.copy_gmem_to_smem(x_ref, tile, barrier)
        plgpu.barrier_wait(barrier)

    p = protocol(gpu_call(kernel, grid=(1,), scratch=[plgpu.SMEM((8, 128), jnp.float32), plgpu.Barrier()]))
    [start] = [i for i in body(p) if isinstance(i, ir.DmaStart)]
    assert start.send_sem is None and start.device is None
    assert start.loc.line == line_of(HERE, "plgpu.copy_gmem_to_smem(x_ref, tile, barrier)")
    result = check_protocol(p)
    # each device is a part of its own: the initial state, then start, land and wait
    assert result.verdict.value == "safe" and result.stats.states == 2 * 4
    whole = check_protocol(p, split=False)
    assert whole.verdict.value == "safe" and whole.stats.states == 7  # one initial state, then 3 steps each


def test_a_cluster_barrier_arrival_reaches_every_block_of_the_cluster():
    def kernel(x_ref, o_ref):
        @functools.partial(
            pl.run_scoped, barrier=plgpu.ClusterBarrier(collective_axes=("c",), num_arrivals=1)
        )
        def _(barrier):
            plgpu.barrier_arrive(barrier)
            plgpu.barrier_wait(barrier)

    p = protocol(gpu_call(kernel, grid=(1,), cluster=(2,), cluster_names=("c",)), devices=1)
    arrivals = [i for i in body(p, block=1) if isinstance(i, ir.Signal)]
    assert sorted(s.sem.core for s in arrivals) == [0, 1]
    [wait] = [i for i in body(p, block=1) if isinstance(i, ir.Wait)]
    assert wait.value == 2  # one arrival from each block of the cluster
    assert check_protocol(p).verdict.value == "safe"


def test_every_run_scoped_entry_initializes_its_barriers_afresh():
    def kernel(x_ref, o_ref):
        @pl.loop(0, 2)
        def _(i):
            @functools.partial(pl.run_scoped, barrier=plgpu.Barrier())
            def _(barrier):
                plgpu.barrier_arrive(barrier)
                plgpu.barrier_wait(barrier)

    p = protocol(gpu_call(kernel, grid=(1,)), devices=1)
    waits = [i for i in body(p) if isinstance(i, ir.Wait)]
    assert len({w.sem.alloc for w in waits}) == 2 and {w.value for w in waits} == {1}


# --- what Mosaic GPU rejects ---------------------------------------------------------------------


@pytest.mark.parametrize("what", [pltpu.SemaphoreType.REGULAR, plgpu.SMEM((8,), jnp.float32)], ids=["tpu_sem", "smem"])
def test_get_global_of_anything_but_a_gmem_semaphore_is_an_error_at_its_line(what):
    def kernel(x_ref, o_ref):
        sem = pl.get_global(what)  # the offending line
        del sem
        o_ref[...] = x_ref[...]

    e = error(gpu_call(kernel))
    assert "get_global only supports semaphores" in e.message and "get_global" in e.message
    assert e.line == line_of(HERE, "sem = pl.get_global(what)  # the offending line")


def test_a_remote_gpu_scope_signal_is_an_error():
    def kernel(x_ref, o_ref, sem):
        plgpu.semaphore_signal(sem, 1, device_id=0, memory_scope="gpu")

    assert "memory_scope='sys'" in error(gpu_call(kernel, scratch=[REGULAR])).message


def test_a_block_collective_run_scoped_is_an_error():
    def kernel(x_ref, o_ref):
        @functools.partial(pl.run_scoped, sem=REGULAR, collective_axes="g0")
        def _(sem):
            pl.semaphore_signal(sem)

    assert "pl.get_global" in error(gpu_call(kernel)).message


def test_cli_exits_2_on_get_global_of_a_buffer(tmp_path):
    script = tmp_path / "bad_global.py"
    script.write_text(
        "import jax, jax.numpy as jnp, numpy as np\n"
        "from jax.sharding import AxisType, Mesh, PartitionSpec as P\n"
        "from jax.experimental import pallas as pl\n"
        "from jax.experimental.pallas import mosaic_gpu as plgpu\n"
        "def kernel(x_ref, o_ref):\n"
        "    buf = pl.get_global(plgpu.SMEM((8,), jnp.float32))\n"
        "    o_ref[...] = x_ref[...]\n"
        "mesh = Mesh(np.array(jax.devices()), ('x',), axis_types=(AxisType.Auto,))\n"
        "call = lambda b: plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct(b.shape, b.dtype), grid=(1,), grid_names=('g',))(b)\n"
        "f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P('x'), out_specs=P('x'), check_vma=False))\n"
        "jax.block_until_ready(f(jnp.ones((mesh.size * 8, 128), jnp.float32)))\n"
    )
    proc = subprocess.run([sys.executable, "-m", "semcheck", "verify", str(script), "--devices", "2"],
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "get_global only supports semaphores" in proc.stdout + proc.stderr
    assert "bad_global.py:6" in proc.stdout + proc.stderr


def test_a_barrier_two_phases_ahead_of_its_waiter_is_a_phase_overrun():
    def kernel(x_ref, o_ref, barrier):
        plgpu.barrier_arrive(barrier)
        plgpu.barrier_arrive(barrier)
        plgpu.barrier_wait(barrier)  # phase 0, but phase 1 has completed too
        plgpu.barrier_wait(barrier)

    p = protocol(gpu_call(kernel, grid=(1,), scratch=[plgpu.Barrier()]), devices=1)
    [decl] = [d for d in p.semaphores if d.kind is ir.SemKind.MBARRIER]
    assert decl.arrivals_per_phase == 1
    result = check_protocol(p, exhaustive=True)  # every state: the count below is the whole search's
    [violation] = result.errors
    assert violation.kind == "barrier_phase_overrun"
    assert violation.location.line == line_of(HERE, "plgpu.barrier_wait(barrier)  # phase 0, but")
    assert result.stats.states == 5


def test_cluster_barrier_phases_count_arrivals_from_every_block():
    def kernel(x_ref, o_ref):
        @functools.partial(
            pl.run_scoped, barrier=plgpu.ClusterBarrier(collective_axes=("c",), num_arrivals=2)
        )
        def _(barrier):
            pass

    p = protocol(gpu_call(kernel, grid=(1,), cluster=(2,), cluster_names=("c",)), devices=1)
    [decl] = [d for d in p.semaphores if d.kind is ir.SemKind.MBARRIER]
    assert decl.arrivals_per_phase == 4


def test_allocations_take_the_kernel_body_parameter_names():
    """plgpu.kernel calls the body through a `*refs` wrapper, whose names (`refs[0]`) the
    jaxpr keeps; reports name the body's own parameters."""

    def named_kernel(x_ref, o_ref, done):
        o_ref[...] = x_ref[...]
        pl.semaphore_signal(done, 1)
        pl.semaphore_wait(done, 1)

    p = protocol(gpu_call(named_kernel, scratch=[REGULAR]))
    names = {b.name for b in p.buffers} | {d.name for d in p.semaphores}
    assert {"x_ref", "o_ref", "done"} <= names
    assert not any("refs[" in n for n in names)



@pytest.mark.parametrize("rows", [4, 8])
def test_a_view_across_tiled_dims_is_widened_and_its_race_uncertain_unless_it_fills_them(rows):
    """A TilingTransform stores the logical (8, 128) tile as (1, 4, 8, 32); rows 0:4 of
    the logical view span two allocation dims, kept whole, so the early read's race may be
    one no run reaches (a warning, inconclusive). All 8 rows fill those dims: certain."""
    def kernel(x_ref, o_ref, tiled, landed):
        plgpu.copy_gmem_to_smem(x_ref, tiled, landed)
        o_ref[0:rows] = tiled[0:rows]
        plgpu.barrier_wait(landed)

    scratch = [plgpu.SMEM((8, 128), jnp.float32, transforms=(plgpu.TilingTransform((8, 32)),)), plgpu.Barrier()]
    p = protocol(gpu_call(kernel, grid=(1,), scratch=scratch))
    [load] = [i for i in body(p) if isinstance(i, ir.Load)]
    assert (load.region.start, load.region.size) == ((0, 0, 0, 0), (1, 4, 8, 32))
    result = check_protocol(p)
    if rows == 4:
        assert load.region.widened and "along dims 0, 2" in load.region.widened
        assert result.verdict.value == "inconclusive"
        assert [(v.kind, v.severity) for v in result.violations] == [("data_race", "warning")]
    else:
        assert load.region.widened is None
        assert result.verdict.value == "violation"
        assert [(v.kind, v.severity) for v in result.violations] == [("data_race", "error")]


def test_each_block_writing_its_own_rows_of_a_reshaped_output_does_not_race():
    """A GMEM output viewed through a reshape (rows, 128) -> (1, rows, 128), each block
    storing its own half of the rows: the view is followed element by element (as on TPU),
    so the two blocks' stores are disjoint boxes and the check is safe. Taken whole, the
    stores raced and the result was inconclusive."""
    def kernel(x_ref, o_ref):
        half = o_ref.shape[0] // 2
        rows = pl.ds(lax.axis_index("g0") * half, half)
        o_ref.reshape((1,) + o_ref.shape).at[:, rows, :][...] = x_ref.reshape((1,) + x_ref.shape).at[:, rows, :][...]

    p = protocol(gpu_call(kernel, grid=(2,)))
    [first] = [i.region for i in body(p, block=0) if isinstance(i, ir.Store)]
    [second] = [i.region for i in body(p, block=1) if isinstance(i, ir.Store)]
    assert (first.start, first.size, first.widened) == ((0, 0), (4, 128), None)
    assert (second.start, second.size, second.widened) == ((4, 0), (4, 128), None)
    result = check_protocol(p)
    assert (result.verdict.value, result.stats.states) == ("safe", 10)


@pytest.mark.parametrize("order, signals, refused", [
    ("reversed", True, True), ("in order", True, False), ("reversed", False, False)])
def test_a_communicating_kernel_over_a_mesh_out_of_device_id_order_is_not_lowerable(order, signals, refused):
    """Mosaic GPU addresses peers by device id: its lowering refuses a kernel that reaches
    another device over a mesh not listing the devices in id order (JAX 0.10.2,
    jax/experimental/mosaic/gpu/core.py). A kernel that stays on its device is not asked."""
    from jax.sharding import AxisType, Mesh
    import numpy as np

    def ordered_kernel(x_ref, o_ref, sem):
        if signals:
            pl.semaphore_signal(sem, 1, device_id=1 - lax.axis_index("x"))
            pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...]

    devices = jax.devices()[:2]
    m = Mesh(np.array(devices[::-1] if order == "reversed" else devices), ("x",), axis_types=(AxisType.Auto,))
    fn, x = sharded(gpu_call(ordered_kernel, grid=(1,), scratch=[REGULAR]), m)
    [p], errors = lower_captures(capture_function(fn, x))
    assert not errors
    kinds = [(f.kind.value, f.loc.line) for f in p.findings]
    assert kinds == ([("not_lowerable", line_of(HERE, "def ordered_kernel("))] if refused else [])
    if refused:
        [f] = p.findings
        assert "device ids [1, 0]" in f.message and f"{line_of(HERE, 'pl.semaphore_signal(sem, 1, device_id=1 - lax')}" in f.message
    result = check_protocol(p)
    assert result.verdict.value == ("violation" if refused else "safe")
