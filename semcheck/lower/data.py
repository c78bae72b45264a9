"""The kernel's data, evaluated: what each thread's buffers hold, in program order.

A thread's lowering walks its kernel body once, in program order, so it can also follow
what the body stores and later loads: a slot index kept in SMEM across grid steps, a flag
the kernel overwrites, a routing table computed from gating logits and copied VMEM -> SMEM.
`ThreadMemory` holds, per buffer, the concrete contents where they are known (from the
operands the script passed, or from the thread's own stores), a mask of which elements are
known, and the scalar elements that hold a run-time value (a `Sym`: a register of the IR).

Every read and write is JAX's own: `jax._src.state.discharge.transform_array` and
`transform_swap_array` (the functions the state discharge of `get`/`swap`/`addupdate` runs,
JAX 0.10.2), asked where a view puts the buffer's elements (lower/discharge.py) or, through
a bitcast or reshape, applied to the concrete arrays, so indexing, strides, gathers and
dtype rules are never reimplemented here. Nothing here decides synchronization: which copy lands when
is the semantics' business (see docs/data-evaluation.md); this module only decides values.

A value read from memory carries the buffers it came from (`Known.sources`), so that a
value deciding the protocol can be reported as taken from data (`ir.DataUse`).
"""

from __future__ import annotations

import math
from dataclasses import field, replace
from typing import Any, Iterable

import numpy as np

from semcheck import ir
from semcheck.lower.produced import KnownElements
from semcheck.lower.discharge import read_positions, transform_read, transform_write, write_positions
from semcheck.lower.values import DataSource, Known, Opaque, RefValue, RunTimeElements, Sym, Value
from semcheck.jax_compat import jax_internal
from semcheck.records import record

# Buffers with more elements than this are not followed (their loads are opaque data):
# copying them on every store would cost more than the protocol is worth.
DATA_LIMIT = 1 << 20
# Branches are merged into registers element by element only for buffers this small (SMEM
# scalars: slot indices, flags, counters).
MERGE_LIMIT = 64


@record(frozen=True, eq=False)
class Contents:
    """One buffer of one thread. Replaced, never mutated, so a snapshot is a dict copy."""

    value: np.ndarray  # concrete contents; meaningless where `known` is False
    known: np.ndarray  # bool, same shape
    symbolic: dict  # element index -> Sym: scalars holding a run-time value
    written: np.ndarray  # bool: elements this thread has stored (scalar prefetch only reads it)
    sources: frozenset = frozenset()  # DataSources of every value stored here
    from_script: bool = False  # the initial contents are the script's operand values
    lost: str | None = None  # why the last element that became unknown did


def _initial(shape, dtype, data: "np.ndarray | KnownElements | None") -> Contents:
    if isinstance(data, KnownElements):  # an earlier kernel's output, in part (lower/produced.py)
        value = np.asarray(data.value, dtype).reshape(shape)
        return Contents(value, np.asarray(data.known, bool).reshape(shape).copy(), {}, np.zeros(shape, bool),
                        frozenset(), True)
    if data is not None:
        value = np.asarray(data).reshape(shape)
        known = np.ones(shape, bool)
    else:
        value = np.zeros(shape, dtype)
        known = np.zeros(shape, bool)
    return Contents(value, known, {}, np.zeros(shape, bool), frozenset(), data is not None)


class AssumedElements:
    """Buffer elements whose initial value is a protocol input because `semcheck.assume`
    names them: their contents start unknown, whatever the script passed, so that every read
    of one gives its input or says why it cannot (never the script's value). The lowering
    knows the names and makes the inputs (`context.ThreadLowering`); this default has none."""

    def mask(self, buffer: str, shape: tuple[int, ...]) -> np.ndarray | None:
        """Which elements of `buffer` are assumed (None: none is)."""
        return None

    def input(self, buffer: str, index: tuple[int, ...], dtype) -> Sym:
        """The protocol input holding the initial value of assumed element `index`."""
        raise NotImplementedError


def _numpy_dtype(dtype):
    try:
        return np.dtype(dtype)
    except TypeError:
        return None


