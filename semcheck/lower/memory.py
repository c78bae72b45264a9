"""Refs: which semaphore a `.at[...]` view names, which region a buffer view covers, and the
rules for buffer loads and stores (`get`, `swap`, `addupdate`, `masked_load`, `masked_swap`).

A view is a chain of `NDIndexer` transforms; each one indexes the previous view, so the
rules compose them into one (start, stride, count) per dimension of the allocation; slice
sizes may be traced (`pl.ds(start, size)`), known per thread or symbolic. A semaphore index
semcheck cannot know becomes an input over the array (docs/semantics-lowering.md). A
buffer region whose start or size depends on buffer contents widens to the whole dimension
(it over-approximates what is touched); a view through a reshape or bitcast is followed
element by element (`_positions`) to the box it touches when every index and size is known
per thread, and widens to the whole buffer otherwise. `pl.select_ref` operands of DMAs are chosen (or
branched over) by `for_each_selection`. A TPU load's or store's window is bounded by the
`.at[...]` views before its own index as well (`window`, `ir.Load.view`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import field

import numpy as np

from semcheck import ir
from semcheck.lower.context import ThreadLowering
from semcheck.lower.interpreter import operand
from semcheck.lower.registry import rule
from semcheck.lower.values import Known, Opaque, RefValue, RunTimeElements, Sym, Value, fill_of, known, sym_op
from semcheck.jax_compat import jax_internal
from semcheck.records import record


def split_ref(value) -> tuple[object, tuple]:
    """(ref, transforms) of a ref operand that may be a TransformedRef."""
    TransformedRef = jax_internal("state_types").TransformedRef

    if isinstance(value, TransformedRef):
        inner, transforms = split_ref(value.ref)
        return inner, transforms + tuple(value.transforms)
    return value, ()


def ref_of(t: ThreadLowering, eqn, value, what: str, extra=()) -> tuple[RefValue, tuple]:
    ref, transforms = split_ref(value)
    transforms = transforms + tuple(extra or ())
    if _is_multiref(ref):
        raise t.error(
            eqn,
            f"{what} is a pl.select_ref, which Mosaic lowers only as a DMA operand "
            "(jax/_src/pallas/mosaic/lowering.py, lower_with_transformed_refs; elsewhere "
            "_transform_ref raises NotImplementedError)",
            hint="select the semaphore with lax.cond, or index a semaphore array with .at[i]",
        )
    if not isinstance(ref, RefValue):
        reason = ref.why if isinstance(ref, Opaque) else "a value semcheck does not track"
        raise t.error(
            eqn,
            f"{what} is not a ref semcheck knows (it comes from {reason})",
            hint="pass semaphores and buffers as kernel operands, scratch_shapes or "
            "pl.run_scoped allocations",
        )
    return ref, ref.transforms + transforms


@record
class _Dim:
    """One dim of the allocation under a view: where the view starts (None when unknown),
    the distance between its consecutive elements, and how many elements it has (an
    operand, or None when unknown)."""

    start: ir.Operand | None
    stride: int
    count: ir.Operand | None
    unknown: str | None = None  # what the start or count that semcheck does not know came from

    def extent(self) -> ir.Operand | None:
        """Elements of the allocation from the first to the last the view touches."""
        if self.count is None or self.stride == 1:
            return self.count
        if isinstance(self.count, int):
            return (self.count - 1) * self.stride + 1 if self.count else 0
        return sym_op("max", sym_op("sub", sym_op("mul", self.count, self.stride), self.stride - 1), 0)

    def span(self) -> ir.Operand | None:
        """Elements of the allocation from the view's first to one view stride past its
        last: its box as a window of it is checked against (`_view_bounds`). As a buffer's
        extent, it lets an empty window start one element past the view's end (`pl.ds(n, 0)`
        of an n-element view), and no further; a non-empty window starts and ends on the
        view's stride, so inside the span is inside the view (one that ends past the view's
        last element ends a stride past it, past the span)."""
        if self.count is None or self.stride == 1:
            return self.count
        if isinstance(self.count, int):
            return self.count * self.stride
        return sym_op("mul", self.count, self.stride)


@record
class _View:
    dims: list[_Dim]  # per allocation dim
    kept: list[int]  # allocation dims the view still has, in order
    sizes: list[Value]  # the view's size along each kept dim, as lowered (for byte counts)
    # The `.at[...]` views the last indexer indexes, outermost first: per allocation dim,
    # (start, span: `_Dim.span`) of the view, None where unknown.
    enclosing: list[list[tuple[ir.Operand | None, ir.Operand | None]]] = field(default_factory=list)


# --- pl.select_ref ------------------------------------------------------------------------------


def _is_multiref(ref) -> bool:
    return isinstance(ref, (tuple, list)) and not all(isinstance(x, int) for x in ref)


def _find_select(value):
    """(index, options, rebuild) of the first `pl.select_ref` inside a ref operand, where
    rebuild(option) is the operand with that option in the selection's place; None when it
    has none. A selection is a TransformedRef over a tuple of refs with one SelectTransform
    (jax/_src/state/types.py); `.at[...]` on it wraps it in another TransformedRef."""
    TransformedRef = jax_internal("state_types").TransformedRef

    if not isinstance(value, TransformedRef):
        return None
    if _is_multiref(value.ref):
        [select] = value.transforms
        return select.idx, list(value.ref), lambda option: option
    found = _find_select(value.ref)
    if found is None:
        return None
    index, options, rebuild = found
    return index, options, lambda option: TransformedRef(rebuild(option), value.transforms)


def for_each_selection(t: ThreadLowering, eqn, operands: list, lower: Callable[[list], None]) -> None:
    """Lower `lower(operands)` once per choice of every `pl.select_ref` among the ref
    operands of a DMA. Mosaic lowers a selection to nested `scf.if`s on `index == 0`, each
    else branch going on with `index - 1` and the last option taking whatever is left
    (`_select_to_ifop` in jax/_src/pallas/mosaic/lowering.py, 0.10.2): option k for
    0 <= k < n - 1, the last option for any other index. A known index picks its option; one
    known only at run time becomes IR branches over the options; one semcheck does not know
    (buffer contents) becomes a protocol input over the options, checked in every case."""
    for position, value in enumerate(operands):
        found = _find_select(value)
        if found is None:
            continue
        index, options, rebuild = found

        def chosen(k: int, position=position, rebuild=rebuild, options=options) -> None:
            rest = list(operands)
            rest[position] = rebuild(options[k])
            for_each_selection(t, eqn, rest, lower)

        last = len(options) - 1
        if isinstance(index, int) or isinstance(index, Known) and index.is_scalar:
            t.used(eqn, index, "the pl.select_ref index")
            k = int(index) if isinstance(index, int) else index.as_int()
            chosen(k if 0 <= k < last else last)
            return
        if isinstance(index, Opaque):
            loc = t.loc(eqn)
            name = t.kernel.input_for_unknown_data(f"select@{loc.line}.d{t.device}c{t.core}", 0, last, loc)
            t.kernel.note(
                f"the pl.select_ref at {loc} chooses by {index.why}; semcheck checks every one of "
                f"its {len(options)} refs on every device and core"
            )
            index_op: ir.Operand = ir.Reg(name)
        else:
            index_op = operand(t, eqn, index, "the pl.select_ref index")
        branch_cases(t, eqn, index_op, len(options), chosen)
        return
    lower(operands)


def branch_cases(t: ThreadLowering, eqn, index: ir.Operand, cases: int, lower: Callable[[int], None]) -> None:
    """IR branches on `index`: case k for index == k (k < cases - 1), the last case for
    every other value; `lower(k)` emits each case's code."""
    em, loc = t.emitter, t.loc(eqn)
    labels = [em.label() for _ in range(cases - 1)]
    end = em.label()
    for k, label in enumerate(labels):
        em.branch(sym_op("eq", index, k), label, loc)
    before, after = t.memory.snapshot(), []  # each case starts from the same buffers (data.py)
    lower(cases - 1)
    after.append(t.memory.snapshot())
    for k, label in enumerate(labels):
        em.jump(end, loc)
        em.place(label)
        t.memory.restore(before)
        lower(k)
        after.append(t.memory.snapshot())
    em.place(end)
    t.memory.join(after)


