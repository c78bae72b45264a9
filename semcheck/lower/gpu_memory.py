"""Mosaic GPU memory and allocations, rules for the "gpu" backend: SMEM views through tiling
and swizzling, loads and stores, SMEM->GMEM stores, primitives without synchronization
meaning, and `run_scoped` (barriers initialized at every entry, semaphores and memory kept).
"""

from __future__ import annotations

import dataclasses
import math

from semcheck import ir
from semcheck.ir import Scope, SemKind, SemOrigin
from semcheck.lower import gpu_data
from semcheck.lower.gpu_kernel import GPU, GpuThreadLowering, MBarrier
from semcheck.lower.interpreter import const_value, eval_jaxpr, operand, unwrap
from semcheck.lower.context import semaphore_kind
from semcheck.lower.ref_names import helpers_allocations_shown_as, ref_names
from semcheck.lower.registry import rule
from semcheck.lower.source import kernel_function
from semcheck.lower.values import Known, Opaque, RefValue
from semcheck.jax_compat import jax_internal


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
    """`located_region` of a view of the thread's own memory; None for a view of a peer's
    (`plgpu.remote_ref`)."""
    region, device = located_region(t, eqn, value, what, extra)
    return region if device is None else None


def located_region(t: GpuThreadLowering, eqn, value, what: str, extra=()) -> tuple[ir.Region, ir.Operand | None]:  # noqa: C901
    """The region of a buffer a GPU view covers, and the device it lives on (None: the
    thread's own). `plgpu.TilingTransform` stores a logical
    (..., m, n) buffer as (..., m/tm, n/tn, tm, tn) and swizzling permutes bytes within a
    row, so indexing the logical view through `untile`/`unswizzle` still selects exact
    ranges of every leading dim (e.g. a pipeline slot); the tiled dims widen to the whole
    extent. A view through another transform (a bitcast) is the whole buffer. A view through
    `plgpu.remote_ref` (a `PeerMemRef` transform, jax/_src/pallas/mosaic_gpu/core.py) is the
    same buffer on the peer: Mosaic GPU lowers it to the symmetric address on that device
    (`LaunchContext.to_remote`, lowering.py `_handle_transforms`), which commutes with
    indexing (`PeerMemRef.commute_ndindexer`)."""
    gpu_core = jax_internal("gpu_core")
    NDIndexer = jax_internal("state_indexing").NDIndexer
    Slice = jax_internal("state_indexing").Slice

    from semcheck.lower.memory import ref_of
    from semcheck.lower.values import Sym, sym_op

    ref, transforms = ref_of(t, eqn, value, what, extra)
    device = None
    for transform in transforms:
        if isinstance(transform, gpu_core.PeerMemRef):
            device = _peer_device(t, eqn, ref, transform, what)
        elif isinstance(transform, (gpu_core.ClusterRefTransform, gpu_core.MulticastRef)):
            construct = "plgpu.cluster_ref" if isinstance(transform, gpu_core.ClusterRefTransform) else "plgpu.multicast_ref"
            raise t.error(eqn, f"{what} is a {construct} view (another block's or every peer's "
                          "memory), which semcheck does not model yet")
    if ref.is_semaphore:
        raise t.error(eqn, f"{what} is the semaphore {ref.alloc!r}, not a buffer")
    rank = len(ref.shape)
    starts: list = [0] * rank
    sizes = list(ref.shape)
    groups = [[d] for d in range(rank)]  # the allocation dims behind each view dim

    widened: list[str] = []  # why some dim is taken whole though the view may not fill it
    loc = t.loc(eqn)

    def whole(why: str) -> tuple[ir.Region, ir.Operand | None]:
        return ir.Region(ref.alloc, (0,) * rank, tuple(ref.shape),
                         widened=f"{what} at {loc} is {why}, taken as all of {ref.alloc}"), device

    def widen(dims, fills: bool):
        for d in dims:
            starts[d], sizes[d] = 0, ref.shape[d]
        if not fills:
            widened.append(f"dims {', '.join(map(str, dims))}" if len(dims) > 1 else f"dim {dims[0]}")

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
                    extent = math.prod(ref.shape[d] for d in dims)
                    widen(dims, fills=bool(sliced is not None and isinstance(start, int) and start == 0
                                            and size == extent and sliced.stride == 1))
                if sliced is not None:
                    kept.append(dims)
            groups = kept + groups[len(transform.indices):]
        elif isinstance(transform, gpu_core.UntilingTransform):
            r = len(transform.tiling)
            if len(groups) < 2 * r:
                return whole("an untiling semcheck cannot follow")
            groups = groups[:-2 * r] + [groups[-2 * r + i] + groups[-r + i] for i in range(r)]
        elif isinstance(transform, gpu_core.UnswizzleRef):
            continue
        elif isinstance(transform, gpu_core.PeerMemRef):
            continue  # the device, found above
        else:
            followed = _followed_elementwise(ref, transforms, f"{what} at {loc}")
            return (followed, device) if followed is not None else whole(f"a view through {type(transform).__name__}")
    why = f"{what} at {loc} is taken as all of {ref.alloc} along {', '.join(widened)}" if widened else None
    return ir.Region(ref.alloc, tuple(starts), tuple(sizes), widened=why), device