@record
class ThreadMemory:
    """The buffers of one (device, core) as its lowering has seen them so far."""

    # buffer -> the script's values (an earlier kernel's output known in part: lower/produced.py)
    initial: dict[str, np.ndarray | KnownElements] = field(default_factory=dict)
    contents: dict[str, Contents | None] = field(default_factory=dict)
    # Buffers a remote copy to a device known only at run time may write: never followed.
    volatile: set = field(default_factory=set)
    shared_written: set = field(default_factory=set)  # shared HBM another core writes (see KernelContext)
    read_buffers: set = field(default_factory=set)  # every buffer a read touched (kernel-wide)
    # Why an element nobody defined is unknown (said in errors when it decides the protocol).
    undefined: str = "which neither the script's operand values nor this thread's stores define"
    # Operands whose script values were seen but are not followed: buffer -> why.
    unfollowed: dict[str, str] = field(default_factory=dict)
    assumed: AssumedElements = field(default_factory=AssumedElements)
    _assumed_masks: dict[str, np.ndarray | None] = field(default_factory=dict)

    # -- state ---------------------------------------------------------------------------------

    def of(self, ref: RefValue) -> Contents | None:
        if ref.alloc not in self.contents:
            dtype = _numpy_dtype(ref.dtype)
            size = math.prod(ref.shape)
            if ref.is_semaphore or dtype is None or size > DATA_LIMIT:
                self.contents[ref.alloc] = None
            else:
                self.contents[ref.alloc] = self._fresh(ref.alloc, ref.shape, dtype)
        return self.contents[ref.alloc]

    def _fresh(self, buffer: str, shape, dtype) -> Contents:
        """The initial contents: the script's values, except assumed elements (unknown: their
        value is an input, which a read makes)."""
        c = _initial(shape, dtype, self.initial.get(buffer))
        mask = self._assumed_mask(buffer, c)
        return c if mask is None else replace(c, known=c.known & ~mask)

    def _assumed_mask(self, buffer: str, c: Contents) -> np.ndarray | None:
        if buffer not in self._assumed_masks:
            integer = np.issubdtype(c.value.dtype, np.integer) or c.value.dtype == np.bool_
            # Only integer elements are ever inputs (a signal count, a size, a flag).
            self._assumed_masks[buffer] = self.assumed.mask(buffer, c.value.shape) if integer else None
        return self._assumed_masks[buffer]

    def _inputs_held(self, buffer: str, c: Contents) -> np.ndarray | None:
        """The assumed elements that still hold their input: no path of this thread stored them."""
        mask = self._assumed_mask(buffer, c)
        return None if mask is None else mask & ~c.written

    def drop(self, buffer: str) -> None:
        """`buffer` holds another block of its operand now (a grid step moved it on): what
        this thread stored into or knew of the previous block is gone, and the buffer
        starts over as its initial contents (unknown for a blocked operand; an assumed
        element is the new block's input, and an assumption may name that block alone)."""
        self.contents.pop(buffer, None)
        self._assumed_masks.pop(buffer, None)

    def snapshot(self) -> dict:
        return dict(self.contents)

    def restore(self, snapshot: dict) -> None:
        self.contents = dict(snapshot)

    def join(self, snapshots: list[dict], merge: "ScalarMerge | None" = None) -> None:
        """After a branch the program cannot decide at lowering time: an element stays known
        only where every branch leaves the same value. With `merge` (IR branches), a small
        integer element that differs but is an integer or a run-time value on every branch
        becomes a register each branch assigns (as `cond` outputs do)."""
        self._join(snapshots)
        if merge is None:
            return
        for name, joined in list(self.contents.items()):
            versions = [s.get(name) for s in snapshots]
            if joined is None or all(v is joined for v in versions) or joined.value.size > MERGE_LIMIT:
                continue
            # A buffer first touched inside one branch: on the others it is as it started.
            versions = [self._fresh_like(joined, name) if v is None and name not in s else v
                        for v, s in zip(versions, snapshots)]
            if not (np.issubdtype(joined.value.dtype, np.integer) or joined.value.dtype == np.bool_):
                continue
            symbolic = dict(joined.symbolic)
            for index in zip(*np.nonzero(~joined.known)):
                index = tuple(int(i) for i in index)
                if index in symbolic:
                    continue
                ops = [merge.element(name, index, v) for v in versions]
                if any(op is None for op in ops):
                    continue
                symbolic[index] = merge.assign(ops, joined.value.dtype)
            self.contents[name] = replace(joined, symbolic=symbolic)

    def _join(self, snapshots: list[dict]) -> None:
        names = set().union(*snapshots)
        joined = {}
        for name in names:
            versions = [s.get(name) for s in snapshots]
            first = versions[0]
            if all(v is first for v in versions):
                joined[name] = first
            elif any(v is None for v in versions):
                missing = [v for v in versions if v is not None]
                # A buffer first touched inside one branch: its other side is the initial.
                joined[name] = _join_all(missing + [self._fresh_like(missing[0], name)]) if missing else None
            else:
                joined[name] = _join_all([v for v in versions if v is not None])  # none is None here
        self.contents = joined

    def _fresh_like(self, c: Contents, name: str) -> Contents:
        return self._fresh(name, c.value.shape, c.value.dtype)

    def knows_as_much(self, snapshot: dict) -> bool:
        """Whether the memory knows every element `snapshot` knew, alike (a loop's head
        is stable once the join with the body's end no longer loses anything)."""
        for name in set(snapshot) | set(self.contents):
            b = self.contents.get(name)
            a = snapshot[name] if name in snapshot else (None if b is None else self._fresh_like(b, name))
            if a is b or a is None or b is None:
                continue  # None: not followed at all
            if not (np.array_equal(a.known, b.known) and np.array_equal(a.written, b.written)
                    and a.symbolic.keys() == b.symbolic.keys()):
                return False
        return True

    # -- reads ---------------------------------------------------------------------------------

    def read(self, ref: RefValue, transforms: tuple, region: ir.Region, out_aval, why: str,
             limit: int, makes_inputs: bool = True) -> Value:
        """The value a load of `ref` through `transforms` (all of them, the ref's own
        first) sees, or Opaque(why...). `makes_inputs` False: the read of the old value a
        store replaces, which makes no protocol input for an assumed element it sees (every
        input multiplies the explicit engine's start states, and nothing loads this one)."""
        c = self.of(ref)
        if c is None:
            return Opaque(why)
        self.read_buffers.add(ref.alloc)
        if ref.alloc in self.shared_written:
            return Opaque(f"{why}, which another TensorCore of the chip copies into (shared HBM)")
        if ref.alloc in self.volatile:
            return Opaque(f"{why}, which a copy to a device known only at run time may write")
        if self._holds_run_time(c, ref, region):
            return self._read_run_time(c, ref, transforms, region, out_aval, why, limit, makes_inputs)
        if _read_size(out_aval, region) > limit:
            return Opaque(why)
        concrete = concrete_transforms(tuple(transforms))
        if concrete is None:
            picked = self._element_at_run_time_index(c, ref, transforms, out_aval)
            return picked if picked is not None else Opaque(f"{why} (at an index semcheck does not know)")
        if _only_moves_elements(concrete):
            return self._read_elements(c, ref, concrete, why)
        known = transform_read(c.known, concrete)
        if known is None:
            return Opaque(f"{why} (through a view JAX's state discharge cannot read)")
        if not bool(np.all(known)):
            return self._unknown(c, ref, why, None)
        value = transform_read(c.value, concrete)
        if value is None:
            return Opaque(f"{why} (through a view JAX's state discharge cannot read)")
        written = transform_read(c.written, concrete)
        return Known(value, sources=c.sources | {DataSource(ref.alloc, _from_script(c, written))})

    def _read_elements(self, c: Contents, ref: RefValue, concrete: tuple, why: str) -> Value:
        """A read through a view that only indexes: JAX's reading of the elements' positions
        (`read_positions`) says which elements it sees, and those give its value, whether
        each is known and whether the thread stored it."""
        positions = read_positions(c.value.shape, concrete)
        if positions is None:
            return Opaque(f"{why} (through a view JAX's state discharge cannot read)")
        flat = positions.ravel()
        if not bool(np.all(c.known.ravel()[flat])):
            return self._unknown(c, ref, why, flat)
        value = c.value.ravel()[flat].reshape(positions.shape)
        written = c.written.ravel()[flat].reshape(positions.shape)
        return Known(value, sources=c.sources | {DataSource(ref.alloc, _from_script(c, written))})

    def _unknown(self, c: Contents, ref: RefValue, why: str, flat: np.ndarray | None) -> Opaque:
        """A read, of the elements at flat positions `flat` (None: not known), that sees an
        element holding no value semcheck knows. Said of an assumed one first: it does not
        hold its input either, since this thread may have stored to it."""
        assumed = self._assumed_mask(ref.alloc, c)
        if assumed is not None and flat is not None:
            lost = np.flatnonzero((assumed & c.written & ~c.known).ravel()[flat])
            if lost.size:
                element = _element_text(ref.alloc, _unravel(int(flat[lost[0]]), c.value.shape))
                return Opaque(
                    f"{why}, which holds {element}: semcheck.assume names it, so its initial value is a "
                    "protocol input, but this thread stores to it on some paths only (or stores a value "
                    "semcheck does not follow), so it holds neither that input nor a known value"
                )
        if c.lost is not None:
            return Opaque(f"{why}, where the kernel stored {c.lost}")
        return Opaque(f"{why}, {self._undefined(ref.alloc)}")

    # -- reads of elements known only at run time ----------------------------------------------

    def _run_time_mask(self, c: Contents, ref: RefValue) -> np.ndarray | None:
        """The elements known only at run time: registers this thread stored, and assumed
        elements that still hold their input (None: there are none)."""
        mask = self._inputs_held(ref.alloc, c)
        if not c.symbolic:
            return mask if mask is not None and mask.any() else None
        mask = np.zeros(c.value.shape, bool) if mask is None else mask.copy()
        for index in c.symbolic:
            mask[index] = True
        return mask

    def _holds_run_time(self, c: Contents, ref: RefValue, region: ir.Region) -> bool:
        """Whether the read may touch an element known only at run time. A region outside
        the buffer (a read past its end, which JAX's discharge clamps back into it) may
        touch any element."""
        mask = self._run_time_mask(c, ref)
        if mask is None:
            return False
        box = _box(region, ref.shape)
        outside = box is not None and any(lo >= hi for lo, hi in box)
        window = tuple(slice(lo, hi) for lo, hi in box) if box is not None and not outside else ...
        return bool(np.any(mask[window]))

    def _read_run_time(self, c: Contents, ref: RefValue, transforms: tuple, region: ir.Region, out_aval,
                       why: str, limit: int, makes_inputs: bool) -> Value:
        """A read that may touch elements known only at run time. JAX's reading of their
        positions says which elements it sees: the run-time ones give their `Sym`s (a
        scalar read, the one it sees), the others their known values."""
        mask = self._run_time_mask(c, ref)
        assert mask is not None, "only called when the read may touch one"
        concrete = concrete_transforms(tuple(transforms))
        picked = self._element_at_run_time_index(c, ref, transforms, out_aval) if concrete is None else None
        if picked is not None:
            return picked
        if concrete is None or not _only_moves_elements(concrete):
            how = "at an index semcheck does not know" if concrete is None else "through a view that is not indexing"
            return Opaque(f"{why}, {self._run_time_text(c, ref, np.flatnonzero(mask))}, and semcheck cannot "
                          f"follow it through this read ({how})")
        if _read_size(out_aval, region) > limit:
            return Opaque(f"{why}, {self._run_time_text(c, ref, np.flatnonzero(mask))}")
        positions = read_positions(c.value.shape, concrete)
        if positions is None:
            return Opaque(f"{why} (through a view JAX's state discharge cannot read)")
        flat = positions.ravel()
        run_time = mask.ravel()[flat]
        if np.any(~c.known.ravel()[flat] & ~run_time):
            return self._unknown(c, ref, why, flat)
        value = c.value.ravel()[flat].reshape(positions.shape)
        sources = c.sources | {DataSource(ref.alloc, _from_script(c, c.written.ravel()[flat]))}
        if not np.any(run_time):
            return Known(value, sources=sources)
        if not makes_inputs and self._holds_input(c, ref, flat[run_time]):
            return Opaque(f"{why}, {self._run_time_text(c, ref, flat[run_time])}, which the value a store "
                          "replaces does not follow")
        symbolic = {int(i): self._run_time_value(c, ref, int(flat[i])) for i in np.flatnonzero(run_time)}
        if positions.shape == ():
            return symbolic[0]
        return RunTimeElements(f"{why}, {self._run_time_text(c, ref, flat[run_time])}", value, symbolic, sources)

    def _element_at_run_time_index(self, c: Contents, ref: RefValue, transforms: tuple, out_aval) -> Sym | None:
        """One integer element of a small buffer, picked by an index known only at run time
        (a register: `lengths_ref[b]` with `b` an assumed value or a loop's carry), as the
        expression sum_k (index == k) * element_k over the buffer's elements, each its known
        value or its register. None when the read is not a single element at scalar indices
        of such a buffer, or an element holds neither. An index outside the buffer picks what
        JAX's discharge of the read picks for a concrete one (`transform_read`: a negative
        index counts from the end, then it is clamped into the dim), so both paths agree."""
        NDIndexer = jax_internal("state_indexing").NDIndexer

        from semcheck.lower.values import sym_op

        shape = c.value.shape
        if tuple(getattr(out_aval, "shape", (None,))) != () or c.value.size > MERGE_LIMIT or len(transforms) != 1:
            return None
        if not (np.issubdtype(c.value.dtype, np.integer) or c.value.dtype == np.bool_):
            return None
        [indexer] = transforms
        if not isinstance(indexer, NDIndexer) or len(indexer.indices) != len(shape):
            return None
        indices: list[ir.Operand] = []
        for index, extent in zip(indexer.indices, shape):
            if isinstance(index, Sym):
                wrapped = sym_op("add", index.op, sym_op("mul", sym_op("lt", index.op, 0), extent))
                indices.append(sym_op("min", sym_op("max", wrapped, 0), extent - 1))
            elif isinstance(index, Known) and index.value.size == 1:
                indices.append(int(index.value.reshape(())))
            elif isinstance(index, (int, np.integer)):
                indices.append(int(index))
            else:  # a slice, an array of indices, data semcheck does not know
                return None
        run_time = self._run_time_mask(c, ref)
        picked: ir.Operand = 0
        for position, element in enumerate(np.ndindex(*shape)):
            if run_time is not None and run_time[element]:
                value: ir.Operand = self._run_time_value(c, ref, position).op
            elif c.known[element]:
                value = int(c.value[element])
            else:
                return None
            chosen: ir.Operand = 1
            for index, coordinate in zip(indices, element):
                chosen = sym_op("mul", chosen, sym_op("eq", index, coordinate))
            picked = sym_op("add", picked, sym_op("mul", chosen, value))
        return Sym(picked, np.dtype(out_aval.dtype))

    def held_input(self, buffer: str, index: tuple[int, ...], c: "Contents | None") -> Sym | None:
        """The protocol input element `index` of `buffer` still holds in contents `c` (an
        assumed element, or a scalar-prefetch one whose script value is not known, that no
        path stored to), or None."""
        if c is None:
            return None
        held = self._inputs_held(buffer, c)
        if held is None or not held[index]:
            return None
        return self.assumed.input(buffer, index, c.value.dtype)

    def _holds_input(self, c: Contents, ref: RefValue, positions: np.ndarray) -> bool:
        held = self._inputs_held(ref.alloc, c)
        return held is not None and bool(np.any(held.ravel()[positions]))

    def _run_time_value(self, c: Contents, ref: RefValue, position: int) -> Sym:
        index = _unravel(position, c.value.shape)
        if index in c.symbolic:
            return c.symbolic[index]
        return self.assumed.input(ref.alloc, index, c.value.dtype)

    def _run_time_text(self, c: Contents, ref: RefValue, positions: np.ndarray) -> str:
        """What the run-time elements at flat `positions` are, for the reason a value that
        holds them cannot be followed."""
        registers = {int(np.ravel_multi_index(index, c.value.shape)) for index in c.symbolic}
        inputs = np.setdiff1d(positions, np.fromiter(registers, np.int64, len(registers)))
        if not inputs.size:
            return "which holds a value known only at run time"
        more = f" (and {inputs.size - 1} more such elements)" if inputs.size > 1 else ""
        first = _element_text(ref.alloc, _unravel(int(inputs[0]), c.value.shape))
        return f"which holds {first}{more}, whose initial value is a protocol input because semcheck.assume names it"

    def _undefined(self, buffer: str) -> str:
        """Why an element of `buffer` that this thread has not stored is unknown."""
        reason = self.unfollowed.get(buffer)
        return f"which this thread has not stored, and {reason}" if reason else self.undefined

    # -- writes --------------------------------------------------------------------------------

    def write(self, ref: RefValue, transforms: tuple, region: ir.Region, value: Value) -> None:
        c = self.of(ref)
        if c is None:
            return
        concrete = concrete_transforms(tuple(transforms))
        exact = _element(region)
        if isinstance(value, (Known, RunTimeElements)) and concrete is not None and _only_indexing(concrete):
            self._write_elements(c, ref, concrete, region, value)
            return
        if isinstance(value, Known) and concrete is not None:
            new_value = transform_write(c.value, concrete, value.value)
            known = transform_write(c.known, concrete, np.ones(value.value.shape, bool))
            written = transform_write(c.written, concrete, np.ones(value.value.shape, bool))
            if new_value is None or known is None or written is None:
                self.forget(ref, region, "a value through a view JAX's state discharge cannot write")
                return
            symbolic = _drop(c.symbolic, _box(region, ref.shape))
            self.contents[ref.alloc] = replace(
                c, value=new_value, known=known, written=written, symbolic=symbolic,
                sources=c.sources | value.sources,
            )
            return
        if isinstance(value, Sym) and exact is not None:
            known, written = c.known.copy(), c.written.copy()
            known[exact], written[exact] = False, True
            symbolic = dict(c.symbolic)
            symbolic[exact] = value
            self.contents[ref.alloc] = replace(c, known=known, written=written, symbolic=symbolic)
            return
        lost = value.why if isinstance(value, Opaque) else "a value at an index semcheck does not know"
        self.forget(ref, region, lost)

    def _write_elements(self, c: Contents, ref: RefValue, concrete: tuple, region: ir.Region,
                        value: Known | RunTimeElements) -> None:
        """A store (or local copy) through a view that only indexes: JAX's writing of the
        value's positions (`write_positions`) says where each element lands. An element
        known only at run time keeps its `Sym` there (an assumed element copied into another
        buffer is still its input); a known one makes its destination known."""
        landed = write_positions(c.value.shape, concrete, value.value.shape)
        if landed is None:
            self.forget(ref, region, "a value through a view JAX's state discharge cannot write")
            return
        stored = landed >= 0
        sources = landed[stored]
        new_value = c.value.copy()
        new_value[stored] = np.asarray(value.value, c.value.dtype).ravel()[sources]
        known = c.known.copy()
        if isinstance(value, Known):
            known[stored] = True
            symbolic = _drop(c.symbolic, _box(region, ref.shape))
        else:
            run_time = np.zeros(value.value.size, bool)
            run_time[list(value.symbolic)] = True
            known[stored] = ~run_time[sources]
            symbolic = {k: v for k, v in c.symbolic.items() if not stored[k]}
            for destination in np.flatnonzero(stored.ravel() & run_time[landed.ravel().clip(0)]):
                symbolic[_unravel(int(destination), c.value.shape)] = value.symbolic[int(landed.ravel()[destination])]
        self.contents[ref.alloc] = replace(c, value=new_value, known=known, written=c.written | stored,
                                           symbolic=symbolic, sources=c.sources | value.sources)

    def copy_elements(self, src: RefValue, src_transforms: tuple, dst: RefValue, dst_transforms: tuple,
                      why: str) -> bool:
        """A local copy whose source this thread knows only in part (an SMEM table the
        kernel filled up to a count it computed, copied whole to HBM): each element it moves
        carries its own value and whether it is known, so the elements the kernel stored
        stay known at the destination and the rest are unknown (`why`). False where the
        views are not plain indexing of two followed buffers of one dtype: then the copy
        writes its value as a whole (`write`), unknown if any element is."""
        s, d = self.of(src), self.of(dst)
        if s is None or d is None or s.value.dtype != d.value.dtype:
            return False
        if src.alloc in self.shared_written or src.alloc in self.volatile:
            return False
        read, written = concrete_transforms(tuple(src_transforms)), concrete_transforms(tuple(dst_transforms))
        if read is None or written is None or not (_only_indexing(read) and _only_indexing(written)):
            return False
        positions = read_positions(s.value.shape, read)
        if positions is None:
            return False
        landed = write_positions(d.value.shape, written, positions.shape)
        if landed is None:
            return False
        self.read_buffers.add(src.alloc)
        stored = landed >= 0
        moved = positions.ravel()[landed[stored]]
        value, known = d.value.copy(), d.known.copy()
        value[stored] = s.value.ravel()[moved]
        known[stored] = s.known.ravel()[moved]  # an element holding a run-time value is not known
        symbolic = {k: v for k, v in d.symbolic.items() if not stored[k]}
        lost = d.lost if bool(np.all(known[stored])) else why  # as `write` of the unknown value says
        source = DataSource(src.alloc, _from_script(s, s.written.ravel()[moved]))
        self.contents[dst.alloc] = replace(d, value=value, known=known, written=d.written | stored, symbolic=symbolic,
                                           sources=d.sources | s.sources | {source}, lost=lost)
        return True

    def forget(self, ref: RefValue, region: ir.Region, why: str | None = None) -> None:
        """The region now holds something semcheck does not know (or may have been written
        at an index it does not know)."""
        c = self.of(ref)
        if c is None:
            return
        box = _box(region, ref.shape)
        index = tuple(slice(lo, hi) for lo, hi in box) if box is not None else ...
        known, written = c.known.copy(), c.written.copy()
        known[index], written[index] = False, True
        self.contents[ref.alloc] = replace(c, known=known, written=written, symbolic=_drop(c.symbolic, box),
                                           lost=why or c.lost)

    def add(self, ref: RefValue, transforms: tuple, region: ir.Region, value: Value, why: str, aval) -> None:
        """`addupdate`: read, add with JAX, write back."""
        old = self.read(ref, transforms, region, aval, why, DATA_LIMIT, makes_inputs=False)
        if isinstance(old, Known) and isinstance(value, Known):
            from jax import lax

            try:
                total = Known(np.asarray(lax.add(old.value, value.value.astype(old.value.dtype))),
                              sources=old.sources | value.sources)
            except Exception:  # noqa: BLE001 - JAX refuses the add: the result is not known
                self.forget(ref, region, "a sum JAX could not compute")
                return
            self.write(ref, transforms, region, total)
        else:
            opaque = value if isinstance(value, Opaque) else old if isinstance(old, Opaque) else None
            self.forget(ref, region, opaque.why if opaque is not None else None)

    def written_element(self, ref: RefValue, region: ir.Region) -> bool:
        """Whether this thread may have stored into the element `region` names."""
        c = self.of(ref)
        if c is None:
            return True
        box = _box(region, ref.shape)
        index = tuple(slice(lo, hi) for lo, hi in box) if box is not None else ...
        return bool(np.any(c.written[index]))


