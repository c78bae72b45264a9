"""Refs: which semaphore a `.at[...]` view names, which region a buffer view covers, and the
rules for buffer loads and stores (`get`, `swap`, `addupdate`, `masked_load`, `masked_swap`).

A view is a chain of `NDIndexer` transforms; each one indexes the previous view, so the
rules compose them into one (start, size) per dimension of the allocation. Semaphore
indices must be exact. A buffer region whose start depends on buffer contents widens to the
whole dimension (it over-approximates what is touched), and transforms other than indexing
(bitcast, reshape) widen to the whole buffer.
"""

from __future__ import annotations

import math

import numpy as np

from semcheck import ir
from semcheck.lower.context import ThreadLowering
from semcheck.lower.interpreter import operand
from semcheck.lower.registry import rule
from semcheck.lower.values import Known, Opaque, RefValue, Sym, Value, sym_op


def split_ref(value) -> tuple[object, tuple]:
    """(ref, transforms) of a ref operand that may be a TransformedRef."""
    from jax._src.state.types import TransformedRef

    if isinstance(value, TransformedRef):
        inner, transforms = split_ref(value.ref)
        return inner, transforms + tuple(value.transforms)
    return value, ()


def ref_of(t: ThreadLowering, eqn, value, what: str, extra=()) -> tuple[RefValue, tuple]:
    ref, transforms = split_ref(value)
    transforms = transforms + tuple(extra or ())
    if not isinstance(ref, RefValue):
        reason = ref.why if isinstance(ref, Opaque) else "a value semcheck does not track"
        raise t.error(
            eqn,
            f"{what} is not a ref semcheck knows (it comes from {reason})",
            hint="pass semaphores and buffers as kernel operands, scratch_shapes or "
            "pl.run_scoped allocations",
        )
    return ref, ref.transforms + transforms


def _view(t: ThreadLowering, eqn, ref: RefValue, transforms, *, exact: bool, what: str):
    """Per allocation dim: (start operand or None when unknown, size); plus the dims the
    view still has. None when a transform is not indexing (only allowed when not exact)."""
    from jax._src.state.indexing import NDIndexer, Slice

    starts: list = [0] * len(ref.shape)
    sizes = list(ref.shape)
    view_dims = list(range(len(ref.shape)))
    for transform in transforms:
        if not isinstance(transform, NDIndexer):
            if exact:
                raise t.error(
                    eqn,
                    f"{what}: semcheck cannot follow the ref transform {type(transform).__name__}",
                    hint="index semaphore arrays with .at[i] only",
                )
            return None, []
        kept = []
        for dim, index in zip(view_dims, transform.indices):
            if isinstance(index, Slice):
                start = _index(t, eqn, index.start, exact, what)
                size = index.size if isinstance(index.size, int) else None
                if start is None or size is None:
                    starts[dim], sizes[dim] = None, ref.shape[dim]
                else:
                    if starts[dim] is not None:
                        starts[dim] = sym_op("add", starts[dim], start)
                    sizes[dim] = (size - 1) * index.stride + 1 if size else 0
                kept.append(dim)
            else:
                start = _index(t, eqn, index, exact, what)
                if start is None or starts[dim] is None:
                    starts[dim], sizes[dim] = None, ref.shape[dim]
                else:
                    starts[dim] = sym_op("add", starts[dim], start)
                    sizes[dim] = 1
        view_dims = kept
    return list(zip(starts, sizes)), view_dims


def _index(t: ThreadLowering, eqn, index, exact: bool, what: str):
    if isinstance(index, int):
        return index
    if isinstance(index, Known) and index.value.size != 1:
        if exact:
            raise t.error(eqn, f"{what}: semaphores cannot be gathered with an index array")
        return None
    if isinstance(index, (Known, Sym)):
        return operand(t, eqn, index, what)
    if isinstance(index, Opaque) and not exact:
        return None
    return operand(t, eqn, index, what)


