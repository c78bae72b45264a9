"""Mosaic GPU semaphores (docs/semantics.md, "GPU specifics"), rules for the "gpu" backend.

GMEM semaphores: a `scratch_types` or `run_scoped` semaphore exists once per block (lowering
slices one copy per block), a `pl.get_global` one once per launch, shared by every block. A
remote signal reaches the same allocation on the peer (its symmetric address), so a
per-block semaphore is signalled in the peer's block of the same index. Waits may or may not
decrement; decrementing waits of several blocks on one semaphore compete.
"""

from __future__ import annotations

import math

from semcheck import ir
from semcheck.ir import Scope, SemKind, SemOrigin
from semcheck.lower.gpu_kernel import GPU, GpuThreadLowering
from semcheck.lower.interpreter import operand
from semcheck.lower.memory import semaphore_ref
from semcheck.lower.ref_names import assigned_name, call_on_line
from semcheck.lower.source import user_column
from semcheck.lower.registry import rule
from semcheck.lower.tpu import resolve_device
from semcheck.lower.values import Known, RefValue
from semcheck.jax_compat import jax_internal


def _signal(t: GpuThreadLowering, eqn, sem, transforms, inc, device_id, device_id_type, what="signal"):
    device, core = resolve_device(t, eqn, device_id, device_id_type, what)
    if core is not None:
        raise t.error(eqn, f"{what}: a device id dict may only name mesh axes on GPU "
                      "(Mosaic GPU lowering raises ValueError for other keys)")
    if device is not None:
        t.kernel.reaches_peers(t.loc(eqn))
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
    t.kernel.reaches_peers(t.loc(eqn))
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
    """One allocation per call site, shared by every block of the launch, under the name its
    line binds it to (`sem = pl.get_global(...)`: `sem`)."""
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
        loc = t.loc(eqn)
        column = user_column(eqn.source_info.traceback)
        local = assigned_name(loc, "get_global", column)
        # The IR has no name for it: the kernel's line says what its author calls it.
        name = ctx.unique(local or f"global semaphore (line {loc.line})")
        shown_as = _named_global(local, loc) if local else _unnamed_global(loc, column)
        ctx.semaphores[name] = ir.SemDecl(
            name, SemKind.GPU_GLOBAL, max(1, math.prod(shape)), SemOrigin.GLOBAL, Scope.DEVICE, None, loc,
            shown_as=shown_as,
        )
        ref = ctx.global_slots[id(eqn)] = RefValue(name, True, shape, what.dtype)
    return [ref]


def _named_global(local: str, loc: ir.Loc) -> str:
    """A `pl.get_global` its line binds to `local`, as a report says it: as written, or where
    the line is in a helper of the kernel's, which each call runs again (making a semaphore
    of its own under the one local), with the call: "`sem` of line 5 (called from line 12)"."""
    return f"`{local}` of {loc.line_text()}" if loc.chain else ""


def _unnamed_global(loc: ir.Loc, column: int | None) -> str:
    """A `pl.get_global` its line binds to no name, as a report says it: by its line, and
    where the line makes several, by its place among them."""
    place = call_on_line(loc, "get_global", column)
    which = f"{_ORDINALS.get(place[0], f'{place[0]}th')} " if place is not None and place[1] > 1 else ""
    return f"the {which}global semaphore of {loc.line_text()}"


_ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}


BARRIER_SEMAPHORES_NOTE = (
    "plgpu.get_barrier_semaphore() (Mosaic GPU, JAX newer than 0.11; from its documentation): "
    "an array of GMEM semaphores per device that XLA zeroes before the module starts and that "
    "every kernel with the same collective_id shares, so the kernel is checked from zero and "
    "each one must be back to 0 when it ends (the next such kernel starts from what it left)"
)


@rule("get_barrier_semaphore", backend=GPU)
def get_barrier_semaphore(t: GpuThreadLowering, eqn, inputs):
    """One array per device, shared by every block (and kernel) of the collective_id."""
    collective_id = getattr(t.kernel.gpu_compiler_params, "collective_id", None)
    if collective_id is None:
        raise t.error(eqn, "plgpu.get_barrier_semaphore() needs collective_id in plgpu.CompilerParams "
                      "(its documentation says so; Mosaic GPU lowering rejects it otherwise)",
                      hint="pass compiler_params=plgpu.CompilerParams(collective_id=<id>)")
    ctx = t.kernel
    name = "barrier_semaphores"
    [out] = eqn.outvars
    shape = tuple(int(d) for d in getattr(out.aval, "shape", ()))
    if name not in ctx.semaphores:
        ctx.unique(name)
        ctx.semaphores[name] = ir.SemDecl(name, SemKind.GPU_GLOBAL, max(1, math.prod(shape)), SemOrigin.BARRIER,
                                          Scope.DEVICE, int(collective_id), t.loc(eqn))
        ctx.note(BARRIER_SEMAPHORES_NOTE)
    return [RefValue(name, True, shape, getattr(out.aval, "dtype", None))]


def _is_gmem_semaphore(aval) -> bool:
    dtypes = jax_internal("dtypes")
    pl_core = jax_internal("pallas_core")

    space = str(getattr(getattr(aval, "memory_space", None), "value", getattr(aval, "memory_space", ""))).lower()
    dtype = getattr(aval, "dtype", None)
    try:
        is_sem = dtype is not None and dtypes.issubdtype(dtype, pl_core.semaphore_dtype)
    except TypeError:
        is_sem = False
    return is_sem and space == "gmem"