# --- views ---------------------------------------------------------------------------------------


def _view(t: ThreadLowering, eqn, ref: RefValue, transforms, *, exact: bool, what: str) -> _View | None:
    """Compose the ref's `.at[...]` indexers into one view of the allocation. Each indexer
    indexes the view before it, so its starts count in that view's elements (scaled by its
    strides, offset by its starts). None when a transform is not indexing (only allowed
    when not exact)."""
    NDIndexer = jax_internal("state_indexing").NDIndexer
    Slice = jax_internal("state_indexing").Slice

    view = _View([_Dim(0, 1, extent) for extent in ref.shape], list(range(len(ref.shape))),
                 [known(extent) for extent in ref.shape])
    enclosing: list[list[tuple[ir.Operand | None, ir.Operand | None]]] = []
    for position, transform in enumerate(transforms):
        if position:  # the transforms so far make a view that this one indexes
            enclosing.append([(d.start, d.span()) for d in view.dims])
        if not isinstance(transform, NDIndexer):
            if exact:
                raise t.error(
                    eqn,
                    f"{what}: semcheck cannot follow the ref transform {type(transform).__name__}",
                    hint="index semaphore arrays with .at[i] only",
                )
            return None
        kept: list[int] = []
        sizes: list[Value] = []
        for dim, index, _ in zip(view.kept, transform.indices, view.sizes):
            d = view.dims[dim]
            extent = d.count if isinstance(d.count, int) else ref.shape[dim]
            if isinstance(index, Slice):
                start = _index(t, eqn, index.start, exact, what, extent)
                count = _size(index.size)
                if start is None or count is None:
                    d.unknown = d.unknown or _origin(index.start if start is None else index.size)
                d.start = None if start is None or d.start is None else sym_op("add", d.start, sym_op("mul", start, d.stride))
                d.stride *= index.stride
                d.count = count
                kept.append(dim)
                # JAX types Slice.size int | Array; under semcheck's interpreter it holds a semcheck Value.
                sizes.append(index.size if not isinstance(index.size, int) else known(index.size))  # type: ignore[arg-type]
            else:
                start = _index(t, eqn, index, exact, what, extent)
                if start is None:
                    d.unknown = d.unknown or _origin(index)
                d.start = None if start is None or d.start is None else sym_op("add", d.start, sym_op("mul", start, d.stride))
                d.count, d.stride = 1, 1  # one element: no later indexer strides over it
        view = _View(view.dims, kept, sizes)
    view.enclosing = enclosing
    return view


