"""A TPU vector load or store outside its ref is `invalid_region`, as a DMA window is.

Mosaic passes a load's or store's index through to `vector.load` / `vector.store`
unclamped, and JAX's TPU interpreter raises on one outside the ref (`get`, `store`, `swap`
in jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py, 0.10.2). The TPU lowering
marks its plain `get` / `swap` / `addupdate` as window-checked (`ir.Load.checked`); masked
ones and GPU ones are not. Protocol-level rules are checked with both engines, and the
reduced search against the unreduced one."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from semcheck import check_protocol, ir, verify_path
from semcheck.engines.explicit import search as explicit
from semcheck.engines.options import ExplicitOptions
from semcheck.model import ProtocolBuilder
from semcheck.passes.assumptions import Assumption, apply
from semcheck.semantics import System
from tests.agreement import assert_engines_agree, kinds
from tests.tpu_kernels import instrs, line_of, mesh, protocols

HERE = __file__
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples", "tpu")


# --- the examples -------------------------------------------------------------------------------


def test_the_unwrapped_rolling_cache_store_is_invalid_region_and_the_wrapped_one_safe():
    """Was SAFE before stores were window-checked. Exact states at 2 devices: the device
    barrier (entries, signals, waits), then each device's loads and stores; the buggy one
    stops at device 0's faulting store."""
    [bad] = verify_path(os.path.join(EXAMPLES, "rolling_cache_write_unwrapped.py"), devices=(2,), engine="explicit")
    [fault] = bad.errors
    assert fault.kind == "invalid_region" and fault.device == 0
    assert fault.message.endswith("the store's window [8:9, 0:128] lies outside o_ref on device 0 of shape (8, 128)")
    assert bad.stats.states == 14
    [good] = verify_path(os.path.join(EXAMPLES, "rolling_cache_write.py"), devices=(2,), engine="explicit")
    assert good.verdict.value == "safe" and good.stats.states == 22
    [by_z3] = verify_path(os.path.join(EXAMPLES, "rolling_cache_write_unwrapped.py"), devices=(2,), engine="z3")
    # every device's store is outside: each engine names the first it found
    assert [(f.kind, f.location.line) for f in by_z3.errors] == [(fault.kind, fault.location.line)]


def test_a_pair_of_rows_written_past_its_page_view_is_invalid_region_and_one_row_a_page_safe():
    """Was SAFE before windows were checked against their views: the second row lands in the
    next physical page, inside the cache block. Exact states at 2 devices; the fault is at
    the helper's line, on device 1 (at the last row of its page), in both engines."""
    [bad] = verify_path(os.path.join(EXAMPLES, "paged_append_straddles_page.py"), devices=(2,), engine="explicit")
    [fault] = bad.errors
    assert fault.kind == "invalid_region" and fault.device == 1
    assert fault.message.endswith(
        "the store's window [23:25, 0:128] lies inside o_ref on device 1 of shape (32, 128) but outside "
        "its .at[...] view [16:24, 0:128] of it")
    assert bad.stats.states == 23
    [good] = verify_path(os.path.join(EXAMPLES, "paged_append.py"), devices=(2,), engine="explicit")
    assert good.verdict.value == "safe" and good.stats.states == 32
    [by_z3] = verify_path(os.path.join(EXAMPLES, "paged_append_straddles_page.py"), devices=(2,), engine="z3")
    assert [(f.kind, f.device, f.location.line) for f in by_z3.errors] == [(fault.kind, 1, fault.location.line)]


# --- the lowering marks TPU loads and stores, and only those -----------------------------------------


def _prefetch_call(kernel, rows_out: int = 8):
    """per_device(block): `kernel(k_ref, x_ref, o_ref)` with a scalar-prefetch index, x in
    HBM and o a VMEM block of `rows_out` rows."""

    def per_device(block):
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM))
        out = jax.ShapeDtypeStruct((rows_out, 128), block.dtype)
        return pl.pallas_call(kernel, out_shape=out, grid_spec=spec)(jnp.zeros((1,), jnp.int32), block)

    return per_device


def _bounded(protocol: ir.Protocol, lo: int, hi: int) -> ir.Protocol:
    return apply(protocol, [Assumption("k_ref[0]", lo, hi)])


