"""JAX's state discharge applied to concrete arrays, with its answers kept.

A thread's reads and writes of its buffers (`lower/data.py`) are JAX's own
`jax._src.state.discharge.transform_array` and `transform_swap_array` (JAX 0.10.2), so
indexing, strides and gathers are never reimplemented. These functions are pure, and the
same read recurs on every device and in every lowering pass, so each answer is kept by its
exact inputs (docs/data-evaluation.md, "Loads and stores in program order").
"""

from __future__ import annotations

import numpy as np

from semcheck.jax_compat import jax_internal


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
    import jax
    discharge = jax_internal("state_discharge")

    try:
        with jax.ensure_compile_time_eval():
            result = ask(discharge)
    except Exception:  # noqa: BLE001 - JAX's refusal means "not known", said where it is used
        result = None
    return _remember(key, result)


# JAX's answers to the reads and writes above, by their exact inputs. Each one is an eager
# dispatch of a few primitives (milliseconds), and the same ones recur: every device's
# thread runs the same body on mostly the same contents, and a kernel whose copied data is
# followed is lowered again until the data settles (tpu_kernel._lower_with_copied_data),
# which repeats the previous pass's reads and writes. The functions are pure, so an answer
# found once is the answer; it is kept read-only, since the caller shares it.
_MEMO: dict = {}
_MEMO_BYTES = [0]
_MEMO_LIMIT = 64 << 20  # bytes of arrays kept (keys and answers); past it the memo starts over
_EXACT_KEY_BYTES = 4096  # contents up to this size are part of the key as they are; larger, by digest


def _memo_key(kind: str, array: np.ndarray, transforms, *more: np.ndarray):
    """A hashable key for exactly these inputs, or None when one of them has no exact key
    (then JAX is asked every time)."""
    from jax import tree_util
    jax_config = jax_internal("config")

    leaves, tree = tree_util.tree_flatten(list(transforms))
    parts: list = [kind, tree, bool(jax_config.enable_x64.value)]  # x64 changes JAX's dtypes
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