class ScalarMerge:
    """How a branch's end is turned into registers: `element` is the IR operand an element
    holds at the end of one branch (None: unknown), `assign` a fresh register every branch
    assigns its operand to."""

    def element(self, buffer: str, index: tuple[int, ...], version: "Contents | None"):
        raise NotImplementedError

    def assign(self, ops: list, dtype) -> Sym:
        raise NotImplementedError


def element_operand(c: "Contents | None", index: tuple[int, ...]):
    """An integer element as an IR operand: its known value or its register; None when it
    holds neither (unknown, or an input element never written: `ThreadMemory.held_input`)."""
    if c is None:
        return None
    if index in c.symbolic:
        return c.symbolic[index].op
    if c.known[index]:
        return int(c.value[index])
    return None


def _from_script(c: Contents, written: np.ndarray | None) -> bool:
    """Whether a read of the elements whose `written` marks are given sees a value the
    script passed: some element it sees holds the buffer's initial (script) contents. One
    the kernel stored (a flag it cleared at an earlier grid step) is the kernel's value,
    whatever the script passed; what a stored value was computed from is in `c.sources`."""
    return c.from_script and (written is None or not bool(np.all(written)))


def _join_all(versions: list[Contents]) -> Contents:
    first = versions[0]
    known = first.known.copy()
    written = first.written.copy()
    for v in versions[1:]:
        same = np.equal(v.value, first.value)
        known &= v.known & same
        written |= v.written
    symbolic = {
        k: s for k, s in first.symbolic.items() if all(v.symbolic.get(k) == s for v in versions[1:])
    }
    sources = frozenset().union(*(v.sources for v in versions))
    return Contents(first.value, known, symbolic, written, sources, all(v.from_script for v in versions))