def _kinds_at(protocol: ir.Protocol, lo: int, hi: int, engine: str = "explicit") -> set[str]:
    """The error kinds found for k in lo..hi, but `not_lowerable`: Mosaic TPU has no rule for
    `addupdate` (JAX 0.10.2), which semcheck says and checks the protocol anyway."""
    found = check_protocol(_bounded(protocol, lo, hi), engine=engine).errors
    return {v.kind for v in found} - {"not_lowerable"}


def test_a_store_a_load_and_an_addupdate_outside_the_ref_fault_and_inside_do_not():
    """Rows k .. k+1 of an 8-row block: inside for k in 0..7, outside at 8 and at -1 (a
    negative start), for a store, a load and a `+=` alike, in both engines."""

    def storing(k_ref, x_ref, o_ref):
        o_ref[pl.ds(k_ref[0], 1), :] = jnp.zeros((1, 128), jnp.float32)  # <- row stored

    def loading(k_ref, x_ref, o_ref):
        o_ref[...] = jnp.zeros((8, 128), jnp.float32)
        o_ref[pl.ds(0, 1), :] = o_ref[pl.ds(k_ref[0], 1), :]  # <- row loaded

    def adding(k_ref, x_ref, o_ref):  # the `addupdate` primitive (`ref[...] += v` is a get and a swap)
        from jax._src.state.primitives import ref_addupdate

        o_ref[...] = jnp.zeros((8, 128), jnp.float32)
        ref_addupdate(o_ref, (pl.ds(k_ref[0], 1), slice(None)), jnp.ones((1, 128), jnp.float32))  # <- row added

    for kernel, kind, marker in ((storing, ir.Store, "stored"), (loading, ir.Load, "loaded"),
                                 (adding, ir.Load, "added"), (adding, ir.Store, "added")):
        [p] = protocols(_prefetch_call(kernel), mesh((1,)))
        [access] = [i for i in instrs(p, kind) if i.loc.line == line_of(HERE, "# <- row " + marker)
                    and i.region.buffer == "o_ref"]
        assert access.checked, kernel.__name__
        for engine in ("explicit", "z3"):
            assert _kinds_at(p, 0, 7, engine) == set(), (kernel.__name__, engine)
            assert _kinds_at(p, 0, 8, engine) == {"invalid_region"}, (kernel.__name__, engine)
            assert _kinds_at(p, -1, 0, engine) == {"invalid_region"}, (kernel.__name__, engine)
    [p] = protocols(_prefetch_call(loading), mesh((1,)))
    [fault] = check_protocol(_bounded(p, 9, 9), engine="explicit").errors
    assert fault.message.endswith("the load's window [9:10, 0:128] lies outside o_ref on device 0 of shape (8, 128)")
    assert fault.location.line == line_of(HERE, "# <- row loaded")


def test_masked_loads_and_stores_are_not_window_checked():
    def masked(k_ref, x_ref, o_ref):
        rows = pl.ds(k_ref[0], 1)
        mask = jnp.ones((1, 128), jnp.bool_)
        pltpu.store(o_ref.at[rows, :], jnp.zeros((1, 128), jnp.float32), mask=mask)

    [p] = protocols(_prefetch_call(masked), mesh((1,)))
    stores = instrs(p, ir.Store)
    assert stores and not any(s.checked for s in stores)
    assert _kinds_at(p, 0, 8) == set()


def _reshaped_store(row):
    def kernel(k_ref, x_ref, o_ref):
        view = o_ref.reshape(16, 128)
        view[pl.ds(lax.axis_index("x") * 0 + row, 1), :] = jnp.zeros((1, 128), jnp.float32)  # <- reshaped

    def per_device(block):
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM))
        out = jax.ShapeDtypeStruct((8, 256), block.dtype)
        return pl.pallas_call(kernel, out_shape=out, grid_spec=spec)(jnp.zeros((1,), jnp.int32), block)

    return per_device


