"""Warp-level `core_map` on Mosaic GPU (`pl.core_map(plgpu.WarpMesh(axis_name=...))` and
`plgpu.warp_map`), rules for the "gpu" backend: one more thread level under a Pallas thread.

What JAX 0.10.2 does with it (jax/_src/pallas/mosaic_gpu/lowering.py,
`_core_map_lowering_rule` and `_mpmd_map_lowering_rule`): the body runs once per warp of the
warpgroup (`WarpMesh` has 4 warps, core.py), with `lax.axis_index` of the warp axis being
the warp's index in the warpgroup (`_axis_index_rule`: `warp_idx % 4`; any other named axis
raises there). Under the default Lane lowering semantics, with automatic barriers on (unless
`unsafe_no_auto_barriers`), the warpgroup meets at a `warpgroup_barrier` before the body and
again after it, so the core_map is a fork and a join of the four warps.

How semcheck models it: warp 0 is the Pallas thread itself (what the warpgroup ran before
the fork is in its program order); warps 1-3 are threads of their own. At the fork the
Pallas thread signals one fork semaphore per warp and each warp waits on its own; at the
join each warp signals its join semaphore and the Pallas thread waits for all three. A warp
whose body does nothing the protocol sees takes no part (its fork and join could neither
block nor order anything). What a warp does is modelled as what a Pallas thread does:
Mosaic GPU makes one warp's barrier arrival count as one (`_barrier_arrive_lowering` arrives
4 times per lane of a warp on a barrier that `_get_barrier` sized for 128 per arrival), and a
TMA load issued by a warp arrives once with its bytes (`_copy_gmem_to_smem_lowering`, "In
Warp-level lowering ... we arrive 4 times").

A thread of a block is numbered `sub = warp * num_threads + pallas_thread` (warp 0 keeps the
Pallas thread's number), which a note in the result says.
"""

from __future__ import annotations

from semcheck import ir
from semcheck.ir import Scope, SemKind, SemOrigin
from semcheck.lower.gpu_kernel import GPU, GpuThreadLowering
from semcheck.lower.interpreter import const_value, eval_jaxpr, unwrap
from semcheck.lower.registry import rule
from semcheck.lower.values import Known, Opaque, RefValue, unknown_data
from semcheck.jax_compat import jax_internal

WARPS_PER_WARPGROUP = 4  # jax/_src/pallas/mosaic_gpu/core.py, WarpMesh._NUM_WARPS_PER_WARPGROUP

# Whether a warp whose body emits nothing is left out of the fork and the join; the only
# reduction of this module, tested against the protocol that keeps every warp.
PRUNE_IDLE_WARPS = True

WARP_NOTE = (
    "Mosaic GPU warp-level core_map: each of the warpgroup's 4 warps is a thread (thread "
    "warp*num_threads+t of a block is warp `warp` of Pallas thread t), forked and joined by the "
    "warpgroup barriers Lane lowering puts around the body "
    "(jax/_src/pallas/mosaic_gpu/lowering.py, _core_map_lowering_rule, JAX 0.10.2); a warp's "
    "arrival counts as one, as a warpgroup's (_barrier_arrive_lowering, _get_barrier)"
)


def _warp_thread(t: GpuThreadLowering, warp: int) -> GpuThreadLowering:
    """Warp `warp` (1-3) of the Pallas thread `t`: created at its first fork and kept, so
    the bodies of several core_maps follow each other in its program order."""
    w = t.warp_threads.get(warp)
    if w is None:
        w = GpuThreadLowering(t.kernel, t.device, t.core, warp * t.kernel.num_threads + t.sub)
        w.program_ids = t.program_ids
        w.memory = t.memory  # the block's memory as this Pallas thread sees it at the fork
        w.pallas_thread = t.sub
        t.warp_threads[warp] = w
    return w


def _phases_at_fork(w: GpuThreadLowering, parent: dict) -> dict:
    """Warp `w`'s barrier wait counts at a fork: each lane keeps its own phase parities, so a
    warp goes on from its own counts at the previous join, plus the waits the whole
    warpgroup made since then (`parent` is the Pallas thread's counts now); at its first
    fork it is in step with the Pallas thread."""
    joined = w.parent_phases_at_join
    if joined is None:
        return dict(parent)
    keys = set(w.barrier_waits) | set(parent)
    return {k: w.barrier_waits.get(k, 0) + parent.get(k, 0) - joined.get(k, 0) for k in keys}


def _fork_join_semaphores(t: GpuThreadLowering, eqn) -> tuple[str, str]:
    """One fork and one join semaphore per warp (index = warp), per block, per Pallas thread."""
    ctx = t.kernel
    names = ctx.warp_semaphores.get(t.sub)
    if names is None:
        suffix = f"_thread{t.sub}" if ctx.num_threads > 1 else ""
        names = ctx.warp_semaphores[t.sub] = (ctx.unique(f"warp_fork{suffix}"), ctx.unique(f"warp_join{suffix}"))
        for name, shown_as in zip(names, ("the fork into warps of a warp-level core_map",
                                          "the join of the warps of a warp-level core_map")):
            ctx.semaphores[name] = ir.SemDecl(
                name, SemKind.REGULAR, WARPS_PER_WARPGROUP, SemOrigin.SCRATCH, Scope.CORE, None, t.loc(eqn),
                shown_as=shown_as, index_shown_as="warp",
            )
    return names


