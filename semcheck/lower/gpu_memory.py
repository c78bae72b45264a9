"""Mosaic GPU memory and allocations, rules for the "gpu" backend: SMEM views through tiling
and swizzling, loads and stores, SMEM->GMEM stores, primitives without synchronization
meaning, and `run_scoped` (barriers initialized at every entry, semaphores and memory kept).
"""

from __future__ import annotations

import dataclasses
import math

from semcheck import ir
from semcheck.ir import Scope, SemKind, SemOrigin
from semcheck.lower.gpu_kernel import GPU, GpuThreadLowering, MBarrier
from semcheck.lower.interpreter import const_value, eval_jaxpr, operand, unwrap
from semcheck.lower.registry import rule
from semcheck.lower.values import Known, Opaque, RefValue


def split_flat(flat: list, *treedefs) -> list:
    """Unflatten consecutive runs of `flat`, one per treedef; the rest is returned last."""
    out, at = [], 0
    for treedef in treedefs:
        n = treedef.num_leaves
        out.append(treedef.unflatten(flat[at:at + n]))
        at += n
    out.append(flat[at:])
    return out


# --- SMEM views: tiling and swizzling keep the leading dims ------------------------------------


def smem_region(t: GpuThreadLowering, eqn, value, what: str, extra=()) -> ir.Region | None:
    """The region of a buffer a GPU view covers. `plgpu.TilingTransform` stores a logical
    (..., m, n) buffer as (..., m/tm, n/tn, tm, tn) and swizzling permutes bytes within a
    row, so indexing the logical view through `untile`/`unswizzle` still selects exact
    ranges of every leading dim (e.g. a pipeline slot); the tiled dims widen to the whole
    extent. A view through another transform (a bitcast) is the whole buffer; a view of a
    peer's memory (`plgpu.remote_ref`) is None: remote accesses are not tracked."""
    from jax._src.pallas.mosaic_gpu import core as gpu_core
    from jax._src.state.indexing import NDIndexer, Slice

    from semcheck.lower.memory import ref_of
    from semcheck.lower.values import Sym, sym_op

    ref, transforms = ref_of(t, eqn, value, what, extra)
    if ref.is_semaphore:
        raise t.error(eqn, f"{what} is the semaphore {ref.alloc!r}, not a buffer")
    rank = len(ref.shape)
    starts: list = [0] * rank
    sizes = list(ref.shape)
    groups = [[d] for d in range(rank)]  # the allocation dims behind each view dim

    def widen(dims):
        for d in dims:
            starts[d], sizes[d] = 0, ref.shape[d]

    for transform in transforms:
        if isinstance(transform, NDIndexer):
            kept = []
            for dims, index in zip(groups, transform.indices):
                sliced = index if isinstance(index, Slice) else None
                start = sliced.start if sliced is not None else index
                if isinstance(start, (Known, Sym)) and (not isinstance(start, Known) or start.is_scalar):
                    start = operand(t, eqn, start, what)
                exact = len(dims) == 1 and isinstance(start, (int, ir.Reg, ir.BinOp))
                size = 1 if sliced is None else sliced.size
                if exact and isinstance(start, (int, ir.Reg, ir.BinOp)) and isinstance(size, int):
                    [d] = dims
                    starts[d] = sym_op("add", starts[d], start)
                    sizes[d] = 1 if sliced is None else ((size - 1) * sliced.stride + 1 if size else 0)
                else:
                    widen(dims)
                if sliced is not None:
                    kept.append(dims)
            groups = kept + groups[len(transform.indices):]
        elif isinstance(transform, gpu_core.UntilingTransform):
            r = len(transform.tiling)
            if len(groups) < 2 * r:
                return ir.Region(ref.alloc, (0,) * rank, tuple(ref.shape))
            groups = groups[:-2 * r] + [groups[-2 * r + i] + groups[-r + i] for i in range(r)]
        elif isinstance(transform, gpu_core.UnswizzleRef):
            continue
        elif isinstance(transform, gpu_core.PeerMemRef):
            return None
        else:
            return ir.Region(ref.alloc, (0,) * rank, tuple(ref.shape))
    return ir.Region(ref.alloc, tuple(starts), tuple(sizes))