def test_a_window_leaving_a_reshaped_view_is_unchecked_and_a_note_says_so():
    """Row 16 of a 16-row view of the 8x256 block: JAX's discharge clamps such a window, so
    semcheck cannot name the box a chip touches, and the line may sit under a guard that
    keeps it from running, which the lowering cannot see (a review found an error here a
    false alarm on a guarded store). So the store is the whole buffer, widened, its window
    unchecked, and a note says so. Row 15 is the control: inside, followed to its box and
    checked. The row is traced, as JAX refuses a static one past the end, but known."""
    [p] = protocols(_reshaped_store(15), mesh((1,)))
    [store] = [s for s in instrs(p, ir.Store) if s.loc.line == line_of(HERE, "# <- reshaped")]
    assert ir.window_checked(store) and store.region.start == (7, 128)
    assert not any("not checked against the bounds" in n for n in p.notes)

    [p] = protocols(_reshaped_store(16), mesh((1,)))
    [store] = [s for s in instrs(p, ir.Store) if s.loc.line == line_of(HERE, "# <- reshaped")]
    assert store.checked and not ir.window_checked(store)
    assert "the window 16:17 in dim 0 of a view of 16" in store.region.widened
    [note] = [n for n in p.notes if "not checked against the bounds of o_ref" in n]
    assert "through a reshape or bitcast" in note
    assert check_protocol(p, engine="explicit").verdict.value == "safe"


def test_a_store_kept_from_a_branch_on_untracked_data_is_not_window_checked():
    """`pl.when(i + 1 < n)` with n read from data semcheck does not track: the lowering keeps
    the store of row i+1 (an over-approximation, `Region.widened`), which at grid step 7 is
    row 8 of 8. The guard keeps a run from making it, so it is no invalid_region (a review
    found this false alarm); the branch's note says its windows are not checked."""

    def kernel(k_ref, x_ref, o_ref, s_ref):
        i = pl.program_id(0)

        @pl.when(i == 0)
        def _():
            o_ref[...] = jnp.zeros((8, 128), jnp.float32)

        pltpu.sync_copy(x_ref.at[pl.ds(0, 1)], s_ref)
        n = s_ref[0, 0].astype(jnp.int32)

        @pl.when(i + 1 < n)
        def _():
            o_ref[pl.ds(i + 1, 1), :] = jnp.ones((1, 128), jnp.float32)  # <- guarded row

    def per_device(block):
        spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(8,), in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((8, 128), lambda i, k: (0, 0)),
            scratch_shapes=[pltpu.VMEM((1, 128), jnp.float32)])
        out = jax.ShapeDtypeStruct((8, 128), block.dtype)
        return pl.pallas_call(kernel, out_shape=out, grid_spec=spec)(jnp.zeros((1,), jnp.int32), block)

    [p] = protocols(per_device, mesh((1,)))
    guarded = [s for s in instrs(p, ir.Store) if s.loc.line == line_of(HERE, "# <- guarded row")]
    assert guarded and all(s.checked and not ir.window_checked(s) for s in guarded)
    assert any(s.region.start[0] == 8 for s in guarded)  # the row the guard keeps a run from
    assert any("windows are not checked against their buffers" in n for n in p.notes)
    for engine in ("explicit", "z3"):
        assert check_protocol(p, engine=engine).verdict.value == "safe", engine


# --- the semantics: both engines, and the reductions ----------------------------------------------


def _rows_protocol(devices: int, *, checked: bool = True) -> ir.Protocol:
    """Each device stores row `k` (an input, -1..4) of its 4-row buffer, and loads row d;
    device 0 also signals device 1, which waits for it first: device 1's access follows a
    wait, so the reduction must keep the store's fault on every path."""
    p = ProtocolBuilder("rows", devices=devices, backend="tpu")
    sem = p.semaphore("s")
    buf = p.buffer("buf", (4, 8), space="vmem")
    k = p.input("k", -1, 4)
    for d in range(devices):
        t = p.thread(d)
        if d == 1:
            t.wait(sem, 1)
        t.store(buf.region(k, size=(1, 8)), checked=checked)
        t.load(buf.region(d, size=(1, 8)), checked=checked)
        if d == 0 and devices > 1:
            t.signal(sem, 1, device=1)
    return p.build()