def _origin(value) -> str:
    """Where an index or size semcheck cannot follow came from, for the widened region's note."""
    if isinstance(value, Opaque):
        return value.why
    if isinstance(value, Known):
        return "an array of indices (a gather)"
    return "a value semcheck does not track"


def _size(size) -> ir.Operand | None:
    """A slice size as an operand: a Python int, a value known per thread, a symbolic one;
    None when semcheck does not know it."""
    if isinstance(size, int):
        return size
    if isinstance(size, Known) and size.value.size == 1:
        return size.as_int()
    if isinstance(size, Sym):
        return size.op
    return None


def _index(t: ThreadLowering, eqn, index, exact: bool, what: str, extent: int):
    """An index into a view dim of `extent` elements, as an operand; None when a buffer
    view's index is unknown (the region then widens)."""
    if isinstance(index, int):
        return index
    if isinstance(index, Known) and index.value.size != 1:
        if exact:
            raise t.error(eqn, f"{what}: semaphores cannot be gathered with an index array")
        return None
    if isinstance(index, (Known, Sym)):
        return operand(t, eqn, index, what)
    if isinstance(index, Opaque):
        return _unknown_semaphore_index(t, eqn, index, what, extent) if exact else None
    return operand(t, eqn, index, what)


def _unknown_semaphore_index(t: ThreadLowering, eqn, index: Opaque, what: str, extent: int) -> ir.Operand:
    """A semaphore index semcheck cannot know (it comes from buffer contents): a protocol
    input over the array's static extent, so every semaphore the index may name is
    checked, on every device and core. An index outside the shape cannot be seen here; one
    known only at run time (a register) is still checked and faults with
    invalid_semaphore_index."""
    loc = t.loc(eqn)
    name = t.kernel.input_for_unknown_data(f"index@{loc.line}.d{t.device}c{t.core}", 0, max(extent, 1) - 1, loc)
    t.kernel.note(
        f"{what} at {loc} depends on {index.why}; semcheck checks every index 0..{extent - 1} "
        "of the semaphore array on every device and core (it assumes the index lies inside "
        "the array, which it cannot see)"
    )
    return ir.Reg(name)


def semaphore_ref(
    t: ThreadLowering, eqn, value, what: str, extra=(), *, device=None, core=None
) -> ir.SemRef:
    ref, transforms = ref_of(t, eqn, value, what, extra)
    if not ref.is_semaphore:
        raise t.error(eqn, f"{what} is the buffer {ref.alloc!r}, not a semaphore")
    view = _view(t, eqn, ref, transforms, exact=True, what=f"{what} index")
    assert view is not None, "an exact view either exists or raised"
    if view.kept:
        raise t.error(eqn, f"{what}: {ref.alloc} is indexed to a shape, not a single semaphore")
    index: ir.Operand = 0
    stride = 1
    for d, extent in reversed(list(zip(view.dims, ref.shape))):
        assert d.start is not None, "an exact view knows where it starts"
        index = sym_op("add", index, sym_op("mul", d.start, stride))
        stride *= extent
    return ir.SemRef(ref.alloc, index, device, core)