def semaphore_ref(
    t: ThreadLowering, eqn, value, what: str, extra=(), *, device=None, core=None
) -> ir.SemRef:
    ref, transforms = ref_of(t, eqn, value, what, extra)
    if not ref.is_semaphore:
        raise t.error(eqn, f"{what} is the buffer {ref.alloc!r}, not a semaphore")
    dims, view_dims = _view(t, eqn, ref, transforms, exact=True, what=f"{what} index")
    if view_dims:
        raise t.error(eqn, f"{what}: {ref.alloc} is indexed to a shape, not a single semaphore")
    index: ir.Operand = 0
    stride = 1
    for (start, _size), extent in reversed(list(zip(dims, ref.shape))):
        index = sym_op("add", index, sym_op("mul", start, stride))
        stride *= extent
    return ir.SemRef(ref.alloc, index, device, core)


def region(t: ThreadLowering, eqn, value, what: str, extra=()) -> ir.Region:
    ref, transforms = ref_of(t, eqn, value, what, extra)
    if ref.is_semaphore:
        raise t.error(eqn, f"{what} is the semaphore {ref.alloc!r}, not a buffer")
    dims, _ = _view(t, eqn, ref, transforms, exact=False, what=what)
    if dims is None:
        return ir.Region(ref.alloc, (0,) * len(ref.shape), tuple(ref.shape))
    starts = tuple(0 if s is None else s for s, _ in dims)
    return ir.Region(ref.alloc, starts, tuple(size for _, size in dims))


def nbytes_of_aval(t: ThreadLowering, eqn, aval) -> int:
    """Bytes of a (possibly transformed) ref aval: static shape times itemsize (reference
    §1.5; the Pallas abstract eval does the same)."""
    import numpy as np

    if not all(isinstance(d, int) for d in aval.shape):
        raise t.error(eqn, f"the DMA's shape {aval.shape} is known only at run time",
                      hint="use static slice sizes (pl.ds(start, size) with a Python int size)")
    return math.prod(aval.shape) * np.dtype(aval.dtype).itemsize


# --- loads and stores ------------------------------------------------------------------------


def _why(t: ThreadLowering, eqn, reg: ir.Region) -> str:
    return f"the value loaded from {reg.buffer} at {t.loc(eqn)}"


def _load(t: ThreadLowering, eqn, value, what: str, transforms) -> tuple[ir.Region, Value]:
    """Emit the load; the value it sees (data.py follows the thread's buffers)."""
    from semcheck.lower.interpreter import FOLD_LIMIT

    reg = region(t, eqn, value, what, transforms)
    _emit_read(t, ir.Load(t.loc(eqn), reg))
    ref, all_transforms = ref_of(t, eqn, value, what, transforms)
    [out] = eqn.outvars[:1]
    scalar = _scalar_prefetch_element(t, eqn, ref, reg)
    if scalar is not None:
        return reg, scalar
    return reg, t.memory.read(ref, all_transforms, reg, out.aval, _why(t, eqn, reg), FOLD_LIMIT)


def _emit_read(t: ThreadLowering, instr: ir.Instr) -> None:
    t.emitter.emit(instr)
    t.read_point(instr)


def copy_data(t: ThreadLowering, eqn, start: ir.DmaStart, src, dst) -> None:
    """What a copy moves (data.py): a local copy writes its destination in program order
    (for a race-free kernel nothing reads it before the wait, nor writes the source); a
    remote copy's payload lands where the canonical run of the protocol says (schedule.py)."""
    from semcheck.lower.data import DATA_LIMIT, Payload, _concrete_transforms

    t.read_point(start)
    src_ref, src_transforms = ref_of(t, eqn, src, "the DMA source")
    dst_ref, dst_transforms = ref_of(t, eqn, dst, "the DMA destination")
    dst_aval = eqn.params["tree"].unflatten([v.aval for v in eqn.invars])[1]
    value = t.memory.read(src_ref, src_transforms, start.src, dst_aval, _why(t, eqn, start.src), DATA_LIMIT)
    local = start.device is None or (start.device == t.device and start.core in (None, t.core))
    if local:
        t.memory.write(dst_ref, dst_transforms, start.dst, value)
        return
    if not isinstance(start.device, int) or not isinstance(start.core, (int, type(None))):
        t.kernel.volatile.add(dst_ref.alloc)  # lands on a device known only at run time
        return
    concrete = _concrete_transforms(tuple(dst_transforms))
    known = value if isinstance(value, Known) and concrete is not None else None
    why = value.why if isinstance(value, Opaque) else f"data copied at {t.loc(eqn)}"
    t.kernel.payloads[id(start)] = Payload(
        start.device, t.core if start.core is None else start.core, dst_ref,
        concrete or (), start.dst, known, why,
    )