def _view_protocol(devices: int) -> ir.Protocol:
    """Each device stores row `k` (an input, -1..8) of the view at rows 2..5 of its 8-row
    buffer, the devices after 0 once device 0 signalled them: rows 2..5 are fine, 0, 1, 6, 7
    leave the view inside the buffer, -1 and 8 leave the buffer."""
    p = ProtocolBuilder("view_rows", devices=devices, backend="tpu")
    sem = p.semaphore("s")
    buf = p.buffer("buf", (8, 8), space="vmem")
    k = p.input("k", -1, 8)
    for d in range(devices):
        t = p.thread(d)
        if d:
            t.wait(sem, 1)
        else:
            for peer in range(1, devices):
                t.signal(sem, 1, device=peer)
        t.store(buf.region(k, size=(1, 8)), checked=True, view=buf.region(2, size=(4, 8)))
    return p.build()


def test_a_window_outside_its_view_faults_for_exactly_the_rows_outside_it():
    system = System(_view_protocol(1))
    faulting = {}
    for state in system.initial_states():
        after = system.step(state, system.thread_steps[0])
        for _t, _pc, kind, detail in after.faults:
            assert kind == "invalid_region"
            faulting[state.inputs[0]] = "outside its .at[...] view [2:6, 0:8]" in detail
    assert faulting == {-1: False, 0: True, 1: True, 6: True, 7: True, 8: False}


def test_the_engines_and_the_reductions_agree_on_a_window_outside_its_view():
    """Every device faults for k outside 2..5; exact states at 3 devices: 220 unreduced, 80
    reduced with symmetry."""
    by_search, _by_solver = assert_engines_agree(_view_protocol(2))
    assert kinds(by_search) == {"invalid_region"}
    protocol = _view_protocol(3)
    full = explicit.explore(System(protocol), ExplicitOptions(reduce=False, symmetry=False))
    reduced = explicit.explore(System(protocol), ExplicitOptions(reduce=True, symmetry=True))
    assert full.exhausted is None and reduced.exhausted is None
    assert set(reduced.findings) == set(full.findings) == {("invalid_region", d, 1) if d else ("invalid_region", 0, 2) for d in range(3)}
    assert (full.states, reduced.states) == (220, 80)


def test_the_engines_agree_on_a_window_from_an_input():
    by_search, _by_solver = assert_engines_agree(_rows_protocol(2))
    assert kinds(by_search) == {"invalid_region"}
    by_search, _by_solver = assert_engines_agree(_rows_protocol(2, checked=False))
    assert kinds(by_search) == set()


def test_the_faulting_inputs_are_exactly_those_outside():
    system = System(_rows_protocol(1))
    faulting = set()
    for state in system.initial_states():
        after = system.step(state, system.thread_steps[0])
        if after.faults:
            [(_t, _pc, kind, detail)] = after.faults
            assert kind == "invalid_region" and "lies outside buf" in detail
            faulting.add(state.inputs[0])
    assert faulting == {-1, 4}


@pytest.mark.parametrize("symmetry", [False, True])
def test_the_reduced_search_keeps_every_fault_of_the_unreduced_one(symmetry):
    """At 3 devices: device 0 and device 2 fault at their stores for k outside 0..3 (device
    1 then never passes its wait); the reduced search finds both faults in fewer states.
    Exact states: 92 unreduced, 42 reduced (126 and 54 unchecked, which fault nowhere)."""
    protocol = _rows_protocol(3)
    full = explicit.explore(System(protocol), ExplicitOptions(reduce=False, symmetry=False))
    reduced = explicit.explore(System(protocol), ExplicitOptions(reduce=True, symmetry=symmetry))
    assert full.exhausted is None and reduced.exhausted is None
    assert sorted(full.findings) == [("invalid_region", 0, 0), ("invalid_region", 2, 0)]
    assert set(reduced.findings) == set(full.findings)
    assert (full.states, reduced.states) == (92, 42)