def region(t: ThreadLowering, eqn, value, what: str, extra=(), *, checked: bool = False) -> ir.Region:
    """The part of the allocation a buffer view may touch (`window`, without the views)."""
    return window(t, eqn, value, what, extra, checked=checked)[0]


def window(t: ThreadLowering, eqn, value, what: str, extra=(), *,
           checked: bool = False) -> tuple[ir.Region, ir.Region | None]:
    """The part of the allocation a buffer view may touch: exact where its starts and sizes
    are known (per thread, or as operands over inputs and registers); a dim whose start or
    size is unknown widens to the whole dim (it covers whatever one run touches), and a
    view through a transform other than indexing to the whole buffer.

    `checked` (a TPU load or store, `ir.Load.checked`): a widened region's window is not
    checked against its buffer (`ir.window_checked`), and a note says so. That includes a
    window that leaves its view through a reshape or bitcast: JAX's discharge clamps it, so
    no box of the allocation is the one a chip touches, and the line may sit under a guard
    that keeps it from running, which the lowering cannot see.

    With it, also the box of the `.at[...]` views the access indexes (`ir.Load.view`), or
    None (`_view_bounds`)."""
    ref, transforms = ref_of(t, eqn, value, what, extra)
    if ref.is_semaphore:
        raise t.error(eqn, f"{what} is the semaphore {ref.alloc!r}, not a buffer")
    view = _view(t, eqn, ref, transforms, exact=False, what=what)
    loc = t.loc(eqn)
    if view is None:
        try:
            positions = _positions(ref, transforms, strict=True)
        except _OutsideView as outside:
            return _unchecked(t, checked, ir.Region(
                ref.alloc, (0,) * len(ref.shape), tuple(ref.shape),
                widened=f"{what} at {loc} indexes {ref.alloc} through a reshape or bitcast with {outside}, "
                        f"taken as all of {ref.alloc}")), None
        if positions is None and _last_window_is_empty(transforms):
            return ir.Region(ref.alloc, (0,) * len(ref.shape), (0,) * len(ref.shape),
                             widened=f"{what} at {loc} is a window of 0 elements at an offset semcheck "
                                     f"cannot follow (through a reshape or bitcast of {ref.alloc}): it "
                                     "touches nothing, and where it starts is not checked"), None
        if positions is None:
            return _unchecked(t, checked, ir.Region(
                ref.alloc, (0,) * len(ref.shape), tuple(ref.shape),
                widened=f"{what} at {loc} is a view semcheck cannot follow, taken as all of {ref.alloc}")), None
        # inside the allocation, and each view, by construction (`_positions` is strict)
        return _bounding_region(ref, positions, f"{what} at {loc}"), None
    starts: list[ir.Operand] = []
    sizes: list[ir.Operand] = []
    unknown: list[str] = []
    for position, (d, extent) in enumerate(zip(view.dims, ref.shape)):
        known_extent = d.extent()
        if d.start is None or known_extent is None:
            starts.append(0)
            sizes.append(extent)
            unknown.append(f"dim {position} ({d.unknown or 'a value semcheck does not track'})")
        else:
            starts.append(d.start)
            sizes.append(known_extent)
    widened = f"{what} at {loc} is taken as all of {ref.alloc} along {', '.join(unknown)}" if unknown else None
    reg = _unchecked(t, checked, ir.Region(ref.alloc, tuple(starts), tuple(sizes), widened=widened))
    bounds = _view_bounds(ref, view, reg) if checked and widened is None else None
    if bounds is not None:
        t.kernel.note(VIEW_NOTE)
    return reg, bounds


# The modelling choice a window checked against its `.at[...]` view makes, and its basis
# (docs/kinds/invalid_region.md has the sources).
VIEW_NOTE = (
    "a TPU load's or store's window is checked against the .at[...] view it indexes, not only "
    "its buffer: a window past the view that stays inside the buffer is invalid_region. Mosaic "
    "indexes the view's memref (tpu.memref_slice), JAX refuses such a static index at trace "
    "time (Out of bound slice) and Mosaic's bounds checks assert against the view; JAX 0.10.2's "
    "TPU interpreter checks only the buffer (it touches the buffer past the view) and JAX's "
    "discharge clamps the index into the view, so what such an access touches depends on "
    "who runs it"
)