def _followed_elementwise(ref: RefValue, transforms, where: str) -> ir.Region | None:
    """The box a view through reshapes (and indexing) touches, followed element by element as
    for a TPU view (`memory._positions`: JAX's own discharge of the transforms on an array
    of positions), when every index is known per thread; None otherwise. A `remote_ref`
    commutes with indexing and reshaping (it only moves the base address to the peer), so
    it is left out. Without this a GMEM output reshaped to 3-d and written a tile per block
    (`reduce_scatter_mgpu`'s `y_ref.reshape(...)[idxs] = ...`) was taken whole, and the
    blocks' disjoint tiles raced."""
    from semcheck.lower.memory import _bounding_region, _positions

    gpu_core = jax_internal("gpu_core")
    positions = _positions(ref, [tr for tr in transforms if not isinstance(tr, gpu_core.PeerMemRef)])
    return None if positions is None else _bounding_region(ref, positions, where)


def _peer_device(t: GpuThreadLowering, eqn, ref: RefValue, transform, what: str) -> ir.Operand:
    from semcheck.lower.tpu import resolve_device

    # `what` is "the store destination": the device id is "the store destination's remote_ref device id"
    device, core = resolve_device(t, eqn, transform.device_id, transform.device_id_type,
                                  f"{what.removeprefix('the ')}'s remote_ref")
    if core is not None or device is None:
        raise t.error(eqn, f"{what}: a remote_ref device id may only name mesh axes on GPU")
    t.kernel.reaches_peers(t.loc(eqn))
    decl = t.kernel.buffers.get(ref.alloc)
    if decl is None or decl.scope is not Scope.DEVICE:
        raise t.error(eqn, f"{what}: plgpu.remote_ref of {ref.alloc!r}, which is not in GMEM: "
                      "only global memory has a symmetric address on a peer")
    return device


# What the GPU frontend does not race-check, each with what JAX 0.10.2 says of it.
REMOTE_TMA_STORE_NOTE = (
    "a TMA store into a peer's memory (plgpu.copy_smem_to_gmem to a plgpu.remote_ref) writes "
    "the peer's GMEM until the issuing thread's bulk group says it is done (JAX 0.10.2, "
    "jax/_src/pallas/mosaic_gpu/primitives.py: the peer is not told), so it is race-checked "
    "on the peer's buffer, awaited by the issuer's wait_smem_to_gmem"
)
MULTIMEM_NOTE = (
    "multimem stores and reductions (plgpu.multimem_store, multimem_load_reduce in "
    "jax/_src/pallas/mosaic_gpu/primitives.py, JAX 0.10.2) touch every peer's copy of a buffer "
    "and are not checked for data races"
)


def check_warp_access(t: GpuThreadLowering, eqn, what: str) -> None:
    """Warp-level code loads and stores scalars only (jax/_src/pallas/mosaic_gpu/lowering.py,
    `_get_lowering_rule` and `_swap_lowering_rule`, JAX 0.10.2)."""
    if t.warp is not None and any(getattr(v.aval, "shape", ()) for v in eqn.outvars):
        raise t.error(eqn, f"warp-level code can only {what} scalars (Mosaic GPU lowering raises "
                      "the same)")


def _loaded(t, eqn, reg: ir.Region, device: ir.Operand | None, ref, transforms) -> list:
    """What a load sees: a peer's memory is data semcheck does not know; the thread's own
    is followed through the data path (gpu_data.py)."""
    if device is not None:
        return [Opaque(f"the value loaded from {reg.buffer} on a peer at {t.loc(eqn)}") for _ in eqn.outvars]
    from semcheck.lower.memory import ref_of

    value, every = ref_of(t, eqn, ref, "the loaded ref", transforms)
    return [gpu_data.read(t, eqn, value, every, reg, f"the value loaded from {reg.buffer} at {t.loc(eqn)}")]