# --- regions and transforms ------------------------------------------------------------------


def _box(region: ir.Region, shape) -> list[tuple[int, int]] | None:
    """Per dim (lo, hi) that certainly contains the region; None for the whole buffer."""
    if not region.start:
        return None
    box = []
    for start, size, extent in zip(region.start, region.size, shape):
        if isinstance(start, (int, np.integer)) and isinstance(size, (int, np.integer)):
            box.append((max(0, int(start)), min(extent, int(start) + int(size))))
        else:  # a start or (dynamic) size known only at run time: anywhere in the dim
            box.append((0, extent))
    return box


def _element(region: ir.Region) -> tuple[int, ...] | None:
    """The one element an exact scalar region names, or None."""
    if not all(isinstance(s, (int, np.integer)) for s in region.start) or any(
            not isinstance(n, (int, np.integer)) or n != 1 for n in region.size):
        return None
    return tuple(int(s) for s in region.start if isinstance(s, (int, np.integer)))  # all are, as checked


def _unravel(position: int, shape) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(position, shape))


def _element_text(buffer: str, index: tuple[int, ...]) -> str:
    return f"{buffer}[{', '.join(map(str, index))}]"


def _only_indexing(transforms: tuple) -> bool:
    """Whether every transform only picks elements (an `NDIndexer`), so that reading the
    elements' positions through them says which elements a read sees (a bitcast would not)."""
    NDIndexer = jax_internal("state_indexing").NDIndexer

    return all(isinstance(transform, NDIndexer) for transform in transforms)