def _view_bounds(ref: RefValue, view: _View, reg: ir.Region) -> ir.Region | None:
    """The box of the allocation that every `.at[...]` view of the access covers (their
    intersection: the window must lie inside each), for `ir.Load.view`. A dim whose view
    start or extent semcheck does not know is not bounded by that view. None when the views
    bound nothing the buffer does not, or the window is known to lie inside them (most
    accesses: `ref.at[slot][...]` reads or writes its view whole)."""
    if not view.enclosing:
        return None
    starts: list[ir.Operand] = []
    sizes: list[ir.Operand] = []
    for dim, extent in enumerate(ref.shape):
        lo: ir.Operand | None = None
        hi: ir.Operand | None = None
        for boxes in view.enclosing:
            start, size = boxes[dim]
            if start is None or size is None:
                continue
            end = sym_op("add", start, size)
            lo = start if lo is None else sym_op("max", lo, start)
            hi = end if hi is None else sym_op("min", hi, end)
        if lo is None or hi is None:  # no view bounds this dim: the buffer does
            lo, hi = 0, extent
        starts.append(lo)
        sizes.append(sym_op("sub", hi, lo))
    if all(s == 0 and z == n for s, z, n in zip(starts, sizes, ref.shape)):
        return None
    constant = [*starts, *sizes, *reg.start, *reg.size]
    if all(isinstance(x, int) for x in constant) and all(
            lo <= s and s + z <= lo + n  # type: ignore[operator]  # ints, checked above
            for s, z, lo, n in zip(reg.start, reg.size, starts, sizes)):
        return None
    return ir.Region(ref.alloc, tuple(starts), tuple(sizes))


def _unchecked(t: ThreadLowering, checked: bool, reg: ir.Region) -> ir.Region:
    """`reg`, with a note where a checked access's window goes unchecked for being widened."""
    if checked and reg.widened is not None:
        t.kernel.note(f"{reg.widened}, so its window is not checked against the bounds of {reg.buffer}")
    return reg


def nbytes_of_aval(t: ThreadLowering, eqn, aval) -> int:
    """Bytes of a (possibly transformed) ref aval: static shape times itemsize (reference
    §1.5; the Pallas abstract eval does the same)."""
    import numpy as np

    if not all(isinstance(d, int) for d in aval.shape):
        raise t.error(eqn, f"the DMA's shape {aval.shape} is known only at run time",
                      hint="use static slice sizes (pl.ds(start, size) with a Python int size)")
    return math.prod(aval.shape) * np.dtype(aval.dtype).itemsize


def nbytes_of_window(t: ThreadLowering, eqn, value, aval, what: str) -> ir.Operand:
    """Bytes a DMA moves through the window `value` (Mosaic counts the destination's, see
    tpu.py): the static shape of its aval, or, when a `pl.ds` size is traced (JAX then
    gives the window a dynamic-shape aval, `state/indexing.py` `DShapedArray`), the product
    of the window's sizes as lowered: exact when each is known per thread, an operand over
    the protocol's inputs when one comes from scalar prefetch, and an error naming the
    size when semcheck cannot know it."""
    if all(isinstance(d, int) for d in aval.shape):
        return math.prod(aval.shape) * np.dtype(aval.dtype).itemsize
    ref, transforms = ref_of(t, eqn, value, what)
    view = _view(t, eqn, ref, transforms, exact=False, what=what)
    if view is None:
        positions = _positions(ref, transforms)
        if positions is not None:
            return int(positions[0].size) * np.dtype(aval.dtype).itemsize
        through_reshape = _nbytes_of_last_indexer(t, eqn, ref, transforms, what)
        if through_reshape is None:
            raise t.error(eqn, f"{what} has a size known only at run time behind a reshape or bitcast, "
                          "and semcheck does not know every index and size of the view")
        return through_reshape
    nbytes: ir.Operand = np.dtype(ref.dtype).itemsize
    for position, size in enumerate(view.sizes):
        count = operand(t, eqn, size, f"the size of {what} along its dim {position} (a traced pl.ds size)")
        nbytes = sym_op("mul", nbytes, count)
    return nbytes


def _last_window_is_empty(transforms) -> bool:
    """Whether the view's last transform is an indexer with a slice of size 0 (an int, or a
    value known per thread): the window then holds no element, wherever the reshapes and
    bitcasts before it and its starts put it (the batched RPA writeback sized
    `jnp.where(do_writeback, sz, 0)`)."""
    NDIndexer = jax_internal("state_indexing").NDIndexer
    Slice = jax_internal("state_indexing").Slice
    if not transforms or not isinstance(transforms[-1], NDIndexer):
        return False
    return any(isinstance(index, Slice) and _size(index.size) == 0 for index in transforms[-1].indices)