@rule("get", backend=GPU)
def get(t: GpuThreadLowering, eqn, inputs):
    ref, *flat = inputs
    check_warp_access(t, eqn, "load")
    transforms = eqn.params["tree"].unflatten(flat)
    reg, device = located_region(t, eqn, ref, "the loaded ref", transforms)
    t.emitter.emit(ir.Load(t.loc(eqn), reg, device))
    return _loaded(t, eqn, reg, device, ref, transforms)


@rule("load", backend=GPU)
def load(t: GpuThreadLowering, eqn, inputs):
    """`plgpu.load`: a load from SMEM with a chosen register layout, a plain load."""
    ref, *flat = inputs
    transforms = eqn.params["tree"].unflatten(flat)
    reg, device = located_region(t, eqn, ref, "the loaded ref", transforms)
    t.emitter.emit(ir.Load(t.loc(eqn), reg, device))
    return _loaded(t, eqn, reg, device, ref, transforms)


@rule("swap", backend=GPU)
def swap(t: GpuThreadLowering, eqn, inputs):
    ref, value, *flat = inputs
    check_warp_access(t, eqn, "store")
    transforms = eqn.params["tree"].unflatten(flat)
    reg, device = located_region(t, eqn, ref, "the stored ref", transforms)
    t.emitter.emit(ir.Store(t.loc(eqn), reg, device))
    if device is None:  # the thread's own store: followed (a peer's is the peer's business)
        from semcheck.lower.memory import ref_of

        target, every = ref_of(t, eqn, ref, "the stored ref", transforms)
        t.memory.write(target, every, reg, value)
    # The value a store replaces is not followed: reading it would count as a read of the
    # buffer (gpu_data.py), and `ref[...] = v` drops it.
    return [Opaque(f"the value the store into {reg.buffer} at {t.loc(eqn)} replaced") for _ in eqn.outvars]


# --- GPU primitives without synchronization meaning ------------------------------------------------


def _no_sync(t: GpuThreadLowering, eqn, inputs):
    """Compute, register hints and bulk-group bookkeeping: nothing a semaphore or an mbarrier
    sees. Results are data."""
    return [Opaque(f"the result of {eqn.primitive.name} at {t.loc(eqn)}") for _ in eqn.outvars]


for _name in (
    "commit_smem", "set_max_registers_p", "layout_cast",
    "wgmma_ref", "wgmma", "wgmma_wait", "wgmma_accumulator_deref_p", "wgmma_accumulator_store_p",
    "print_layout",
    "async_prefetch",  # a hint that warms the L2 cache: it changes no memory and orders nothing
):
    rule(_name, backend=GPU)(_no_sync)


def _multimem(t: GpuThreadLowering, eqn, inputs):
    t.kernel.note(MULTIMEM_NOTE)
    t.kernel.reaches_peers(t.loc(eqn))
    return _no_sync(t, eqn, inputs)


for _name in ("multimem_store", "multimem_load_reduce"):
    rule(_name, backend=GPU)(_multimem)


# --- allocations ---------------------------------------------------------------------------------


@rule("run_scoped", backend=GPU)
def run_scoped(t: GpuThreadLowering, eqn, inputs):
    params = eqn.params
    if t.warp is not None:
        raise t.error(eqn, "run_scoped inside a warp-level core_map is not supported by semcheck yet",
                      hint="allocate before the core_map and close over the allocation")
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
    if axes and t.kernel.num_threads > 1:
        _sync_block(t, eqn)
    entry = t.scope_entries[id(eqn)] = t.scope_entries.get(id(eqn), -1) + 1
    jaxpr, consts = unwrap(params["jaxpr"])
    closed_over = [const_value(c) for c in consts] + list(inputs)
    # `ref_transforms` records how the allocations were wrapped for the body; the body's
    # eqns already spell those transforms out, so they are not applied twice.
    refs = []
    _name, scoped_fn = kernel_function(jaxpr.debug_info)
    is_body = scoped_fn is not None and (scoped_fn.file, scoped_fn.line) == (t.kernel.kernel_loc.file, t.kernel.kernel_loc.line)
    names = ref_names(jaxpr, "scoped", bound=t.kernel.body_operands if is_body else None)
    said = [_allocation_said(var.aval) for var in jaxpr.invars]
    shown_as = helpers_allocations_shown_as(eqn, jaxpr, names, said, t.loc(eqn))
    for k, var in enumerate(jaxpr.invars):
        is_barrier = barrier_info(var.aval.dtype) is not None
        # Barriers are initialized at every entry; memory and semaphores keep their slot.
        key = (id(eqn), k, t.sub if per_thread else None, entry if is_barrier else None)
        ref = t.kernel.scoped.get(key)
        if not isinstance(ref, RefValue):  # not yet allocated
            ref = t.kernel.scoped[key] = declare_gpu_ref(t.kernel, names[k], var.aval, SemOrigin.SCOPED, t.loc(eqn),
                                                         shown_as[k])
        refs.append(ref)
    return eval_jaxpr(t, jaxpr, closed_over[:len(jaxpr.constvars)], refs)