def _only_moves_elements(transforms: tuple) -> bool:
    """Whether every transform picks or rearranges elements (an `NDIndexer` or a reshape),
    so that reading the elements' positions through them says which element each read
    sees, in any dtype. (Writes keep to `_only_indexing`: JAX 0.10.2's
    `transform_swap_array` discharges no write through a reshape.)"""
    NDIndexer = jax_internal("state_indexing").NDIndexer
    ReshapeTransform = jax_internal("state_types").ReshapeTransform

    return all(isinstance(transform, (NDIndexer, ReshapeTransform)) for transform in transforms)


def _inside(index: tuple[int, ...], box) -> bool:
    return all(lo <= i < hi for i, (lo, hi) in zip(index, box))


def _drop(symbolic: dict, box) -> dict:
    if not symbolic:
        return symbolic
    return {k: s for k, s in symbolic.items() if box is not None and not _inside(k, box)}


def concrete_transforms(transforms: tuple) -> tuple | None:
    """The transforms with every index a concrete array, or None when one is not known."""
    from jax import tree_util

    leaves, tree = tree_util.tree_flatten(transforms, is_leaf=_is_value)
    concrete = []
    for leaf in leaves:
        if isinstance(leaf, Known):
            concrete.append(leaf.value)
        elif isinstance(leaf, (Sym, Opaque, RefValue)):
            return None
        else:
            concrete.append(leaf)
    return tree_util.tree_unflatten(tree, concrete)