def _nbytes_of_last_indexer(t: ThreadLowering, eqn, ref: RefValue, transforms, what: str) -> ir.Operand | None:
    """Bytes of a window whose last indexer follows a reshape or bitcast (tpu-inference's
    batched RPA writeback, `ref.reshape(-1, ...).at[pl.ds(offset, sz)]` with the offset read
    from a page table): a reshape or bitcast keeps a window's bytes, so the window holds the
    product of the last indexer's slice sizes (a scalar index keeps one element) in the dtype
    in effect there, wherever it starts. Exact with no index known; its sizes are operands as
    for a plain view. None when a reshape or bitcast follows that indexer's traced size, or an
    index is an array (a gather)."""
    NDIndexer = jax_internal("state_indexing").NDIndexer
    Slice = jax_internal("state_indexing").Slice
    BitcastTransform = jax_internal("state_types").BitcastTransform

    last = max((i for i, tr in enumerate(transforms) if isinstance(tr, NDIndexer)), default=None)
    if last is None or last != len(transforms) - 1:
        return None  # the traced size is not the last indexer's: not a shape semcheck follows
    indexer = transforms[last]
    if tuple(indexer.int_indexer_shape) != ():
        return None
    dtype = np.dtype(ref.dtype)
    for transform in transforms[:last]:
        if isinstance(transform, BitcastTransform):
            dtype = np.dtype(transform.dtype)
    nbytes: ir.Operand = dtype.itemsize
    for position, index in enumerate(indexer.indices):
        if not isinstance(index, Slice):
            continue  # one element along this dim
        count = index.size if isinstance(index.size, int) else operand(
            t, eqn, index.size, f"the size of {what} along its dim {position} (a traced pl.ds size)")
        nbytes = sym_op("mul", nbytes, count)
    return nbytes


# Views through a reshape or bitcast are followed element by element up to this size.
POSITIONS_LIMIT = 1 << 20