@rule("run_state", backend=GPU)
def run_state(t: GpuThreadLowering, eqn, inputs):
    """`pl.run_state(f)(init)`: `f` runs on refs that start holding `init` (a wgmma
    accumulator, `plgpu.ACC.init(acc)`, as JAX's attention_mgpu.py computes PV; the values
    `f` closes over, which JAX hoists into refs, jax/_src/state/utils.py
    `hoist_consts_to_refs`), and the primitive returns what they hold at its end. Those refs
    are the thread's own registers: each gets an allocation of this thread (no other thread
    can touch it, so no access to it races) holding its initial value for the data path, with
    no store emitted. Refs `f` closes over pass through as they are: the barriers and
    memory `f` uses are the kernel's."""
    if t.warp is not None:
        raise t.error(eqn, "run_state inside a warp-level core_map is not supported by semcheck yet",
                      hint="call it from the warpgroup's body, outside the warp-level core_map")
    jaxpr = eqn.params["jaxpr"]
    initialized = eqn.params.get("is_initialized") or (True,) * len(inputs)
    names = ref_names(jaxpr, "state")
    refs = []
    for k, (var, value) in enumerate(zip(jaxpr.invars, inputs)):
        if isinstance(value, RefValue):
            refs.append(value)
            continue
        key = (id(eqn), k, t.sub, "run_state")
        ref = t.kernel.scoped.get(key)
        if not isinstance(ref, RefValue):
            ref = t.kernel.scoped[key] = declare_gpu_ref(t.kernel, names[k], var.aval, SemOrigin.SCOPED, t.loc(eqn))
        if initialized[k]:
            from semcheck.lower.memory import ref_of

            reg, _device = located_region(t, eqn, ref, "the run_state ref")
            target, every = ref_of(t, eqn, ref, "the run_state ref")
            t.memory.write(target, every, reg, value)
        refs.append(ref)
    eval_jaxpr(t, jaxpr, [], refs)
    return [Opaque(f"what pl.run_state at {t.loc(eqn)} left in {names[k]}") for k in range(len(eqn.outvars))]


BLOCK_SYNC_NOTE = (
    "a thread-collective pl.run_scoped in a kernel with several Pallas threads begins with a "
    "barrier of all the block's threads, so that none reuses the memory of a scope another "
    "has not left (gpu.barrier, JAX 0.10.2: jax/_src/pallas/mosaic_gpu/lowering.py, "
    "_run_scoped_lowering_rule); semcheck models it as a count every thread adds to and "
    "then waits on"
)


def _sync_block(t: GpuThreadLowering, eqn) -> None:
    """Arrive at the block's barrier and wait until every thread has arrived as often: a
    thread's k-th barrier (from 1) waits for k arrivals of each thread. The k is counted
    while lowering, so the barrier must lie on the thread's one path."""
    t.require_straight_line(eqn, "a thread-collective run_scoped (Mosaic GPU begins it with a "
                            "barrier of the block's threads)", "counts a thread's barriers")
    name = t.kernel.block_barrier(t.loc(eqn))
    t.kernel.note(BLOCK_SYNC_NOTE)
    barrier = ir.SemRef(name, 0)
    t.emitter.emit(ir.Signal(t.loc(eqn), barrier, 1))
    t.block_syncs += 1
    t.emitter.emit(ir.Wait(t.loc(eqn), barrier, t.block_syncs * t.kernel.num_threads, False))


def _allocation_said(aval) -> str | None:
    """A run_scoped allocation in words, as `helpers_allocations_shown_as` takes it."""
    plural = "s" if math.prod(aval.shape) > 1 else ""
    if barrier_info(aval.dtype) is not None:
        return f"barrier{plural}"
    return None if semaphore_kind(aval.dtype) is None else f"semaphore{plural}"


