"""Rules for Mosaic GPU kernels (reference §6 and §4.8), registered for the "gpu" backend.

Semaphores live in GMEM: a `scratch_types` or `run_scoped` semaphore exists once per block
(lowering slices one copy per block), a `pl.get_global` one once per launch, shared by every
block. A remote signal reaches the same allocation on the peer (its symmetric address), so
a per-block semaphore is signalled in the peer's block of the same index.

An mbarrier (`plgpu.Barrier`) is modelled by the number of arrivals it has ever seen: phase
k completes when `(k+1) * num_arrivals` arrivals have happened, and a thread's k-th
`barrier_wait` on it is a non-decrementing wait for exactly that (the hardware keeps the
phase parity per waiting thread). `barrier_arrive` adds one arrival; `copy_gmem_to_smem`
arrives once with its bytes, so it adds one arrival when the copy lands. A
`ClusterBarrier` arrival reaches the barrier in every block of the cluster along its axes,
and each of those expects `num_arrivals` from every one of them. Every `run_scoped` entry
initializes its barriers afresh.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from semcheck import ir
from semcheck.ir import Scope, SemKind, SemOrigin
from semcheck.lower.gpu_kernel import GpuThreadLowering, MBarrier
from semcheck.lower.interpreter import eval_jaxpr, operand, const_value, unwrap
from semcheck.lower.memory import nbytes_of_aval, semaphore_ref
from semcheck.lower.registry import rule
from semcheck.lower.tpu import resolve_device
from semcheck.lower.values import Known, Opaque, RefValue

GPU = "gpu"


def _split(flat: list, *treedefs) -> list:
    """Unflatten consecutive runs of `flat`, one per treedef; the rest is returned last."""
    out, at = [], 0
    for treedef in treedefs:
        n = treedef.num_leaves
        out.append(treedef.unflatten(flat[at:at + n]))
        at += n
    out.append(flat[at:])
    return out


# --- semaphores ----------------------------------------------------------------------------------


def _signal(t: GpuThreadLowering, eqn, sem, transforms, inc, device_id, device_id_type, what="signal"):
    device, core = resolve_device(t, eqn, device_id, device_id_type, what)
    if core is not None:
        raise t.error(eqn, f"{what}: a device id dict may only name mesh axes on GPU "
                      "(Mosaic GPU lowering raises ValueError for other keys)")
    ref = semaphore_ref(t, eqn, sem, "the signalled semaphore", transforms, device=device)
    _require_gmem_semaphore(t, eqn, ref, "signal")
    t.emitter.emit(ir.Signal(t.loc(eqn), ref, operand(t, eqn, inc, "the signal increment")))
    return device


@rule("semaphore_signal", backend=GPU)
def semaphore_signal(t: GpuThreadLowering, eqn, inputs):
    sem, transforms, inc, device_id, core_index = eqn.params["args_tree"].unflatten(inputs)
    if core_index is not None:
        raise t.error(eqn, "core_index has no meaning on GPU (Mosaic GPU lowering raises "
                      "NotImplementedError)", hint="address blocks through the semaphore, not a core")
    device = _signal(t, eqn, sem, transforms, inc, device_id, eqn.params["device_id_type"])
    if device is not None and eqn.params.get("memory_scope", "sys") != "sys":
        raise t.error(
            eqn,
            "a remote signal needs memory_scope='sys' (Mosaic GPU lowering rejects "
            f"memory_scope={eqn.params['memory_scope']!r} with a device_id)",
            hint="drop memory_scope or pass memory_scope='sys'",
        )
    return []


@rule("semaphore_wait", backend=GPU)
def semaphore_wait(t: GpuThreadLowering, eqn, inputs):
    sem, transforms, value, decrement = eqn.params["args_tree"].unflatten(inputs)
    if not isinstance(decrement, Known):
        raise t.error(eqn, "the decrement flag is not a constant")
    ref = semaphore_ref(t, eqn, sem, "the waited semaphore", transforms)
    _require_gmem_semaphore(t, eqn, ref, "wait")
    t.emitter.emit(
        ir.Wait(t.loc(eqn), ref, operand(t, eqn, value, "the wait value"), bool(decrement.value))
    )
    return []


@rule("semaphore_signal_multicast", backend=GPU)
def semaphore_signal_multicast(t: GpuThreadLowering, eqn, inputs):
    sem, transforms, value = eqn.params["args_tree"].unflatten(inputs)
    mesh = t.kernel.mesh
    axes = tuple(eqn.params["collective_axes"])
    if set(axes) != set(mesh.axis_names):
        raise t.error(
            eqn,
            f"collective_axes={axes} must name every mesh axis ({', '.join(mesh.axis_names)}): "
            "a multicast signal reaches the semaphore on every device",
        )
    inc = operand(t, eqn, value, "the signal increment")
    for device in range(mesh.size):
        ref = semaphore_ref(t, eqn, sem, "the signalled semaphore", transforms, device=device)
        _require_gmem_semaphore(t, eqn, ref, "signal")
        t.emitter.emit(ir.Signal(t.loc(eqn), ref, inc))
    return []


@rule("semaphore_signal_parallel", backend=GPU)
def semaphore_signal_parallel(t: GpuThreadLowering, eqn, inputs):
    # Signals that may land in any order: independent signals are exactly that.
    refs, transforms, incs, device_ids = eqn.params["args_tree"].unflatten(inputs)
    for sem, tr, inc, device_id in zip(refs, transforms, incs, device_ids):
        _signal(t, eqn, sem, tr, inc, device_id, "mesh", "semaphore_signal_parallel")
    return []


def _require_gmem_semaphore(t, eqn, ref: ir.SemRef, what: str) -> None:
    decl = t.kernel.semaphores[ref.alloc]
    if decl.kind is SemKind.MBARRIER:
        raise t.error(eqn, f"cannot {what} the mbarrier {ref.alloc!r} like a semaphore",
                      hint="use plgpu.barrier_arrive / plgpu.barrier_wait")


@rule("get_global", backend=GPU)
def get_global(t: GpuThreadLowering, eqn, inputs):
    """One allocation per call site, shared by every block of the launch."""
    what = eqn.params["what"]
    if not _is_gmem_semaphore(what):
        raise t.error(
            eqn,
            f"get_global only supports semaphores, got {what}: pl.get_global allocates a GMEM "
            "semaphore shared by every block of the launch, and Mosaic GPU lowering rejects "
            "anything else (a buffer, or a TPU semaphore type)",
            hint="pass plgpu.SemaphoreType.REGULAR (or REGULAR((n,))); allocate buffers with "
            "scratch_types or pl.run_scoped",
        )
    ctx = t.kernel
    ref = ctx.global_slots.get(id(eqn))
    if ref is None:
        shape = tuple(int(d) for d in what.shape)
        name = ctx.unique(f"global#{len(ctx.global_slots)}")
        ctx.semaphores[name] = ir.SemDecl(
            name, SemKind.GPU_GLOBAL, max(1, math.prod(shape)), SemOrigin.GLOBAL, Scope.DEVICE, None, t.loc(eqn)
        )
        ref = ctx.global_slots[id(eqn)] = RefValue(name, True, shape, what.dtype)
    return [ref]


def _is_gmem_semaphore(aval) -> bool:
    from jax._src import dtypes
    from jax._src.pallas import core as pl_core

    space = str(getattr(getattr(aval, "memory_space", None), "value", getattr(aval, "memory_space", ""))).lower()
    dtype = getattr(aval, "dtype", None)
    try:
        is_sem = dtype is not None and dtypes.issubdtype(dtype, pl_core.semaphore_dtype)
    except TypeError:
        is_sem = False
    return is_sem and space == "gmem"


# --- mbarriers ---------------------------------------------------------------------------------


def barrier_info(dtype) -> MBarrier | None:
    from jax._src.pallas.mosaic_gpu import core as gpu_core

    if isinstance(dtype, gpu_core.ClusterBarrierType):
        axes = []
        for axis in dtype.collective_axes:
            axes.extend(axis if isinstance(axis, tuple) else (axis,))
        return MBarrier(int(dtype.num_arrivals), tuple(axes))
    if isinstance(dtype, gpu_core.BarrierType):
        return MBarrier(int(dtype.num_arrivals))
    return None


def _barrier_ref(t: GpuThreadLowering, eqn, barrier, transforms, what: str) -> tuple[ir.SemRef, MBarrier]:
    from semcheck.lower.memory import ref_of

    value, all_transforms = ref_of(t, eqn, barrier, what, transforms)
    if not all_transforms and math.prod(value.shape) == 1:
        ref = ir.SemRef(value.alloc, 0)  # a single barrier (num_barriers=1) is used unindexed
    else:
        ref = semaphore_ref(t, eqn, barrier, what, transforms)
    info = t.kernel.mbarriers.get(ref.alloc)
    if info is None:
        raise t.error(eqn, f"{what} is {ref.alloc!r}, not a plgpu.Barrier")
    return ref, info


def _cluster_peers(t: GpuThreadLowering, eqn, info: MBarrier) -> list[int]:
    """The blocks (this one included) a ClusterBarrier arrival reaches."""
    sizes = t.kernel.grid_sizes
    for axis in info.cluster_axes:
        if axis not in t.kernel.cluster_names:
            raise t.error(eqn, f"ClusterBarrier axis {axis!r} is not a cluster axis of the mesh "
                          f"({', '.join(t.kernel.cluster_names) or 'none'})")
    if len([a for a in info.cluster_axes if sizes[a] > 1]) > 1:
        raise t.error(eqn, "a ClusterBarrier over several non-trivial cluster axes is not "
                      "supported by semcheck yet", hint="use one cluster axis")
    peers = []
    for values in itertools.product(*(range(sizes[a]) for a in info.cluster_axes)):
        coords = dict(t.block_coords)
        coords.update(zip(info.cluster_axes, values))
        peers.append(t.kernel.block_of(coords))
    return peers


def _arrivals_per_phase(t: GpuThreadLowering, eqn, info: MBarrier) -> int:
    return info.num_arrivals * len(_cluster_peers(t, eqn, info))


@rule("barrier_arrive", backend=GPU)
def barrier_arrive(t: GpuThreadLowering, eqn, inputs):
    barrier, *flat = inputs
    [transforms, _] = _split(flat, eqn.params["transforms_treedef"])
    ref, info = _barrier_ref(t, eqn, barrier, transforms, "the arrived-at barrier")
    peers = _cluster_peers(t, eqn, info) if info.cluster_axes else [None]
    for block in peers:
        target = ref if block is None else ir.SemRef(ref.alloc, ref.index, None, block)
        t.emitter.emit(ir.Signal(t.loc(eqn), target, 1))
    return []


@rule("barrier_wait", backend=GPU)
def barrier_wait(t: GpuThreadLowering, eqn, inputs):
    barrier, *flat = inputs
    [transforms, _] = _split(flat, eqn.params["transforms_treedef"])
    ref, info = _barrier_ref(t, eqn, barrier, transforms, "the waited barrier")
    if not isinstance(ref.index, int):
        raise t.error(
            eqn,
            "the barrier index is known only at run time, so semcheck cannot tell which phase "
            "this wait is for",
            hint="index barrier arrays with values derived from axis_index, program_id and "
            "static loop counters",
        )
    key = (ref.alloc, ref.index)
    phase = t.barrier_waits.get(key, 0)
    t.barrier_waits[key] = phase + 1
    need = (phase + 1) * _arrivals_per_phase(t, eqn, info)
    t.emitter.emit(ir.Wait(t.loc(eqn), ref, need, False))
    return []


@rule("barrier_test", backend=GPU)
def barrier_test(t: GpuThreadLowering, eqn, inputs):
    raise t.error(eqn, "semcheck has no model of barrier_test (a non-blocking phase test) yet",
                  hint="use plgpu.barrier_wait")


@rule("copy_gmem_to_smem", backend=GPU)
def copy_gmem_to_smem(t: GpuThreadLowering, eqn, inputs):
    """A TMA load: arrives once on the barrier, the phase needing its bytes as well; in the
    model the arrival happens when the copy lands."""
    params = eqn.params
    src, dst, barrier, *flat = inputs
    src_tr, dst_tr, bar_tr, _ = _split(
        flat, params["src_transforms_treedef"], params["dst_transforms_treedef"], params["barrier_transforms_treedef"]
    )
    axes = tuple(params.get("collective_axes") or ())
    if any(t.kernel.grid_sizes.get(a, 1) > 1 for a in axes) or params.get("leader_tracked") is not None:
        raise t.error(eqn, "multicast and partitioned TMA copies (collective_axes over a "
                      "cluster of more than one block) are not supported by semcheck yet")
    ref, _info = _barrier_ref(t, eqn, barrier, bar_tr, "the copy's barrier")
    src_region = smem_region(t, eqn, src, "the copy source", src_tr)
    dst_region = smem_region(t, eqn, dst, "the copy destination", dst_tr)
    if src_region is None or dst_region is None:
        raise t.error(eqn, "a TMA copy through plgpu.remote_ref is not supported by semcheck yet")
    dst_aval = _transformed_aval(eqn, 1, params["dst_transforms_treedef"], params)
    t.emitter.emit(
        ir.DmaStart(
            t.loc(eqn),
            src=src_region,
            dst=dst_region,
            recv_sem=ref,
            nbytes=_bytes(t, eqn, dst_aval),
        )
    )
    return []


def _transformed_aval(eqn, position, treedef, params):
    """The aval of operand `position` after its transforms, or None when it cannot be told."""
    from jax._src.state.types import TransformedRef

    try:
        flat_avals = [v.aval for v in eqn.invars]
        base = 3 if "barrier_transforms_treedef" in params else 2
        counts = [params["src_transforms_treedef"].num_leaves, params["dst_transforms_treedef"].num_leaves]
        start = base + sum(counts[: position])
        transforms = treedef.unflatten(flat_avals[start:start + treedef.num_leaves])
        return TransformedRef(flat_avals[position], tuple(transforms))
    except Exception:
        return None


def _bytes(t, eqn, aval) -> int:
    try:
        return nbytes_of_aval(t, eqn, aval)
    except Exception:
        return 0  # only labels use it: a barrier counts arrivals, not bytes


@rule("copy_smem_to_gmem", backend=GPU)
def copy_smem_to_gmem(t: GpuThreadLowering, eqn, inputs):
    """A TMA store, tracked by per-thread bulk groups rather than by any semaphore: for
    synchronization it is invisible; its SMEM source is recorded as read."""
    params = eqn.params
    src, _dst, *flat = inputs
    src_tr, _dst_tr, _ = _split(flat, params["src_transforms_treedef"], params["dst_transforms_treedef"])
    _access(t, eqn, ir.Load, smem_region(t, eqn, src, "the store source", src_tr))
    t.kernel.note(REMOTE_ACCESS_NOTE)
    return []


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
                is_slice = isinstance(index, Slice)
                start = index.start if is_slice else index
                if isinstance(start, (Known, Sym)) and (not isinstance(start, Known) or start.is_scalar):
                    start = operand(t, eqn, start, what)
                exact = len(dims) == 1 and isinstance(start, (int, ir.Reg, ir.BinOp))
                if exact and (not is_slice or isinstance(index.size, int)):
                    [d] = dims
                    starts[d] = sym_op("add", starts[d], start)
                    sizes[d] = ((index.size - 1) * index.stride + 1 if index.size else 0) if is_slice else 1
                else:
                    widen(dims)
                if is_slice:
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


REMOTE_ACCESS_NOTE = (
    "loads and stores through plgpu.remote_ref (a peer's memory), asynchronous SMEM->GMEM "
    "stores and multimem accesses are not checked for data races"
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
    "multimem_store", "multimem_load_reduce", "print_layout",
):
    rule(_name, backend=GPU)(_no_sync)


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
        if ref is None:
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