# What the GPU frontend does not race-check, each with what JAX 0.10.2 says of it.
REMOTE_ACCESS_NOTE = (
    "loads and stores through plgpu.remote_ref (a peer's memory) are not checked for data "
    "races: the ref carries a PeerMemRef transform whose device id is known only at run time "
    "(jax/_src/pallas/mosaic_gpu/core.py, JAX 0.10.2), so semcheck cannot say which buffer they touch"
)
TMA_STORE_NOTE = (
    "asynchronous SMEM->GMEM stores (plgpu.copy_smem_to_gmem) are not checked for data races "
    "on their GMEM destination: their completion is tracked by per-thread bulk groups "
    "(commit_group / wait_smem_to_gmem in jax/_src/pallas/mosaic_gpu/primitives.py, JAX 0.10.2), "
    "not by any semaphore or mbarrier; only their SMEM source is recorded as read"
)
MULTIMEM_NOTE = (
    "multimem stores and reductions (plgpu.multimem_store, multimem_load_reduce in "
    "jax/_src/pallas/mosaic_gpu/primitives.py, JAX 0.10.2) touch every peer's copy of a buffer "
    "and are not checked for data races"
)


def _loaded(t, eqn, reg: ir.Region | None):
    where = reg.buffer if reg is not None else "a peer's memory"
    return [Opaque(f"the value loaded from {where} at {t.loc(eqn)}") for _ in eqn.outvars]


@rule("get", backend=GPU)
def get(t: GpuThreadLowering, eqn, inputs):
    ref, *flat = inputs
    reg = smem_region(t, eqn, ref, "the loaded ref", eqn.params["tree"].unflatten(flat))
    _access(t, eqn, ir.Load, reg)
    return _loaded(t, eqn, reg)


@rule("swap", backend=GPU)
def swap(t: GpuThreadLowering, eqn, inputs):
    ref, _value, *flat = inputs
    reg = smem_region(t, eqn, ref, "the stored ref", eqn.params["tree"].unflatten(flat))
    _access(t, eqn, ir.Store, reg)
    return _loaded(t, eqn, reg)


def _access(t, eqn, kind, reg: ir.Region | None) -> None:
    if reg is None:
        t.kernel.note(REMOTE_ACCESS_NOTE)
    else:
        t.emitter.emit(kind(t.loc(eqn), reg))


# --- GPU primitives without synchronization meaning ------------------------------------------------


def _no_sync(t: GpuThreadLowering, eqn, inputs):
    """Compute, register hints and bulk-group bookkeeping: nothing a semaphore or an mbarrier
    sees. Results are data."""
    return [Opaque(f"the result of {eqn.primitive.name} at {t.loc(eqn)}") for _ in eqn.outvars]


for _name in (
    "wait_smem_to_gmem", "commit_group", "commit_smem", "set_max_registers_p", "layout_cast",
    "wgmma_ref", "wgmma", "wgmma_wait", "wgmma_accumulator_deref_p", "wgmma_accumulator_store_p",
    "print_layout",
):
    rule(_name, backend=GPU)(_no_sync)


def _multimem(t: GpuThreadLowering, eqn, inputs):
    t.kernel.note(MULTIMEM_NOTE)
    return _no_sync(t, eqn, inputs)


for _name in ("multimem_store", "multimem_load_reduce"):
    rule(_name, backend=GPU)(_multimem)


# --- allocations ---------------------------------------------------------------------------------