def declare_gpu_ref(ctx, base: str, aval, origin: SemOrigin, loc: ir.Loc, shown_as: str = "") -> RefValue:
    """An allocation of a GPU kernel: an mbarrier array, a GMEM semaphore or a buffer.
    `shown_as`: a semaphore's or barrier's `ir.SemDecl.shown_as`."""
    info = barrier_info(aval.dtype)
    if info is None:
        ref = ctx.declare_ref(base, aval, origin, loc, shown_as=shown_as)
        decl = ctx.buffers.get(ref.alloc)
        if decl is not None and decl.space in ("gmem", "any"):
            # Global memory is one per device, shared by every block.
            ctx.buffers[ref.alloc] = dataclasses.replace(decl, scope=Scope.DEVICE)
        return ref
    shape = tuple(int(d) for d in aval.shape)
    name = ctx.unique(base)
    per_phase = info.num_arrivals * math.prod(ctx.grid_sizes.get(a, 1) for a in info.cluster_axes)
    ctx.semaphores[name] = ir.SemDecl(
        name, SemKind.MBARRIER, max(1, math.prod(shape)), origin, Scope.CORE, None, loc, per_phase, shown_as=shown_as
    )
    ctx.mbarriers[name] = info
    return RefValue(name, True, shape, aval.dtype)


def barrier_info(dtype) -> MBarrier | None:
    gpu_core = jax_internal("gpu_core")

    if isinstance(dtype, gpu_core.ClusterBarrierType):
        axes: list[str] = []
        for axis in dtype.collective_axes:
            axes.extend(axis if isinstance(axis, tuple) else (axis,))
        return MBarrier(int(dtype.num_arrivals), tuple(axes))
    if isinstance(dtype, gpu_core.BarrierType):
        return MBarrier(int(dtype.num_arrivals))
    return None


# --- TMA stores (SMEM -> GMEM) and their bulk async-groups ----------------------------------------
# JAX 0.10.2: `copy_smem_to_gmem` lowers to a `cp.async.bulk` store that, with commit_group
# (the default), is followed by `cp.async.bulk.commit_group` (LaunchContext.async_copy in
# jax/experimental/mosaic/gpu/launch_context.py); `commit_smem_to_gmem_group` emits that
# commit alone; `wait_smem_to_gmem(n, wait_read_only)` lowers to
# `cp.async.bulk.wait_group[.read] n` (LaunchContext.await_async_copy; the rules are in
# jax/_src/pallas/mosaic_gpu/primitives.py). Nothing else waits for them: no implicit wait
# ends the kernel.


@rule("copy_smem_to_gmem", backend=GPU)
def copy_smem_to_gmem(t: GpuThreadLowering, eqn, inputs):
    """A TMA store: a copy that reads its SMEM source until its read completion and writes
    its GMEM destination until its write completion, both counted for the thread's open bulk
    group. A store into a peer's memory writes the peer's buffer and is counted on the
    issuer's group all the same."""
    params = eqn.params
    src, dst, *flat = inputs
    if params.get("has_user_predicate"):
        *flat, predicate = flat
        if not isinstance(predicate, Known):
            raise t.error(eqn, "copy_smem_to_gmem: a predicate known only at run time is not "
                          "supported by semcheck yet", hint="issue the store under pl.when instead")
        issued = bool(predicate.value)
    else:
        issued = True
    src_tr, dst_tr, _ = split_flat(flat, params["src_transforms_treedef"], params["dst_transforms_treedef"])
    _require_straight_line(t, eqn)
    if issued:
        src_region = smem_region(t, eqn, src, "the store source", src_tr)
        if src_region is None:
            raise t.error(eqn, "a TMA store from a peer's SMEM cannot be lowered (Mosaic GPU "
                          "stores from the block's own shared memory)")
        dst_region, device = located_region(t, eqn, dst, "the store destination", dst_tr)
        if device is not None:
            t.kernel.note(REMOTE_TMA_STORE_NOTE)
        reads, writes = _bulk_semaphores(t, eqn, len(t.bulk.sizes))
        size = copy_bytes(t, eqn, transformed_aval(eqn, 0, params["src_transforms_treedef"], params))
        t.emitter.emit(ir.DmaStart(
            t.loc(eqn), src=src_region, dst=dst_region, recv_sem=writes, send_sem=reads,
            # only a label: completions count 1 each on these REGULAR semaphores, and a
            # TMA store is never empty
            nbytes=max(size, 1),
            dst_device=device,
        ))
        t.bulk.open += 1
    if params.get("commit_group", True):
        _commit(t)
    return []