def _is_value(x) -> bool:
    return isinstance(x, (Known, Sym, Opaque, RefValue))


def _read_size(aval, region: ir.Region) -> int:
    """Elements a read sees: its aval's static shape, or, for a window whose `pl.ds` size is
    traced (JAX gives it a dynamic-shape aval), the sizes of its region as lowered (each
    known per thread: a DMA sized `lax.select(valid, bt, 0)`); more than any limit when
    neither is known."""
    try:
        return math.prod(int(d) for d in aval.shape)
    except TypeError:
        pass
    sizes = [n for n in region.size if isinstance(n, (int, np.integer))]
    if region.start and len(sizes) == len(region.size):
        return math.prod(int(n) for n in sizes)
    return DATA_LIMIT + 1


def sources_of(values: Iterable[Any]) -> frozenset:
    out: frozenset = frozenset()
    for v in values:
        if isinstance(v, Known):
            out |= v.sources
    return out


def initial_contents(refs: list[RefValue], data: dict[int, dict[int, Any]]
                     ) -> dict[int, dict[str, np.ndarray | KnownElements]]:
    """device -> buffer -> the script's values, for operands whose kernel ref is the whole
    operand (memory_space=ANY, SMEM scalar prefetch, a block as large as the array). A
    blocked operand is a different block at each grid step: not followed (its loads stay
    opaque data; `unfollowed_operands` says why)."""
    initial: dict[int, dict[str, np.ndarray | KnownElements]] = {}
    for device, values in data.items():
        per_device = initial.setdefault(device, {})
        for k, array in values.items():
            ref = refs[k]
            if not ref.is_semaphore and not_followed(ref, array) is None:
                per_device[ref.alloc] = array if isinstance(array, KnownElements) else np.asarray(array)
    return initial