# --- windows of `.at[...]` views ------------------------------------------------------------------
# Mosaic lowers each `.at[...]` before a load's or store's own index to a `tpu.memref_slice`
# of the view's shape and applies the index to that (`_transform_ref` / `_slice_memref` in
# jax/_src/pallas/mosaic/lowering.py, JAX 0.10.2 and 0.11.1); JAX refuses a static index
# outside the view at trace time (`Out of bound slice`, NDIndexer in jax/_src/state/indexing.py),
# and Mosaic's bounds checks assert each access against the view's memref. So a window past
# the view's end that stays inside the ref is invalid_region, naming the view. JAX's TPU
# interpreter checks the whole buffer only (`to_range` in jax/_src/pallas/mosaic/interpret/
# utils.py composes the indexers): it writes the rows past the view and finishes.


def _paged_call(kernel, rows_out: int = 16):
    return _prefetch_call(kernel, rows_out=rows_out)


def test_a_window_outside_its_view_but_inside_the_ref_faults_naming_the_view():
    """Rows k .. k+1 of the 4-row view at rows 4..7 of a 16-row block: inside for k in 0..2;
    at k = 3 (rows 7..8) and k = -1 (rows 3..4) the window stays inside the block and leaves
    the view. Was SAFE before views were checked. Store, load and `+=` alike, both engines."""

    def storing(k_ref, x_ref, o_ref):
        view = o_ref.at[pl.ds(4, 4)]
        view[pl.ds(k_ref[0], 2), :] = jnp.zeros((2, 128), jnp.float32)  # <- view row stored

    def loading(k_ref, x_ref, o_ref):
        o_ref[...] = jnp.zeros((16, 128), jnp.float32)
        o_ref[pl.ds(0, 2), :] = o_ref.at[pl.ds(4, 4)][pl.ds(k_ref[0], 2), :]  # <- view row loaded

    def adding(k_ref, x_ref, o_ref):
        from jax._src.state.primitives import ref_addupdate

        o_ref[...] = jnp.zeros((16, 128), jnp.float32)
        rows = (pl.ds(k_ref[0], 2), slice(None))
        ref_addupdate(o_ref.at[pl.ds(4, 4)], rows, jnp.ones((2, 128), jnp.float32))  # <- view row added

    for kernel, kind, marker in ((storing, ir.Store, "stored"), (loading, ir.Load, "loaded"),
                                 (adding, ir.Load, "added"), (adding, ir.Store, "added")):
        [p] = protocols(_paged_call(kernel), mesh((1,)))
        [access] = [i for i in instrs(p, kind) if i.loc.line == line_of(HERE, "# <- view row " + marker)
                    and i.region.buffer == "o_ref"]
        assert ir.window_checked(access) and access.view is not None, kernel.__name__
        for engine in ("explicit", "z3"):
            assert _kinds_at(p, 0, 2, engine) == set(), (kernel.__name__, engine)
            assert _kinds_at(p, 0, 3, engine) == {"invalid_region"}, (kernel.__name__, engine)
            assert _kinds_at(p, -1, 0, engine) == {"invalid_region"}, (kernel.__name__, engine)
    [p] = protocols(_paged_call(storing), mesh((1,)))
    [fault] = check_protocol(_bounded(p, 3, 3), engine="explicit").errors
    assert fault.message.endswith(
        "the store's window [7:9, 0:128] lies inside o_ref on device 0 of shape (16, 128) but outside "
        "its .at[...] view [4:8, 0:128] of it")
    assert fault.location.line == line_of(HERE, "# <- view row stored")
    assert any("checked against the .at[...] view" in n for n in p.notes)


def test_a_static_negative_start_in_a_view_passes_jax_and_is_invalid_region():
    """JAX refuses a static window past a view's end at trace time, but not one at a negative
    start (`NDIndexer.__post_init__` tests `start >= dim` and the last element, JAX 0.10.2).
    Rows -1..0 of the view at rows 4..7 are rows 3..4 of the block: the interpreter writes
    those, discharge writes rows 6..7 (it counts -1 from the view's end, then clamps)."""

    def kernel(k_ref, x_ref, o_ref):
        o_ref.at[pl.ds(4, 4)][pl.ds(-1, 2), :] = jnp.zeros((2, 128), jnp.float32)  # <- static negative

    [p] = protocols(_paged_call(kernel), mesh((1,)))
    [store] = [s for s in instrs(p, ir.Store) if s.loc.line == line_of(HERE, "# <- static negative")]
    assert store.region.start == (3, 0) and store.view == ir.Region("o_ref", (4, 0), (4, 128))
    [fault] = check_protocol(p, engine="explicit").errors
    assert fault.kind == "invalid_region" and fault.message.endswith(
        "the store's window [3:5, 0:128] lies inside o_ref on device 0 of shape (16, 128) but outside "
        "its .at[...] view [4:8, 0:128] of it")