@rule("run_scoped", backend=GPU)
def run_scoped(t: GpuThreadLowering, eqn, inputs):
    params = eqn.params
    axes = tuple(params.get("collective_axes") or ())
    thread_axis = t.kernel.thread_axis
    if axes not in ((), (thread_axis,)):
        raise t.error(
            eqn,
            f"run_scoped(collective_axes={axes}): only thread-collective allocations are "
            "supported (Mosaic GPU lowering raises the same); to allocate a semaphore shared by "
            "every block, use pl.get_global",
        )
    per_thread = not axes and t.kernel.num_threads > 1
    entry = t.scope_entries[id(eqn)] = t.scope_entries.get(id(eqn), -1) + 1
    jaxpr, consts = unwrap(params["jaxpr"])
    closed_over = [const_value(c) for c in consts] + list(inputs)
    # `ref_transforms` records how the allocations were wrapped for the body; the body's
    # eqns already spell those transforms out, so they are not applied twice.
    refs = []
    names = list(getattr(jaxpr.debug_info, "arg_names", None) or ())
    for k, var in enumerate(jaxpr.invars):
        is_barrier = barrier_info(var.aval.dtype) is not None
        # Barriers are initialized at every entry; memory and semaphores keep their slot.
        key = (id(eqn), k, t.sub if per_thread else None, entry if is_barrier else None)
        ref = t.kernel.scoped.get(key)
        if not isinstance(ref, RefValue):  # not yet allocated
            base = names[k] if k < len(names) and names[k] else f"scoped{k}"
            ref = t.kernel.scoped[key] = declare_gpu_ref(t.kernel, base, var.aval, SemOrigin.SCOPED, t.loc(eqn))
        refs.append(ref)
    return eval_jaxpr(t, jaxpr, closed_over[:len(jaxpr.constvars)], refs)


def declare_gpu_ref(ctx, base: str, aval, origin: SemOrigin, loc: ir.Loc) -> RefValue:
    """An allocation of a GPU kernel: an mbarrier array, a GMEM semaphore or a buffer."""
    info = barrier_info(aval.dtype)
    if info is None:
        ref = ctx.declare_ref(base, aval, origin, loc)
        decl = ctx.buffers.get(ref.alloc)
        if decl is not None and decl.space in ("gmem", "any"):
            # Global memory is one per device, shared by every block.
            ctx.buffers[ref.alloc] = dataclasses.replace(decl, scope=Scope.DEVICE)
        return ref
    shape = tuple(int(d) for d in aval.shape)
    name = ctx.unique(base)
    per_phase = info.num_arrivals * math.prod(ctx.grid_sizes.get(a, 1) for a in info.cluster_axes)
    ctx.semaphores[name] = ir.SemDecl(
        name, SemKind.MBARRIER, max(1, math.prod(shape)), origin, Scope.CORE, None, loc, per_phase
    )
    ctx.mbarriers[name] = info
    return RefValue(name, True, shape, aval.dtype)


def barrier_info(dtype) -> MBarrier | None:
    from jax._src.pallas.mosaic_gpu import core as gpu_core

    if isinstance(dtype, gpu_core.ClusterBarrierType):
        axes: list[str] = []
        for axis in dtype.collective_axes:
            axes.extend(axis if isinstance(axis, tuple) else (axis,))
        return MBarrier(int(dtype.num_arrivals), tuple(axes))
    if isinstance(dtype, gpu_core.BarrierType):
        return MBarrier(int(dtype.num_arrivals))
    return None


@rule("copy_smem_to_gmem", backend=GPU)
def copy_smem_to_gmem(t: GpuThreadLowering, eqn, inputs):
    """A TMA store, tracked by per-thread bulk groups rather than by any semaphore: for
    synchronization it is invisible; its SMEM source is recorded as read."""
    params = eqn.params
    src, _dst, *flat = inputs
    src_tr, _dst_tr, _ = split_flat(flat, params["src_transforms_treedef"], params["dst_transforms_treedef"])
    _access(t, eqn, ir.Load, smem_region(t, eqn, src, "the store source", src_tr))
    t.kernel.note(TMA_STORE_NOTE)
    return []