def unfollowed_operands(refs: list[RefValue], data: dict[int, dict[int, Any]]) -> dict[int, dict[str, str]]:
    """device -> buffer -> why the script's values of that operand are not followed, so an
    error on a value loaded from it says what the user can change."""
    unfollowed: dict[int, dict[str, str]] = {}
    for device, values in data.items():
        for k, array in values.items():
            why = None if refs[k].is_semaphore else not_followed(refs[k], array)
            if why is not None:
                unfollowed.setdefault(device, {})[refs[k].alloc] = why
    return unfollowed


def not_followed(ref: RefValue, array) -> str | None:
    """Why the script's values `array` of an operand do not start its kernel ref (None:
    they do)."""
    if isinstance(array, KnownElements):
        array = array.value
    shape = tuple(np.shape(array))
    if shape != tuple(ref.shape):
        # A pipelined block holds a different part of the operand at different grid steps,
        # and which part is there when is not followed.
        return (
            f"the script's values of {ref.alloc} are not followed, because the kernel receives "
            f"that operand in blocks (a {_shape_text(ref.shape)} ref of the {_shape_text(shape)} "
            "operand): semcheck follows an operand's values only when the kernel's ref is the "
            "whole array (a BlockSpec with no block shape, in memory space pl.ANY, SMEM or "
            "VMEM, or a block as large as the array)"
        )
    dtype = _numpy_dtype(ref.dtype)
    if dtype is None or np.asarray(array).dtype != dtype:
        return (f"the script's values of {ref.alloc} are not followed, because they are "
                f"{np.asarray(array).dtype} and the kernel's ref is {ref.dtype}")
    return None