@rule("get")
def get(t: ThreadLowering, eqn, inputs):
    ref, *flat = inputs
    transforms = eqn.params["tree"].unflatten(flat)
    _reg, loaded = _load(t, eqn, ref, "the loaded ref", transforms)
    return [loaded]


def _scalar_prefetch_element(t: ThreadLowering, eqn, ref: RefValue, reg: ir.Region) -> Sym | None:
    """One integer element of a scalar-prefetch operand the kernel has not written: the
    caller's value, so a protocol input (a signal count or wait value may depend on it)."""
    [out] = eqn.outvars[:1]
    aval = out.aval
    prefetch = reg.buffer in t.kernel.scalar_operands
    if tuple(aval.shape) != () or not (prefetch or t.kernel.assumed):
        return None
    if not (np.issubdtype(aval.dtype, np.integer) or aval.dtype == np.bool_):
        return None
    if not all(isinstance(x, int) for x in reg.start) or any(size != 1 for size in reg.size):
        return None  # an element chosen at run time: its value stays untracked
    if not reg.start and math.prod(t.kernel.buffers[reg.buffer].shape) != 1:
        return None
    if t.memory.written_element(ref, reg):
        return None  # the kernel's own store defines it (data.py)
    if not prefetch and not t.kernel.is_assumed(reg.buffer, tuple(reg.start), t.device):
        return None  # its value comes from the data (data.py)
    name = t.kernel.scalar_input(reg.buffer, tuple(reg.start), t.device, aval.dtype, t.loc(eqn), prefetch)
    return Sym(ir.Reg(name), np.dtype(aval.dtype))


@rule("swap")
def swap(t: ThreadLowering, eqn, inputs):
    ref, value, *flat = inputs
    transforms = eqn.params["tree"].unflatten(flat)
    reg = region(t, eqn, ref, "the stored ref", transforms)
    target, all_transforms = ref_of(t, eqn, ref, "the stored ref", transforms)
    from semcheck.lower.interpreter import FOLD_LIMIT

    store = ir.Store(t.loc(eqn), reg)
    _emit_read(t, store)
    old = t.memory.read(target, all_transforms, reg, eqn.outvars[0].aval, _why(t, eqn, reg), FOLD_LIMIT)
    t.memory.write(target, all_transforms, reg, value)
    return [old]


@rule("addupdate")
def addupdate(t: ThreadLowering, eqn, inputs):
    ref, value, *flat = inputs
    transforms = eqn.params["tree"].unflatten(flat)
    reg = region(t, eqn, ref, "the updated ref", transforms)
    _emit_read(t, ir.Load(t.loc(eqn), reg))
    t.emitter.emit(ir.Store(t.loc(eqn), reg))
    target, all_transforms = ref_of(t, eqn, ref, "the updated ref", transforms)
    t.memory.add(target, all_transforms, reg, value, _why(t, eqn, reg), eqn.invars[1].aval)
    return []


@rule("masked_load")
def masked_load(t: ThreadLowering, eqn, inputs):
    ref, transforms, _mask, _other = eqn.params["args_tree"].unflatten(inputs)
    reg = region(t, eqn, ref, "the loaded ref", transforms)
    t.emitter.emit(ir.Load(t.loc(eqn), reg))
    return [Opaque(_why(t, eqn, reg)) for _ in eqn.outvars]


@rule("masked_swap")
def masked_swap(t: ThreadLowering, eqn, inputs):
    ref, transforms, _value, _mask = eqn.params["args_tree"].unflatten(inputs)
    reg = region(t, eqn, ref, "the stored ref", transforms)
    t.emitter.emit(ir.Store(t.loc(eqn), reg))
    # A masked store is not followed: the region may now hold anything.
    target, _all = ref_of(t, eqn, ref, "the stored ref", transforms)
    t.memory.forget(target, reg, f"a masked store at {t.loc(eqn)}")
    return [Opaque(_why(t, eqn, reg)) for _ in eqn.outvars]