def test_a_window_is_checked_against_every_view_it_passes_through():
    """A view of a view: rows j .. j+3 of the 8-row view at rows 4..11, then row k of that.
    The window must lie inside both: with j = 2 the inner view is rows 6..9, and row k = 3
    (row 9) is inside it and the outer one; with j = 6 the inner view (rows 10..13) leaves the
    outer one, and row k = 2 (row 12) lies inside the inner view but outside the outer one."""

    def kernel(k_ref, x_ref, o_ref):
        j, k = lax.div(k_ref[0], 8), lax.rem(k_ref[0], 8)
        inner = o_ref.at[pl.ds(4, 8)].at[pl.ds(j, 4)]
        inner[pl.ds(k, 1), :] = jnp.zeros((1, 128), jnp.float32)  # <- nested view

    [p] = protocols(_paged_call(kernel), mesh((1,)))
    [store] = [s for s in instrs(p, ir.Store) if s.loc.line == line_of(HERE, "# <- nested view")]
    assert store.view is not None
    for engine in ("explicit", "z3"):
        assert _kinds_at(p, 2 * 8 + 3, 2 * 8 + 3, engine) == set(), engine  # row 9
        assert _kinds_at(p, 2 * 8 + 4, 2 * 8 + 4, engine) == {"invalid_region"}, engine  # row 10: past the inner view
        assert _kinds_at(p, 6 * 8 + 1, 6 * 8 + 1, engine) == set(), engine  # row 11: inside both
        assert _kinds_at(p, 6 * 8 + 2, 6 * 8 + 2, engine) == {"invalid_region"}, engine  # row 12: past the outer view
    [fault] = check_protocol(_bounded(p, 6 * 8 + 2, 6 * 8 + 2), engine="explicit").errors
    assert fault.message.endswith("outside its .at[...] view [10:12, 0:128] of it")


def test_a_strided_view_is_not_lowerable_and_its_window_is_checked_against_the_rows_it_strides_over():
    """Mosaic refuses a strided `.at[...]` before a load or store ("Strided slices of
    references are unsupported.", `_slice_memref`, JAX 0.10.2 and 0.11.1): not_lowerable,
    with advice. The protocol is checked anyway: the view's rows 0, 2, 4, 6 span rows 0..6,
    so rows k, k+2 of it lie inside for k in 0..2, and k = 3 (rows 6 and 8) leaves the view
    inside the 16-row block (the box from the first row to the last is exact for a window of
    a strided view: its rows lie on the view's stride)."""

    def kernel(k_ref, x_ref, o_ref):
        view = o_ref.at[pl.ds(0, 4, stride=2)]
        view[pl.ds(k_ref[0], 2), :] = jnp.zeros((2, 128), jnp.float32)  # <- strided view

    [p] = protocols(_paged_call(kernel), mesh((1,)))
    [finding] = [f for f in p.findings if f.kind == "not_lowerable"]
    assert "Strided slices of references are unsupported" in finding.message
    assert finding.loc.line == line_of(HERE, "# <- strided view") and "pl.ds(start, n, stride=s)" in finding.hint
    for engine in ("explicit", "z3"):
        assert _kinds_at(p, 0, 2, engine) == set(), engine
        assert _kinds_at(p, 3, 3, engine) == {"invalid_region"}, engine
    [fault] = [f for f in check_protocol(_bounded(p, 3, 3), engine="explicit").errors if f.kind == "invalid_region"]
    # the view's box runs to one stride past its last row (`_Dim.span`: where an empty window may start)
    assert fault.message.endswith("the store's window [6:9, 0:128] lies inside o_ref on device 0 of shape (16, 128) "
                                  "but outside its .at[...] view [0:8, 0:128] of it")