@rule("commit_group", backend=GPU)
def commit_group(t: GpuThreadLowering, eqn, inputs):
    _require_straight_line(t, eqn)
    _commit(t)
    return []


@rule("wait_smem_to_gmem", backend=GPU)
def wait_smem_to_gmem(t: GpuThreadLowering, eqn, inputs):
    """Every group but the `n` most recent has finished reading its sources and, unless
    `wait_read_only`, writing its destinations."""
    _require_straight_line(t, eqn)
    [count] = inputs  # bound as an operand, though Mosaic GPU needs it static
    if not isinstance(count, Known):
        raise t.error(eqn, "wait_smem_to_gmem: the number of groups left in flight is not a constant")
    n, read_only = int(count.value), bool(eqn.params["wait_read_only"])
    bulk, sub = t.bulk, t.sub
    upto = max(0, len(bulk.sizes) - n)
    names = t.kernel.bulk_semaphores.get(sub)
    waited = [(0, bulk.reads_waited)] + ([] if read_only else [(1, bulk.writes_waited)])
    for side, first in waited:
        for group in range(first, upto):
            if bulk.sizes[group] and names is not None:
                sem = ir.SemRef(names[side], group)
                t.emitter.emit(ir.Wait(t.loc(eqn), sem, bulk.sizes[group], decrement=False))
    bulk.reads_waited = max(bulk.reads_waited, upto)
    if not read_only:
        bulk.writes_waited = max(bulk.writes_waited, upto)
    return []


def _commit(t: GpuThreadLowering) -> None:
    t.bulk.sizes.append(t.bulk.open)
    t.bulk.open = 0


def _require_straight_line(t: GpuThreadLowering, eqn) -> None:
    """Bulk groups are numbered while lowering, so every TMA store, commit and wait of a
    thread must lie on its one path."""
    t.require_straight_line(eqn, eqn.primitive.name, "numbers a thread's TMA store groups")


# What the (source read, destination written) counters stand for in a report: the waits on
# them are `plgpu.wait_smem_to_gmem` calls, which name no semaphore.
_BULK_SHOWN_AS = ("the source reads of this thread's TMA stores", "the writes of this thread's TMA stores")


def _bulk_semaphores(t: GpuThreadLowering, eqn, group: int) -> tuple[ir.SemRef, ir.SemRef]:
    """The thread's (source read, destination written) counters of `group`, declared (or
    grown) on first use: one instance per block, one allocation per Pallas thread."""
    ctx = t.kernel
    names = ctx.bulk_semaphores.get(t.sub)
    if names is None:
        suffix = f"_thread{t.sub}" if ctx.num_threads > 1 else ""
        names = ctx.bulk_semaphores[t.sub] = (
            ctx.unique(f"tma_store_read{suffix}"), ctx.unique(f"tma_store_written{suffix}"),
        )
    for name, shown_as in zip(names, _BULK_SHOWN_AS):
        decl = ctx.semaphores.get(name)
        if decl is None:
            decl = ir.SemDecl(name, SemKind.REGULAR, 0, SemOrigin.SCRATCH, Scope.CORE, None, t.loc(eqn),
                              shown_as=shown_as, index_shown_as="group")
        if decl.size <= group:
            ctx.semaphores[name] = dataclasses.replace(decl, size=group + 1)
    return ir.SemRef(names[0], group), ir.SemRef(names[1], group)


def transformed_aval(eqn, position, treedef, params):
    """The aval of operand `position` after its transforms, or None when it cannot be told."""
    TransformedRef = jax_internal("state_types").TransformedRef

    try:
        flat_avals = [v.aval for v in eqn.invars]
        base = 3 if "barrier_transforms_treedef" in params else 2
        counts = [params["src_transforms_treedef"].num_leaves, params["dst_transforms_treedef"].num_leaves]
        start = base + sum(counts[: position])
        transforms = treedef.unflatten(flat_avals[start:start + treedef.num_leaves])
        return TransformedRef(flat_avals[position], tuple(transforms))
    except Exception:
        return None


def copy_bytes(t, eqn, aval) -> int:
    from semcheck.lower.memory import nbytes_of_aval

    try:
        return nbytes_of_aval(t, eqn, aval)
    except Exception:
        return 0  # the callers keep a TMA copy at 1 byte or more: 0 bytes would complete at once