def _positions(ref: RefValue, transforms, *, strict: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """For a view through reshapes and bitcasts (which `_view` cannot compose), the first
    and the last element of the allocation (flat, row-major) under each element of the
    view: JAX's own `discharge.transform_array` applied to arrays of positions, and
    Pallas' TPU bitcast rule (`jax/_src/state/utils.py` `bitcast`, JAX 0.10.2: a change of
    bitwidth scales the second-minor dim, packing consecutive rows). None when an index or
    size is not known per thread, a window leaves its view (the caller then keeps the
    whole buffer, and JAX's clamping would hide that), or the buffer is too large. `strict`:
    `_OutsideView` rather than None for a window that leaves its view (`region` decides)."""
    import jax
    dtypes = jax_internal("dtypes")
    discharge = jax_internal("state_discharge")
    NDIndexer = jax_internal("state_indexing").NDIndexer
    BitcastTransform = jax_internal("state_types").BitcastTransform
    ReshapeTransform = jax_internal("state_types").ReshapeTransform

    from semcheck.lower.data import concrete_transforms

    size = math.prod(ref.shape)
    concrete = concrete_transforms(tuple(transforms))
    if concrete is None or size > POSITIONS_LIMIT or ref.is_semaphore:
        return None
    first = last = _flat_positions(tuple(ref.shape))
    bits = dtypes.itemsize_bits(np.dtype(ref.dtype))
    try:
        for transform in concrete:
            if isinstance(transform, NDIndexer):
                outside = _outside_view(transform, first.shape)
                if outside is not None:
                    raise _OutsideView(outside)
                window = _basic_window(transform)
                if window is not None:
                    first, last = (first[window], last[window]) if last is not first else (first[window],) * 2
                else:
                    with jax.ensure_compile_time_eval():
                        moved = np.asarray(discharge.transform_array(first, [transform]))
                        last = moved if last is first else np.asarray(discharge.transform_array(last, [transform]))
                        first = moved
            elif isinstance(transform, ReshapeTransform):
                first, last = first.reshape(transform.shape), last.reshape(transform.shape)
            elif isinstance(transform, BitcastTransform):
                new_bits = dtypes.itemsize_bits(transform.dtype)
                if new_bits > bits:  # packs `ratio` consecutive rows into one
                    ratio = new_bits // bits
                    first, last = first[..., 0::ratio, :], last[..., ratio - 1::ratio, :]
                elif new_bits < bits:  # splits each row into `ratio`
                    ratio = bits // new_bits
                    first, last = np.repeat(first, ratio, axis=-2), np.repeat(last, ratio, axis=-2)
                bits = new_bits
            else:
                return None
    except _OutsideView:
        if strict:
            raise
        return None
    except Exception:  # noqa: BLE001 - JAX refuses the view: the caller keeps the whole buffer
        return None
    return first, last


@functools.lru_cache(maxsize=8)
def _flat_positions(shape: tuple[int, ...]) -> np.ndarray:
    """Each element's flat (row-major) position in an allocation of `shape`; read only, as
    every view of it shares it (a kernel storing tiles of one output asks for it per store)."""
    positions = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    positions.flags.writeable = False
    return positions


def _basic_window(indexer) -> tuple | None:
    """`indexer` as a NumPy basic index, when each of its indices is a `Slice` or a scalar
    (None: an integer-array index, which JAX turns into a gather). JAX's discharge of such an
    indexer (`_index_array` in jax/_src/state/discharge.py, JAX 0.10.2) is `lax.slice` or
    `lax.dynamic_slice` and a squeeze of the scalar dims, which inside the view (checked
    first, by `_outside_view`) selects exactly what basic slicing selects; taken here
    without JAX's eager dispatch, which cost 4 ms a view of a 1 M-element buffer (JAX's GPU
    all-reduce test stores 2,048 tiles through reshaped views)."""
    Slice = jax_internal("state_indexing").Slice

    window: list = []
    for index in indexer.indices:
        if isinstance(index, Slice):
            start, count = int(np.asarray(index.start)), int(np.asarray(index.size))
            window.append(slice(start, start + (count - 1) * index.stride + 1 if count else start, index.stride))
        elif np.ndim(index) == 0:
            window.append(int(np.asarray(index)))
        else:
            return None
    return tuple(window)


class _OutsideView(Exception):
    """A window of a view followed by `_positions` leaves the view (its text says where)."""


def _outside_view(indexer, shape: tuple[int, ...]) -> str | None:
    """Where `indexer` leaves a view of `shape` (None: nowhere)."""
    Slice = jax_internal("state_indexing").Slice

    for dim, (index, extent) in enumerate(zip(indexer.indices, shape)):
        if isinstance(index, Slice):
            start, count = int(np.asarray(index.start)), int(np.asarray(index.size))
            if count and (start < 0 or start + (count - 1) * index.stride >= extent):
                return f"the window {start}:{start + (count - 1) * index.stride + 1} in dim {dim} of a view of {extent}"
        else:
            values = np.asarray(index)
            if values.size and (values.min() < 0 or values.max() >= extent):
                return f"the index {values.min() if values.min() < 0 else values.max()} in dim {dim} of a view of {extent}"
    return None


def _bounding_region(ref: RefValue, positions: tuple[np.ndarray, np.ndarray], where: str) -> ir.Region:
    """The smallest box of the allocation that holds every position (empty for an empty
    view); marked widened unless the view is known to touch all of that box."""
    first, last = positions
    if first.size == 0:
        return ir.Region(ref.alloc, (0,) * len(ref.shape), (0,) * len(ref.shape))
    touched = first.ravel() if last is first else np.concatenate([first.ravel(), last.ravel()])
    coords = np.unravel_index(touched, ref.shape)
    starts = tuple(int(c.min()) for c in coords)
    sizes = tuple(int(c.max()) - int(c.min()) + 1 for c in coords)
    # The first and last elements under each view element are touched, so when they alone
    # fill the box the view touches all of it (packings of more than two rows are then
    # marked widened though they may not be: the mark errs towards "may be spurious").
    in_box = np.zeros(math.prod(sizes), dtype=bool)
    in_box[np.ravel_multi_index(tuple(c - s for c, s in zip(coords, starts)), sizes)] = True
    exact = bool(in_box.all())
    widened = None if exact else f"{where} touches part of the box it is taken as in {ref.alloc}"
    return ir.Region(ref.alloc, starts, sizes, widened=widened)


# --- loads and stores ------------------------------------------------------------------------


def _checked(t: ThreadLowering) -> bool:
    """Whether this backend's plain loads and stores are window-checked (`ir.Load.checked`):
    on TPU, Mosaic passes the index through to `vector.load` / `vector.store` (no clamp),
    and JAX's TPU interpreter raises on a read or write outside the ref
    (jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py, `get`, `store`, `swap`,
    JAX 0.10.2). A GPU kernel's `addupdate` comes here too, and is left unchecked as the
    GPU rules (gpu_memory.py) leave theirs."""
    return t.kernel.backend == "tpu"


def _why(t: ThreadLowering, eqn, reg: ir.Region) -> str:
    return f"the value loaded from {reg.buffer} at {t.loc(eqn)}"


def _load(t: ThreadLowering, eqn, value, what: str, transforms) -> tuple[ir.Region, Value]:
    """Emit the load; the value it sees (data.py follows the thread's buffers)."""
    from semcheck.lower.interpreter import FOLD_LIMIT

    reg, view = window(t, eqn, value, what, transforms, checked=_checked(t))
    _emit_read(t, ir.Load(t.loc(eqn), reg, checked=_checked(t), view=view))
    ref, all_transforms = ref_of(t, eqn, value, what, transforms)
    [out] = eqn.outvars[:1]
    return reg, t.memory.read(ref, all_transforms, reg, out.aval, _why(t, eqn, reg), FOLD_LIMIT)


def _emit_read(t: ThreadLowering, instr: ir.Instr) -> None:
    t.emitter.emit(instr)
    t.read_point(instr)


def copy_data(t: ThreadLowering, eqn, start: ir.DmaStart, src, dst) -> Value:
    """What a copy moves (data.py): a local copy writes its destination in program order
    (for a race-free kernel nothing reads it before the wait, nor writes the source); a
    remote copy's payload lands where the canonical run of the protocol says (schedule.py).
    Returns the source's value at the copy's start."""
    from semcheck.lower.data import DATA_LIMIT, Payload, concrete_transforms

    t.read_point(start)
    src_ref, src_transforms = ref_of(t, eqn, src, "the DMA source")
    dst_ref, dst_transforms = ref_of(t, eqn, dst, "the DMA destination")
    dst_aval = eqn.params["tree"].unflatten([v.aval for v in eqn.invars])[1]
    value = t.memory.read(src_ref, src_transforms, start.src, dst_aval, _why(t, eqn, start.src), DATA_LIMIT)
    local = start.device is None or (start.device == t.device and start.core in (None, t.core))
    decl = t.kernel.buffers.get(dst_ref.alloc)
    if t.kernel.cores > 1 and decl is not None and decl.scope is ir.Scope.DEVICE:
        # The chip's other cores read this buffer too, and each core's lowering follows only
        # its own writes: what any core reads from it is left unknown.
        t.kernel.shared_written.add(dst_ref.alloc)
        t.kernel.volatile.add(dst_ref.alloc)
    if local:
        # A source known only in part moves its known elements as known (data.py); one that
        # holds run-time values (assumed inputs) is written element by element with them.
        if not (isinstance(value, Opaque) and not isinstance(value, RunTimeElements)
                and t.memory.copy_elements(src_ref, src_transforms, dst_ref, dst_transforms, value.why)):
            t.memory.write(dst_ref, dst_transforms, start.dst, value)
        return value
    if not isinstance(start.device, int) or not isinstance(start.core, (int, type(None))):
        t.kernel.volatile.add(dst_ref.alloc)  # lands on a device known only at run time
        return value
    concrete = concrete_transforms(tuple(dst_transforms))
    if concrete is None:
        t.kernel.volatile.add(dst_ref.alloc)  # it lands somewhere in the buffer semcheck cannot tell
        return value
    # Data this lowering does not know yet (a ring all-reduce forwards a row that arrived by
    # the previous copy) still lands at a known place: it makes that region unknown where the
    # canonical run lands it, and the next lowering may know it (schedule.py).
    unknown = "" if isinstance(value, Known) else (
        value.why if isinstance(value, Opaque) else "a value known only at run time")
    t.kernel.payloads[id(start)] = Payload(
        start.device, t.core if start.core is None else start.core, dst_ref,
        concrete, start.dst, value if isinstance(value, Known) else None, unknown,
    )
    return value


@rule("get")
def get(t: ThreadLowering, eqn, inputs):
    ref, *flat = inputs
    transforms = eqn.params["tree"].unflatten(flat)
    _reg, loaded = _load(t, eqn, ref, "the loaded ref", transforms)
    return [loaded]


@rule("swap")
def swap(t: ThreadLowering, eqn, inputs):
    ref, value, *flat = inputs
    transforms = eqn.params["tree"].unflatten(flat)
    reg, view = window(t, eqn, ref, "the stored ref", transforms, checked=_checked(t))
    target, all_transforms = ref_of(t, eqn, ref, "the stored ref", transforms)
    from semcheck.lower.interpreter import FOLD_LIMIT

    store = ir.Store(t.loc(eqn), reg, checked=_checked(t), view=view, fill=fill_of(value))
    _emit_read(t, store)
    old = t.memory.read(target, all_transforms, reg, eqn.outvars[0].aval, _why(t, eqn, reg), FOLD_LIMIT,
                        makes_inputs=False)
    t.memory.write(target, all_transforms, reg, value)
    return [old]


@rule("addupdate")
def addupdate(t: ThreadLowering, eqn, inputs):
    ref, value, *flat = inputs
    transforms = eqn.params["tree"].unflatten(flat)
    reg, view = window(t, eqn, ref, "the updated ref", transforms, checked=_checked(t))
    _emit_read(t, ir.Load(t.loc(eqn), reg, checked=_checked(t), view=view))
    t.emitter.emit(ir.Store(t.loc(eqn), reg, checked=_checked(t), view=view))
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
