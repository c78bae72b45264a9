"""JAX's state discharge applied to concrete arrays, compiled once per kind of view, with
its answers kept.

A thread's reads and writes of its buffers (`lower/data.py`) are JAX's own
`jax._src.state.discharge.transform_array` and `transform_swap_array` (JAX 0.10.2), so
indexing, strides and gathers are never reimplemented.

Through a view that only indexes (a chain of `NDIndexer`s: what `.at[...]`, `pl.ds` and
integer indices make), and, for reads, one that also reshapes (a GMEM output read by tiles
through `y_ref.reshape(...)[idxs]`), semcheck asks JAX where elements go rather than what
they hold:
`read_positions` is JAX's read of the buffer's element positions (0..n-1, int32) and
`write_positions` JAX's write of the stored value's positions into an array of -1s. The
positions say which element each read sees and where each stored element lands, for the
contents, the known-mask and the written-mask of every dtype alike, so one question replaces
three or four.

A view of unit-stride slices and scalar indices with index values known per thread (nearly
every view a kernel makes) is asked through a function jitted once per structure of the
view (which indices are Python ints, kept static as JAX keeps them, and which are values,
passed as arguments), so one XLA executable serves every thread, grid step and lowering
pass that reads the same buffer shape through the same kind of view. Evaluated eagerly,
each primitive of the read (a `dynamic_slice`, a `squeeze`, the casts of the indices and
the clamping of negative starts) was a dispatch of its own and an XLA compilation for each
new shape and dtype. JAX discharges such a view with `slice`, `dynamic_slice` and
`dynamic_update_slice` alone, which compute the same under jit as eagerly (JAX's own
discharge of a kernel runs them on traced indices); a reshape in the chain is static. Any
other view (a gather, a strided slice, one with no index values: `_eager_positions`; a
bitcast, or a write through a reshape: `transform_read`, `transform_write`) is asked
eagerly on the concrete arrays, as before.

These functions are pure, and the same question recurs on every device and in every
lowering pass, so each answer is kept by its exact inputs (docs/data-evaluation.md, "Loads
and stores in program order").
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import numpy as np

from semcheck.jax_compat import jax_internal


# --- views that only index: positions ---------------------------------------------------------


def read_positions(shape: tuple[int, ...], transforms) -> np.ndarray | None:
    """The flat positions (int32, in the read's shape) of the elements of a buffer of
    `shape` that a read through `transforms` (`NDIndexer`s) sees, by JAX; None when JAX
    refuses."""
    return _positions("read", tuple(shape), transforms, ())


def write_positions(shape: tuple[int, ...], transforms, value_shape: tuple[int, ...]) -> np.ndarray | None:
    """Per element of a buffer of `shape`, the flat position in a stored value of
    `value_shape` of the element that a write through `transforms` puts there, -1 where it
    puts none, by JAX; None as for `read_positions`."""
    return _positions("write", tuple(shape), transforms, tuple(value_shape))


def _positions(kind: str, shape: tuple[int, ...], transforms, value_shape: tuple[int, ...]) -> np.ndarray | None:
    structure = _structure(transforms)
    if structure is None or not structure[1]:
        # A gather or strided view (see _structure), or one without index values: that has
        # one answer, asked once, and eagerly JAX computes nothing for a view of the whole
        # buffer (its discharge returns the array) and shares the executables of the others
        # between views, where jit would compile one per view (measured: 19 of the 39
        # compilations of moe_dispatch_combine.py's reads and writes were such views).
        return _eager_positions(kind, shape, value_shape, transforms)
    static, values, rebuild = structure
    key = _values_key((kind, shape, value_shape, static, _x64()), values)
    known = _recalled(key)
    if known is not _NOT_SEEN:
        return known
    compiled = _COMPILED.get(key[0])
    if compiled is None:
        if len(_COMPILED) >= _COMPILED_LIMIT:
            _COMPILED.clear()
        compiled = _COMPILED[key[0]] = _compile(kind, shape, value_shape, rebuild)
    result: np.ndarray | None
    try:  # not under ensure_compile_time_eval: that would evaluate the constants inside eagerly
        result = np.asarray(compiled(values))
    except Exception:  # noqa: BLE001 - JAX refuses this view under jit: asked eagerly
        result = _eager_positions(kind, shape, value_shape, transforms)
    return _remember(key, result)


def _compile(kind: str, shape: tuple[int, ...], value_shape: tuple[int, ...], rebuild: Callable) -> Callable:
    """JAX's discharge of the view as one jitted function of the view's index values."""
    import jax

    discharge = jax_internal("state_discharge")

    if kind == "read":
        def ask(values):
            return discharge.transform_array(_iota(shape), rebuild(values))
    else:
        def ask(values):
            empty = jax.numpy.full(shape, -1, np.int32)
            return discharge.transform_swap_array(empty, rebuild(values), _iota(value_shape))[1]
    return jax.jit(ask)


def _iota(shape: tuple[int, ...]):
    from jax import lax

    return lax.iota(np.int32, int(np.prod(shape, dtype=np.int64))).reshape(shape)


def _eager_positions(kind: str, shape, value_shape, transforms) -> np.ndarray | None:
    """The same question asked eagerly of JAX on concrete arrays (a view `_structure` does
    not take, or one jit refused), and kept."""
    size, value_size = int(np.prod(shape, dtype=np.int64)), int(np.prod(value_shape, dtype=np.int64))
    key = _memo_key(f"{kind} positions", np.asarray(shape, np.int64), transforms, np.asarray(value_shape, np.int64))
    if kind == "read":
        return _asked(key, lambda discharge: discharge.transform_array(
            np.arange(size, dtype=np.int32).reshape(shape), list(transforms)))
    return _asked(key, lambda discharge: discharge.transform_swap_array(
        np.full(shape, -1, np.int32), list(transforms), np.arange(value_size, dtype=np.int32).reshape(value_shape))[1])


# The jitted questions, by the view's static structure (and kind, shapes, x64). jit keeps
# one executable per dtype of the index values under each. A kernel has tens of kinds of
# view; past the limit (a process lowering many kernels) they start over.
_COMPILED: dict = {}
_COMPILED_LIMIT = 1024


def _structure(transforms) -> tuple[Hashable, list[np.ndarray], Callable[[list], list]] | None:
    """(static, values, rebuild) of a chain of `NDIndexer`s whose every index is a unit-stride
    `Slice` or a scalar, and of reshapes (a GMEM output stored by tiles through
    `y_ref.reshape(...)[idxs]`, read back by `data.read`): what JAX's discharge decides by in Python (the indexers' shapes,
    which indices are slices, Python ints, slice sizes), as a hashable key; the index values
    (concrete scalars: slice starts and integer indices); and `rebuild(values)`, the chain
    with those values (tracers, under jit) in their places. JAX discharges such a view with
    `slice`, `dynamic_slice` and `dynamic_update_slice` alone, eagerly or under jit.

    None for any other view, which is asked eagerly as before: a gather (an index array, a
    strided slice) is discharged through the array's own indexing (`x[arrays]`,
    `x.at[arrays].set`), which on a NumPy array is NumPy's, not JAX's, so jit would not
    give the eager answer."""
    NDIndexer = jax_internal("state_indexing").NDIndexer
    ReshapeTransform = jax_internal("state_types").ReshapeTransform

    static: list = []
    values: list[np.ndarray] = []
    skeleton: list = []  # per indexer: (shape, int_indexer_shape, per index: its static part); a reshape as it is
    for transform in transforms:
        if type(transform) is ReshapeTransform:  # static: its shape alone
            skeleton.append(transform)
            static.append(("reshape", tuple(transform.shape)))
            continue
        if type(transform) is not NDIndexer:
            return None
        shape, int_shape = tuple(transform.shape), tuple(transform.int_indexer_shape)
        if not all(isinstance(d, int) for d in shape + int_shape):
            return None
        parts = [_index_part(index, values) for index in transform.indices]
        if any(part is None for part in parts):
            return None
        skeleton.append((shape, int_shape, parts))
        static.append((shape, int_shape, tuple(part[0] for part in parts if part is not None)))
    return tuple(static), values, lambda given: _rebuild(skeleton, given)


def _index_part(index, values: list[np.ndarray]) -> tuple[Hashable, tuple] | None:
    """(key, how to rebuild) of one index of a view `_structure` takes, appending its value
    (if it has one) to `values`; None for an index of another kind."""
    Slice = jax_internal("state_indexing").Slice

    if isinstance(index, Slice):
        size = _static_int(index.size)
        if size is None or index.stride != 1:
            return None
        if isinstance(index.start, int):
            return ("slice", index.start, size), ("slice", index.start, index.size)
        if not _is_scalar(index.start):
            return None
        values.append(np.asarray(index.start))
        return ("slice", None, size), ("slice", None, index.size)
    if isinstance(index, int):
        return ("int", index), ("int", index)
    if _is_scalar(index):
        values.append(np.asarray(index))
        return ("value",), ("value",)
    return None


def _rebuild(skeleton: list, given: list) -> list:
    """The chain of `NDIndexer`s of `skeleton` with the values `given` in their places."""
    indexing = jax_internal("state_indexing")

    remaining = iter(given)
    chain = []
    for entry in skeleton:
        if not isinstance(entry, tuple):  # a reshape
            chain.append(entry)
            continue
        shape, int_shape, parts = entry
        indices = []
        for _key, part in parts:
            if part[0] == "slice":
                indices.append(indexing.Slice(next(remaining) if part[1] is None else part[1], part[2]))
            else:
                indices.append(part[1] if part[0] == "int" else next(remaining))
        chain.append(indexing.NDIndexer(tuple(indices), shape, int_shape))
    return chain


def _static_int(size) -> tuple | None:
    """A slice size as part of a key: its type (a Python int and a NumPy scalar take
    different paths through JAX's discharge), dtype and value; None when it is not an
    integer known here."""
    if isinstance(size, int):
        return ("int", size)
    if _is_scalar(size):
        return (type(size).__name__, np.asarray(size).dtype.str, int(size))
    return None


def _is_scalar(x) -> bool:
    """A concrete integer scalar (a value the lowering knows per thread)."""
    return isinstance(x, (np.ndarray, np.generic)) and x.ndim == 0 and np.issubdtype(x.dtype, np.integer)


def _x64() -> bool:
    return bool(jax_internal("config").enable_x64.value)  # x64 changes JAX's dtypes


def _values_key(head: tuple, values: list[np.ndarray]) -> tuple:
    return (head, *(_array_key(v) for v in values))


# --- any view: the arrays themselves ----------------------------------------------------------


def transform_read(array: np.ndarray, transforms) -> np.ndarray | None:
    """`array` seen through `transforms`, by JAX; None when JAX refuses (then the value is
    simply not known: a data read never fails the lowering)."""
    return _asked(_memo_key("read", array, transforms),
                  lambda discharge: np.asarray(discharge.transform_array(array, list(transforms))))


def transform_write(array: np.ndarray, transforms, value: np.ndarray) -> np.ndarray | None:
    value = np.asarray(value, array.dtype)
    return _asked(_memo_key("write", array, transforms, value),
                  lambda discharge: np.asarray(discharge.transform_swap_array(array, list(transforms), value)[1]))


def _asked(key, ask) -> np.ndarray | None:
    """`ask(JAX's state discharge module)`, evaluated at compile time, or its kept answer
    for `key`; None when JAX refuses."""
    known = _recalled(key)
    if known is not _NOT_SEEN:
        return known
    return _remember(key, _eagerly(ask))


def _eagerly(ask) -> np.ndarray | None:
    import jax
    discharge = jax_internal("state_discharge")

    try:
        with jax.ensure_compile_time_eval():
            return np.asarray(ask(discharge))
    except Exception:  # noqa: BLE001 - JAX's refusal means "not known", said where it is used
        return None


# JAX's answers to the questions above, by their exact inputs. Each one is at least a
# dispatch of an XLA executable, and the same ones recur: every device's thread runs the
# same body on mostly the same contents, and a kernel whose copied data is followed is
# lowered again until the data settles (tpu_kernel._lower_with_copied_data), which repeats
# the previous pass's reads and writes. The functions are pure, so an answer found once is
# the answer; it is kept read-only, since the caller shares it.
_MEMO: dict = {}
_MEMO_BYTES = [0]
_MEMO_LIMIT = 64 << 20  # bytes of arrays kept (keys and answers); past it the memo starts over
_EXACT_KEY_BYTES = 4096  # contents up to this size are part of the key as they are; larger, by digest


def _memo_key(kind: str, array: np.ndarray, transforms, *more: np.ndarray):
    """A hashable key for exactly these inputs, or None when one of them has no exact key
    (then JAX is asked every time)."""
    from jax import tree_util

    leaves, tree = tree_util.tree_flatten(list(transforms))
    parts: list = [kind, tree, _x64()]
    for leaf in (array, *leaves, *more):
        if isinstance(leaf, (np.ndarray, np.generic)):
            if leaf.dtype.hasobject:
                return None
            parts.append(_array_key(np.asarray(leaf)))
        elif leaf is None or isinstance(leaf, (bool, int, float, str)):
            parts.append((type(leaf).__name__, leaf))
        else:
            return None
    key = tuple(parts)
    try:
        hash(key)
    except TypeError:  # a transform with unhashable static data
        return None
    return key


def _array_key(a: np.ndarray) -> tuple:
    data = a.tobytes()
    if len(data) > _EXACT_KEY_BYTES:
        import hashlib

        data = hashlib.blake2b(data, digest_size=32).digest()
    return (a.dtype.str, a.shape, data)


_NOT_SEEN = object()


def _recalled(key):
    """The answer kept for `key`, or _NOT_SEEN (one lookup: another thread may clear the memo)."""
    return _NOT_SEEN if key is None else _MEMO.get(key, _NOT_SEEN)


def _remember(key, result: np.ndarray | None) -> np.ndarray | None:
    if key is None:
        return result
    if result is not None:
        if result.flags.writeable:
            result = result.copy()
            result.flags.writeable = False
        _MEMO_BYTES[0] += result.nbytes + sum(len(p[2]) for p in key if isinstance(p, tuple) and len(p) == 3
                                              and isinstance(p[2], bytes))
    if _MEMO_BYTES[0] > _MEMO_LIMIT:
        _MEMO.clear()
        _MEMO_BYTES[0] = 0
    _MEMO[key] = result
    return result