def test_an_access_that_covers_its_view_or_a_known_window_inside_it_keeps_no_view():
    """Most views are read or written whole (`ref.at[slot][...]`), or at a window known to
    lie inside: those accesses carry no view (nothing to check, and the symmetry and
    parametric passes see the instruction as before)."""

    def kernel(k_ref, x_ref, o_ref):
        o_ref.at[pl.ds(8, 8)][...] = jnp.zeros((8, 128), jnp.float32)  # <- whole view
        o_ref.at[pl.ds(8, 8)][pl.ds(2, 2), :] = jnp.zeros((2, 128), jnp.float32)  # <- known window

    [p] = protocols(_paged_call(kernel), mesh((1,)))
    for marker in ("whole view", "known window"):
        [store] = [s for s in instrs(p, ir.Store) if s.loc.line == line_of(HERE, "# <- " + marker)]
        assert ir.window_checked(store) and store.view is None, marker
    assert not any("checked against the .at[...] view" in n for n in p.notes)


# --- empty windows ---------------------------------------------------------------------------------
# An empty window (`pl.ds(k, 0)`) is judged against a view as against a buffer: inside when it
# starts anywhere from the first element to one past the last (0 <= start <= extent, as
# `semantics.races.inside_buffer` reads it), outside further on. Mosaic refuses a 0-row vector
# (not_lowerable, "Invalid type"), and the protocol is checked anyway.


def test_an_empty_window_one_past_its_view_is_judged_as_one_past_its_buffer():
    """Rows k .. k-1 (none) of the 4-row view at rows 4..7 of a 16-row block, of the block
    itself, and of the strided view of rows 0, 2, 4, 6: each is inside from k = 0 to k = its
    length (one past its end) and outside at k = -1 and at its length + 1, in both engines.
    The strided view's box ran to its last row (row 6), so the empty window at view row 4
    (row 8) was invalid_region though the same window one past the block was not; a
    non-empty window at view row 4 is still outside."""

    def viewed(k_ref, x_ref, o_ref):
        o_ref.at[pl.ds(4, 4)][pl.ds(k_ref[0], 0), :] = jnp.zeros((0, 128), jnp.float32)  # <- window: viewed

    def whole(k_ref, x_ref, o_ref):
        o_ref[pl.ds(k_ref[0], 0), :] = jnp.zeros((0, 128), jnp.float32)  # <- window: whole

    def strided(k_ref, x_ref, o_ref):
        view = o_ref.at[pl.ds(0, 4, stride=2)]
        view[pl.ds(k_ref[0], 0), :] = jnp.zeros((0, 128), jnp.float32)  # <- window: strided

    def row_of_strided(k_ref, x_ref, o_ref):
        view = o_ref.at[pl.ds(0, 4, stride=2)]
        view[pl.ds(k_ref[0], 1), :] = jnp.zeros((1, 128), jnp.float32)  # <- window: row_of_strided

    for kernel, length, inside in ((viewed, 4, True), (whole, 16, True), (strided, 4, True), (row_of_strided, 4, False)):
        [p] = protocols(_paged_call(kernel), mesh((1,)))
        [store] = [s for s in instrs(p, ir.Store) if s.loc.line == line_of(HERE, "# <- window: " + kernel.__name__)]
        assert ir.window_checked(store) and (store.view is None) is (kernel is whole), kernel.__name__
        for engine in ("explicit", "z3"):
            assert _kinds_at(p, 0, length - 1, engine) == set(), (kernel.__name__, engine)
            assert _kinds_at(p, length, length, engine) == (set() if inside else {"invalid_region"}), (kernel.__name__, engine)
            assert _kinds_at(p, length + 1, length + 1, engine) == {"invalid_region"}, (kernel.__name__, engine)
            assert _kinds_at(p, -1, -1, engine) == {"invalid_region"}, (kernel.__name__, engine)
    [p] = protocols(_paged_call(viewed), mesh((1,)))
    [fault] = [f for f in check_protocol(_bounded(p, 5, 5), engine="explicit").errors if f.kind == "invalid_region"]
    assert fault.message.endswith("the store's window [9:9, 0:128] lies inside o_ref on device 0 of shape (16, 128) "
                                  "but outside its .at[...] view [4:8, 0:128] of it")