def _check_warp_map(t: GpuThreadLowering, eqn, mesh, what: str) -> None:
    gpu_core = jax_internal("gpu_core")

    if not isinstance(mesh, gpu_core.WarpMesh):
        raise t.error(eqn, f"a {what} over {type(mesh).__name__} inside a Mosaic GPU kernel: Mosaic GPU "
                      "lowers only a plgpu.WarpMesh there (lowering.py raises NotImplementedError)")
    if t.warp is not None:
        raise t.error(eqn, f"a {what} nested in a warp-level core_map (Mosaic GPU lowering raises "
                      "'Cannot nest core_maps')")
    params = t.kernel.gpu_compiler_params
    if getattr(params, "unsafe_no_auto_barriers", False):
        raise t.error(eqn, "a warp-level core_map with unsafe_no_auto_barriers=True is not supported by "
                      "semcheck: without the warpgroup barriers around the body, the code after it is "
                      "run by every warp unsynchronized, which semcheck does not model")
    semantics = getattr(params, "lowering_semantics", None)
    if semantics is not None and getattr(semantics, "name", str(semantics)) != "Lane":
        raise t.error(eqn, "a warp-level core_map under Warpgroup lowering semantics is not supported by "
                      "semcheck (Mosaic GPU lowers it to a WarpMapOp whose synchronization JAX 0.10.2 "
                      "does not state); use the default Lane semantics")
    if t.emitter.has_control_flow():
        raise t.error(eqn, "a warp-level core_map after control flow known only at run time: semcheck "
                      "lowers each warp's program apart from its Pallas thread's and cannot follow "
                      "several paths into the fork yet",
                      hint="bound loops and conditions by axis_index, program_id or constants")


def _closed_over(t: GpuThreadLowering, eqn, values) -> list:
    for v in values:
        if not isinstance(v, (Known, Opaque, RefValue)):
            raise t.error(eqn, "a warp-level core_map closes over a value known only at run time "
                          f"({v}); semcheck lowers each warp apart from its Pallas thread and cannot "
                          "hand it a register yet")
    return [unknown_data(v) if isinstance(v, Opaque) else v for v in values]


def _run_warps(t: GpuThreadLowering, eqn, mesh, jaxpr, consts: list, args: list) -> None:
    """Fork, one body per warp, join (see the module docstring)."""
    ctx = t.kernel
    ctx.note(WARP_NOTE)
    fork_name, join_name = _fork_join_semaphores(t, eqn)
    loc = t.loc(eqn)
    axis = mesh.axis_name
    before = dict(t.barrier_waits)
    fork = t.emitter.slot()
    # warp 0: the Pallas thread itself
    t.warp = (axis, 0)
    try:
        eval_jaxpr(t, jaxpr, consts, args)
    finally:
        t.warp = None
    joined = []
    for warp in range(1, WARPS_PER_WARPGROUP):
        w = _warp_thread(t, warp)
        w.barrier_waits = _phases_at_fork(w, before)
        w.warp = (axis, warp)
        mark = w.emitter.mark()
        w.emitter.emit(ir.Wait(loc, ir.SemRef(fork_name, warp), 1, True))
        eval_jaxpr(w, jaxpr, consts, args)
        if PRUNE_IDLE_WARPS and w.emitter.mark() == mark + 1:  # nothing this warp's fork could order
            w.emitter.rollback(mark)
        else:
            w.emitter.emit(ir.Signal(loc, ir.SemRef(join_name, warp), 1))
            joined.append(warp)
    # After the join the warpgroup waits as one: a barrier the warps now count differently
    # has no single next phase for it (until they are back in step).
    for warp in range(1, WARPS_PER_WARPGROUP):
        w = t.warp_threads[warp]
        w.parent_phases_at_join = dict(t.barrier_waits)
    for key in {k for w in t.warp_threads.values() for k in w.barrier_waits} | set(t.barrier_waits):
        if any(w.barrier_waits.get(key, 0) != t.barrier_waits.get(key, 0) for w in t.warp_threads.values()):
            t.diverged_phases[key] = loc
        else:
            t.diverged_phases.pop(key, None)
    fork.instrs.extend(ir.Signal(loc, ir.SemRef(fork_name, warp), 1) for warp in joined)
    for warp in joined:
        t.emitter.emit(ir.Wait(loc, ir.SemRef(join_name, warp), 1, True))


@rule("core_map", backend=GPU)
def core_map(t: GpuThreadLowering, eqn, inputs):
    params = eqn.params
    _check_warp_map(t, eqn, params["mesh"], "core_map")
    jaxpr, consts = unwrap(params["jaxpr"])
    if jaxpr.invars:
        raise t.error(eqn, "a warp-level core_map with scratch_shapes is not supported by semcheck "
                      "(Mosaic GPU lowers the body with no arguments)")
    closed = [const_value(c) for c in consts] + _closed_over(t, eqn, inputs)
    _run_warps(t, eqn, params["mesh"], jaxpr, closed, [])
    return []


@rule("mpmd_map", backend=GPU)
def mpmd_map(t: GpuThreadLowering, eqn, inputs):
    params = eqn.params
    jaxprs, meshes = params["jaxprs"], params["meshes"]
    if len(jaxprs) != 1:
        raise t.error(eqn, "an mpmd_map of several jaxprs (Mosaic GPU lowering raises NotImplementedError)")
    [mesh] = meshes
    _check_warp_map(t, eqn, mesh, "mpmd_map")
    jaxpr, consts = unwrap(jaxprs[0])
    _run_warps(t, eqn, mesh, jaxpr, [const_value(c) for c in consts], _closed_over(t, eqn, inputs))
    return []

