"""lower/discharge.py: where a read through an indexing view finds its elements and where a
write puts them, asked of JAX's state discharge once per kind of view (jitted) and kept.

Every answer must be the one JAX's discharge gives when evaluated eagerly on the concrete
arrays (what semcheck asked before the questions were jitted), including JAX's clamping of
starts past the end, negative indices, strides, gathers and chains of indexers, and a view
JAX refuses must stay refused.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax._src.state import discharge as jax_discharge
from jax._src.state import indexing
from jax._src.state.types import ReshapeTransform

from semcheck.lower import discharge

Slice = indexing.Slice


def nd(shape, *indices, int_shape=()):
    return indexing.NDIndexer(tuple(indices), tuple(shape), tuple(int_shape))


def i32(x):
    return np.asarray(x, np.int32)


# (buffer shape, chain of indexers): the kinds of view kernels make, as the lowering hands
# them over (index values known per thread are NumPy arrays, static ones Python ints).
VIEWS = {
    "dynamic start": ((8, 4), [nd((8, 4), Slice(i32(2), 3), Slice(0, 4))]),
    "dynamic start past the end (clamped)": ((8, 4), [nd((8, 4), Slice(i32(7), 3), Slice(0, 4))]),
    "static slice": ((8, 4), [nd((8, 4), Slice(1, 3), Slice(2, 2))]),
    "whole buffer": ((8, 4), [nd((8, 4), Slice(0, 8), Slice(0, 4))]),
    "scalar element": ((8, 4), [nd((8, 4), i32(5), i32(3))]),
    "negative index": ((6,), [nd((6,), i32(-1))]),
    "static int index": ((3, 8, 128), [nd((3, 8, 128), 1, Slice(i32(2), 1), Slice(0, 128))]),
    "strided slice": ((8, 4), [nd((8, 4), Slice(i32(1), 3, 2), Slice(0, 4))]),
    "slice of a numpy size": ((8, 4), [nd((8, 4), Slice(i32(2), i32(3)), Slice(0, 4))]),
    "gather": ((6, 2), [nd((6, 2), np.array([4, 1, 1], np.int32), Slice(0, 2), int_shape=(3,))]),
    "chain of two": ((4, 6), [nd((4, 6), Slice(i32(1), 2), Slice(0, 6)), nd((2, 6), i32(1), Slice(i32(3), 2))]),
    "empty window": ((24, 128), [nd((24, 128), Slice(i32(5), 0), Slice(0, 128))]),
    # A GMEM output stored and read by tiles through `y_ref.reshape(...)[idxs]` (JAX's GPU
    # all_gather / reduce_scatter): reads through it are reads of positions since
    # 2026-12-07; JAX 0.10.2 discharges no write through a reshape, and neither does this.
    "reshape, then a window": ((4, 8), [ReshapeTransform((2, 4, 4)), nd((2, 4, 4), i32(1), Slice(i32(2), 2), Slice(0, 4))]),
    "reshape alone": ((4, 8), [ReshapeTransform((8, 4))]),
}


def eager(ask):
    """JAX's answer evaluated eagerly on NumPy arrays, or None where JAX refuses."""
    try:
        with jax.ensure_compile_time_eval():
            return np.asarray(ask())
    except Exception:  # noqa: BLE001 - a refusal, as the lowering sees it
        return None


def eager_read(shape, transforms):
    positions = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    return eager(lambda: jax_discharge.transform_array(positions, list(transforms)))


def eager_write(shape, transforms, value_shape):
    stored = np.arange(int(np.prod(value_shape)), dtype=np.int32).reshape(value_shape)
    return eager(lambda: jax_discharge.transform_swap_array(np.full(shape, -1, np.int32), list(transforms), stored)[1])


def same(a, b) -> bool:
    return a is None and b is None or a is not None and b is not None and a.shape == b.shape and bool(np.all(a == b))


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_positions_are_what_jax_gives_evaluated_eagerly(name):
    shape, transforms = VIEWS[name]
    discharge._MEMO.clear()
    expected = eager_read(shape, transforms)
    assert expected is not None
    read = discharge.read_positions(shape, transforms)
    assert read.dtype == np.int32 and same(read, expected)
    assert same(discharge.write_positions(shape, transforms, expected.shape), eager_write(shape, transforms, expected.shape))


JITTED = {"dynamic start", "dynamic start past the end (clamped)", "scalar element", "negative index", "static int index",
          "slice of a numpy size", "chain of two", "empty window", "reshape, then a window"}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_only_views_of_unit_slices_and_scalars_with_index_values_are_jitted(name):
    """A gather or strided view is discharged through the array's own indexing, NumPy's on
    a NumPy array (eagerly, a write through one is refused: a NumPy array has no `.at`),
    so it is asked eagerly as before, and jit, which would give JAX's answer, is not used.
    A view with no index values has one answer, asked eagerly once."""
    shape, transforms = VIEWS[name]
    structure = discharge._structure(transforms)
    assert (structure is not None and bool(structure[1])) == (name in JITTED)
    if name == "gather":
        assert eager_write(shape, transforms, (3, 2)) is None
        assert discharge.write_positions(shape, transforms, (3, 2)) is None


def test_one_executable_serves_every_index_value_of_a_kind_of_view():
    """Reads that differ only in index values (threads, grid steps) share one jitted
    function and one XLA executable; a read of another kind of view gets its own."""
    discharge._MEMO.clear()
    discharge._COMPILED.clear()
    shape = (8, 4)
    for start in range(8):
        np.testing.assert_array_equal(
            discharge.read_positions(shape, [nd(shape, Slice(i32(start), 2), Slice(0, 4))]),
            eager_read(shape, [nd(shape, Slice(i32(start), 2), Slice(0, 4))]))
    [jitted] = discharge._COMPILED.values()
    assert jitted._cache_size() == 1
    discharge.read_positions(shape, [nd(shape, Slice(i32(0), 3), Slice(0, 4))])  # another size
    assert len(discharge._COMPILED) == 2


def test_answers_are_kept_read_only_and_asked_again_after_the_memo_is_cleared():
    discharge._MEMO.clear()
    shape, transforms = VIEWS["dynamic start"]
    first = discharge.read_positions(shape, transforms)
    assert discharge.read_positions(shape, transforms) is first and not first.flags.writeable
    discharge._MEMO.clear()
    again = discharge.read_positions(shape, transforms)
    assert again is not first
    np.testing.assert_array_equal(again, first)


def test_a_view_jax_refuses_stays_refused():
    """A Python int beside an index array is a gather JAX's discharge refuses ("Invalid type
    of idxer: int"): the positions are not known (None), as eagerly."""
    shape = (6, 2)
    refused = [nd(shape, np.array([4, 1], np.int32), 1, int_shape=(2,))]
    discharge._MEMO.clear()
    assert eager_read(shape, refused) is None and eager_write(shape, refused, (2,)) is None
    assert discharge.read_positions(shape, refused) is None
    assert discharge.write_positions(shape, refused, (2,)) is None


def test_a_view_jit_refuses_is_asked_eagerly(monkeypatch):
    def refusing(*_args):
        def ask(values):
            raise TypeError("refused under jit")
        return ask

    monkeypatch.setattr(discharge, "_compile", refusing)
    monkeypatch.setattr(discharge, "_COMPILED", {})
    discharge._MEMO.clear()
    shape, transforms = VIEWS["dynamic start"]
    read = discharge.read_positions(shape, transforms)
    assert same(read, eager_read(shape, transforms))
    assert discharge.read_positions(shape, transforms) is read  # kept: jit is not asked again