def _shape_text(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


# Per-use notes shown; the rest are counted (every one is in Protocol.data_uses).
MAX_USE_NOTES = 12


# --- what the result says ------------------------------------------------------------------


def data_notes(uses: Iterable[ir.DataUse], fed: dict[str, str] | None = None) -> list[str]:
    """The notes that say which values deciding the protocol were taken from data, one per
    kind of use and line (threads alike are one note). `fed`: operands that start with an
    earlier kernel's outputs as semcheck's lowering of it computed them (buffer -> that
    kernel; lower/produced.py), named as such rather than as the script's values."""
    fed = fed or {}
    grouped: dict[tuple, list[ir.DataUse]] = {}
    for use in uses:
        grouped.setdefault((use.what, use.loc, use.script_inputs, use.buffers), []).append(use)
    notes = []
    from_script = sorted({b for u in grouped for b in u[2]} - set(fed))
    if from_script:
        notes.append(
            "the verdict holds for the operand values the script passed: values that decide the "
            f"protocol were computed from {', '.join(from_script)} with JAX's own primitives "
            "(a race on a buffer that feeds them is reported: then values may differ between schedules)"
        )
    shown_uses = list(grouped.items())[:MAX_USE_NOTES]
    for (what, loc, script_inputs, buffers), group in shown_uses:
        threads = sorted({(u.device, u.core) for u in group})
        values = sorted({u.value for u in group})
        shown = ", ".join(map(str, values[:8])) + (", ..." if len(values) > 8 else "")
        script = [b for b in script_inputs if b not in fed]
        computed = [f"{b} as semcheck's lowering of {fed[b]} computed them" for b in script_inputs if b in fed]
        origin = "; ".join(([f"the script's values of {', '.join(script)}"] if script else []) + computed) \
            if script_inputs else "what the kernel stored"
        notes.append(
            f"{what} at {loc} is taken from data (read back from {', '.join(buffers)}; {origin}) "
            f"on {len(threads)} thread(s), values {shown}"
        )
    if len(grouped) > MAX_USE_NOTES:
        # Said without pointing at the notes before it: a report showing several checks
        # merges identical notes, so this one need not follow its own check's list.
        notes.append(f"{len(grouped) - MAX_USE_NOTES} further values taken from data are not noted one by one "
                     "(Protocol.data_uses lists them all)")
    return notes


# --- copies: data that moves by DMA --------------------------------------------------------


@record(frozen=True, eq=False)
class Payload:
    """What one copy writes on its destination thread: the source's values at the copy's
    start (None: not known), to `region` of `ref` through concrete `transforms`."""

    device: int
    core: int
    ref: RefValue
    transforms: tuple
    region: ir.Region
    value: Known | None
    why: str  # why the value is unknown, when it is

    def key(self) -> tuple:
        value = None if self.value is None else (self.value.value.dtype.str, self.value.value.shape,
                                                 self.value.value.tobytes())
        return (self.device, self.core, self.ref.alloc, self.region, value)


def receive(memory: ThreadMemory, payload: Payload) -> None:
    """A copy that has landed (in the canonical run of the protocol: see schedule.py)."""
    if payload.value is None:
        memory.forget(payload.ref, payload.region, payload.why)
    else:
        memory.write(payload.ref, payload.transforms, payload.region, payload.value)
