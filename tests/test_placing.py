"""An operand placed from an earlier kernel's output by element-placing ops and integer
arithmetic (semcheck/frontends/placing.py): each op's rule on values and on the mask of
known elements, the jitted functions it follows into, the ops that stop it, and
examples/tpu/schedule_from_kernel_sliced*.py traced here under the capture hooks."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from semcheck.api import check_protocol
from semcheck.frontends.placing import Placement, Stop, place_operand
from semcheck.lower.produced import KnownElements
from tests.test_produced import _by_name, _example, captured_and_lowered
from tests.test_produced import _captured as captured

# The output the rules place from: 8 int32 elements, of which 2, 5 and 7 are unknown.
VALUE = np.array([0, 8, -1, 16, 70000, -9, 24, 5], np.int32)
KNOWN = np.array([True, True, False, True, True, False, True, False])


def _placed(f, value=VALUE) -> Placement | Stop:
    """How `f`'s result is placed from its argument, read off `f`'s StableHLO (the argument
    stands for the kernel output: place 0, output 0)."""
    module = jax.jit(f).lower(value).compiler_ir("stablehlo")
    main = next(op for op in module.body.operations if op.operation.attributes["sym_name"].value == "main")
    block = main.operation.regions[0].blocks[0]
    returned = list(block.operations)[-1].operation.operands[0]
    return place_operand(returned, {block.arguments[0]: (0, 0)})


def _apply(f, value=VALUE, known=KNOWN) -> KnownElements:
    placement = _placed(f, value)
    assert isinstance(placement, Placement), placement
    assert (placement.producer, placement.output) == (0, 0)
    placed = placement.apply(KnownElements(value, known))
    expected = np.asarray(f(value))
    assert placed.value.dtype == expected.dtype and placed.value.shape == expected.shape
    assert (placed.value[placed.known] == expected[placed.known]).all()
    return placed


def _line(f) -> int:
    return inspect.getsourcelines(f)[1]


# --- each rule, on values and on the mask ---------------------------------------------------------


def test_a_slice_takes_the_mask_of_the_elements_it_takes():
    placed = _apply(lambda x: x[1:7:2])
    assert placed.value.tolist() == [8, 16, -9] and placed.known.tolist() == [True, True, False]


def test_a_reshape_and_a_transpose_move_each_elements_mask_with_it():
    placed = _apply(lambda x: x.reshape(2, 4).T)
    assert placed.value.tolist() == [[0, 70000], [8, -9], [-1, 24], [16, 5]]
    assert placed.known.tolist() == [[True, True], [True, False], [False, True], [True, False]]
    assert str(_placed(lambda x: x.reshape(2, 4).T).steps()[0]).startswith("stablehlo.reshape at ")


def test_a_broadcast_copies_each_elements_mask():
    placed = _apply(lambda x: jnp.broadcast_to(x[1:3], (2, 2)))
    assert placed.value.tolist() == [[8, -1], [8, -1]] and placed.known.tolist() == [[True, False]] * 2


def test_constants_concatenated_with_the_output_are_known():
    placed = _apply(lambda x: jnp.concatenate([x[:2], jnp.full((3,), 7, jnp.int32), x[5:6]]))
    assert placed.value.tolist() == [0, 8, 7, 7, 7, -9]
    assert placed.known.tolist() == [True, True, True, True, True, False]


def test_a_narrowing_conversion_keeps_known_only_the_elements_it_keeps():
    """70000 does not fit in an int16: converted, it is another number, so unknown."""
    placed = _apply(lambda x: x.astype(jnp.int16))
    assert placed.known.tolist() == [True, True, False, True, False, False, True, False]
    # to uint8, a negative element is another number too
    signed = np.array([3, -4, 255, 256], np.int32)
    assert _apply(lambda x: x.astype(jnp.uint8), signed, np.ones(4, bool)).known.tolist() == [True, False, True, False]


def test_a_dynamic_slice_at_constant_starts_takes_the_elements_there_clamped_as_jax_does():
    placed = _apply(lambda x: jax.lax.dynamic_slice(x, (6,), (4,)))  # clamped to start at 4
    assert placed.value.tolist() == [70000, -9, 24, 5] and placed.known.tolist() == [True, False, True, False]


def test_a_chain_of_placing_ops_names_each_with_its_line():
    def f(x):
        return x[1:5].reshape(2, 2)

    placement = _placed(f)
    assert isinstance(placement, Placement)
    line = _line(f) + 1
    assert [step.op for step in placement.steps()] == ["stablehlo.slice", "stablehlo.reshape"]
    assert all(str(step).endswith(f"tests/test_placing.py:{line}") for step in placement.steps())


# --- what stops it ------------------------------------------------------------------------------


def _stop(f, value=VALUE) -> Stop:
    stop = _placed(f, value)
    assert isinstance(stop, Stop), stop
    return stop


def test_float_arithmetic_stops_it_at_its_op_and_line():
    """A float may round otherwise on the chip: only integer arithmetic is followed."""
    def f(x):
        return x[:4] * 2.5

    stop = _stop(f, VALUE.astype(np.float32))
    assert stop.op == "stablehlo.multiply" and stop.loc is not None and stop.loc.line == _line(f) + 1
    assert stop.sentence().endswith(f"tests/test_placing.py:{_line(f) + 1} computes on float32 elements: semcheck "
                                    "follows only integer arithmetic, which a TPU computes as the CPU does")


def test_an_argmax_and_a_float_conversion_stop_it():
    """An argmax reduces two operands at once (values and indices): not one reducer."""
    stop = _stop(lambda x: jnp.argmax(x))
    assert stop.op == "stablehlo.reduce in @argmax" and "reduces with a body that is not one add" in stop.why
    assert _stop(lambda x: x.astype(jnp.float32)).why == "converts int32 to float32, which may change its values"


def test_a_slice_at_a_start_read_from_the_output_stops_it():
    """JAX wraps a negative start first (a select, followed); the slice's start is not a constant."""
    def f(x):
        return jax.lax.dynamic_slice(x, (x[0],), (2,))

    stop = _stop(f)
    assert stop.op == "stablehlo.dynamic_slice" and stop.loc is not None and stop.loc.line == _line(f) + 1
    assert stop.why == "starts at an index that is not a constant of the program"


def test_a_gather_at_run_time_indices_stops_it_inside_the_function_that_calls_it():
    assert _stop(lambda x: x[x[:3]]).why == "gathers at indices that are not constants of the program"
    assert _stop(lambda x: x[x[:3]]).op == "stablehlo.gather"

    def f(x):
        return jnp.take(x, x[:3], mode="clip")

    stop = _stop(f)
    assert stop.op == "stablehlo.gather in @_take" and stop.loc is not None and stop.loc.line == _line(f) + 1


# --- integer arithmetic, reductions, constant gathers, called functions --------------------------


def test_integer_arithmetic_is_known_where_every_operand_is():
    placed = _apply(lambda x: x[:4] * 3 - x[4:])
    assert placed.value.tolist() == [-70000, 33, -27, 43] and placed.known.tolist() == [True, False, False, False]


def test_a_clip_and_a_where_are_followed_into_the_functions_jax_calls_and_named_at_the_users_line():
    def f(x):
        y = jnp.clip(x[:4] + 1, 0, 5)
        return jnp.where(y < 3, y, jnp.arange(4, dtype=jnp.int32))

    placed = _apply(f)
    assert placed.value.tolist() == [1, 1, 0, 3] and placed.known.tolist() == [True, True, False, True]
    ops = [str(step) for step in _placed(f).steps()]
    line = _line(f)
    assert any(o.startswith("stablehlo.maximum in @clip at ") and o.endswith(f"tests/test_placing.py:{line + 1}")
               for o in ops)
    assert any(o.startswith("stablehlo.select in @_where at ") and o.endswith(f"tests/test_placing.py:{line + 2}")
               for o in ops)


def test_a_cumulative_sum_is_known_up_to_the_first_unknown_element():
    """Offsets from counts, as metadata does: each sum is known where every count up to it
    is; an exclusive sum taken as `cumsum - x` is known only where both are (element 2 is
    knowable, but not followed so: no value is guessed)."""
    assert _apply(lambda x: jnp.cumsum(x)).known.tolist() == [True, True] + [False] * 6
    placed = _apply(lambda x: jnp.cumsum(x) - x)
    assert placed.value.tolist() == [0, 0, 8, 7, 23, 70023, 70014, 70038]
    assert placed.known.tolist() == [True, True] + [False] * 6


def test_a_reduction_is_known_where_all_it_reduces_is():
    placed = _apply(lambda x: jnp.max(x.reshape(2, 4), axis=0))
    assert placed.value.tolist() == [70000, 8, 24, 16] and placed.known.tolist() == [True, False, False, False]
    assert _apply(lambda x: jnp.sum(x[:2])).known.tolist() is True


def test_a_gather_at_constant_indices_places_the_elements_it_takes():
    placed = _apply(lambda x: x[jnp.array([1, 3, -1])])
    assert placed.value.tolist() == [8, 16, 5] and placed.known.tolist() == [True, True, False]
    placed = _apply(lambda x: x.reshape(2, 4)[:, jnp.array([2, 0])])
    assert placed.value.tolist() == [[-1, 0], [24, 70000]] and placed.known.tolist() == [[False, True], [True, True]]


def test_a_value_from_outside_stops_it_at_the_op_that_takes_it():
    def f(x, y):
        return jnp.concatenate([x[:2], y])

    module = jax.jit(f).lower(VALUE, VALUE[:2]).compiler_ir("stablehlo")
    main = next(op for op in module.body.operations if op.operation.attributes["sym_name"].value == "main")
    block = main.operation.regions[0].blocks[0]
    returned = list(block.operations)[-1].operation.operands[0]
    stop = place_operand(returned, {block.arguments[0]: (0, 0)})
    assert isinstance(stop, Stop) and stop.op == "stablehlo.concatenate"
    assert "places a value from outside the kernels before it" in stop.why
    both = place_operand(returned, {block.arguments[0]: (0, 0), block.arguments[1]: (0, 1)})
    assert isinstance(both, Stop) and both.sentence().startswith("stablehlo.concatenate at ")
    assert both.why == "places elements of two kernel outputs"


# --- the producer / consumer pair, traced and lowered here ------------------------------------------


def test_the_sliced_tables_start_with_what_the_producers_lowering_wrote_and_the_consumer_is_safe():
    protocols, errors = captured(_example("schedule_from_kernel_sliced"), 3)
    assert errors == []
    consumer = _by_name(protocols)["copy_kernel"]
    assert consumer.withheld == () and {f.buffer for f in consumer.fed} == {"offsets_hbm", "steps_hbm"}
    assert all(f.producer_call == 0 for f in consumer.fed)
    assert any(n.startswith("the values of offsets_hbm (3 of 8 elements known) from the outputs of metadata_kernel")
               and ", through stablehlo.slice at " in n for n in consumer.notes)
    uses = {(u.what, u.value) for u in consumer.data_uses}
    assert {("the DMA source", 0), ("the DMA source", 8), ("the DMA source", 16)} <= uses
    result = check_protocol(consumer, engine="explicit")
    assert result.verdict.value == "safe" and result.stats.states == 52


def test_offsets_sliced_one_element_early_are_a_data_race():
    protocols, errors = captured(_example("schedule_from_kernel_sliced_skew"), 3)
    assert errors == []
    consumer = _by_name(protocols)["copy_kernel"]
    assert {("the DMA source", 3)} <= {(u.what, u.value) for u in consumer.data_uses}
    result = check_protocol(consumer, engine="explicit")
    assert [v.kind for v in result.errors] == ["data_race"] and result.errors[0].location.line == 58


def test_an_op_not_followed_between_the_kernels_keeps_the_operand_withheld_and_the_note_names_it():
    """The count taken as `jnp.sort(meta[:1])` is sorted, not placed: it stays withheld, the
    consumer stops at its loop, and the reason names the sort and its line."""
    example = _example("schedule_from_kernel_sliced")

    def tables(meta):
        return jnp.sort(meta[:1]), meta[1:1 + example.MAX_COPIES]

    example.tables = tables
    protocols, errors = captured(example, 3)
    assert [e.kernel for e in errors] == ["copy_kernel"]
    line = _line(tables) + 1
    assert (f"semcheck's lowering of metadata_kernel (called at examples/tpu/schedule_from_kernel_sliced.py:82) hands "
            f"nothing of it on: stablehlo.sort in @sort at tests/test_placing.py:{line} is none of the ops semcheck follows "
            "elements through") in errors[0].message


def test_offsets_computed_from_counts_between_the_kernels_are_fed_and_the_consumer_is_safe():
    """The script bounds the producer's count and rounds and clips its offsets with integer
    arithmetic (`jnp.clip` a jitted function JAX calls): the same copies, the same states."""
    example = _example("schedule_from_kernel_sliced")

    def tables(meta):
        rows = jnp.clip(meta[1:1 + example.MAX_COPIES] // example.ROWS, 0, example.MAX_COPIES - 1)
        return jnp.minimum(meta[:1], example.MAX_COPIES), rows * example.ROWS

    example.tables = tables
    protocols, errors = captured(example, 3)
    assert errors == []
    consumer = _by_name(protocols)["copy_kernel"]
    assert consumer.withheld == ()
    assert any("stablehlo.divide in @floor_divide at " in n and "stablehlo.minimum in @clip at " in n for n in consumer.notes)
    assert {("the DMA source", 0), ("the DMA source", 8), ("the DMA source", 16)} <= {
        (u.what, u.value) for u in consumer.data_uses}
    result = check_protocol(consumer, engine="explicit")
    assert result.verdict.value == "safe" and result.stats.states == 52


def test_ops_that_give_the_operand_no_known_element_are_named_in_its_reason():
    """The count taken from the table's unwritten tail (element 12): the output's known
    elements are 0 to 3, the slice keeps none of them, so the loop bound stays withheld and
    the reason names the slice."""
    example = _example("schedule_from_kernel_sliced")

    def tables(meta):
        return meta[12:13], meta[1:1 + example.MAX_COPIES]

    example.tables = tables
    protocols, errors = captured(example, 3)
    assert [e.kernel for e in errors] == ["copy_kernel"]
    assert (f"hands nothing of it on: stablehlo.slice at tests/test_placing.py:{_line(tables) + 1} give it no "
            "element computed only from elements that lowering knows") in errors[0].message


# --- soundness on random chains: a known element never depends on an unknown one ------------------

_UNARY = (
    lambda x: x + 3,
    lambda x: x * -2,
    lambda x: x // 3,
    lambda x: x % 5,
    lambda x: jnp.clip(x, -4, 20),
    lambda x: jnp.cumsum(x),
    lambda x: jnp.maximum(x, x[::-1]),
    lambda x: jnp.where(x > 2, x, jnp.arange(8, dtype=jnp.int32)),
    lambda x: x[jnp.array([7, 0, 3, 3, 1, 6, 2, 5])],
    lambda x: jnp.broadcast_to(jnp.max(x.reshape(2, 4), axis=1, keepdims=True), (2, 4)).reshape(8),
    lambda x: jnp.concatenate([x[4:], x[:4] ^ 6]),
    lambda x: (x.astype(jnp.int16) >> 1).astype(jnp.int32),
)


@given(chain=st.lists(st.integers(0, len(_UNARY) - 1), min_size=1, max_size=4),
       known=st.lists(st.booleans(), min_size=8, max_size=8),
       values=st.lists(st.integers(-100, 100), min_size=16, max_size=16))
@settings(max_examples=40, deadline=None)
def test_a_known_element_is_jaxs_own_value_whatever_the_unknown_elements_hold(chain, known, values):
    """Every op the walk follows, composed at random: where the placement says an element is
    known, it is JAX's result, and it stays JAX's result with the unknown elements of the
    output changed; with every element known, every element of the result is known."""
    def f(x):
        for i in chain:
            x = _UNARY[i](x)
        return x

    mask = np.array(known)
    first, second = np.array(values[:8], np.int32), np.array(values[8:], np.int32)
    other = np.where(mask, first, second)  # the same known elements, other unknown ones
    placement = _placed(f, first)
    assert isinstance(placement, Placement), placement
    for value in (first, other):
        placed = placement.apply(KnownElements(value, mask))
        expected = np.asarray(jax.jit(f)(value))
        assert (placed.value[placed.known] == expected[placed.known]).all()
    assert placement.apply(KnownElements(first, np.ones(8, bool))).known.all()


# --- examples/tpu/group_offsets_*.py: offsets summed from a kernel's group sizes ----------------------


def _group_copies(name: str, devices: int = 2):
    example = _example(name)
    groups = jnp.full((devices,), example.GROUPS, jnp.int32)
    x = jnp.zeros((devices * example.GROUPS * example.ROWS, 128), jnp.float32)
    protocols, errors = captured_and_lowered(lambda m: example.count_then_copy(groups, x, m), devices)
    assert errors == []
    return _by_name(protocols)["group_copy_kernel"]


def test_exclusive_offsets_summed_from_the_sizes_are_fed_and_the_copies_are_safe():
    consumer = _group_copies("group_offsets_from_sizes")
    assert consumer.withheld == ()
    assert any("offsets_hbm (3 of 8 elements known) from the outputs of sizes_kernel" in n
               and "stablehlo.reduce_window in @cumsum" in n and "stablehlo.subtract at " in n for n in consumer.notes)
    assert {("the DMA source", 0), ("the DMA source", 8), ("the DMA source", 16)} <= {
        (u.what, u.value) for u in consumer.data_uses}
    result = check_protocol(consumer, engine="explicit")
    assert result.verdict.value == "safe" and result.stats.states == 52


def test_inclusive_offsets_send_the_last_group_past_the_output():
    consumer = _group_copies("group_offsets_inclusive")
    result = check_protocol(consumer, engine="explicit")
    assert [v.kind for v in result.errors] == ["invalid_region"] and result.errors[0].location.line == 57
    assert "[24:32, 0:128] lies outside x_hbm on device 0 of shape (24, 128)" in result.errors[0].message


def test_the_finding_names_the_script_line_that_computed_its_window():
    """`from data:` under the finding: the operand the copy's window was read from, the
    values, and the producer and ops that made it, each with its line (report/data_origin.py)."""
    from semcheck.report.text import render_result

    example = _example("group_offsets_inclusive")
    consumer = _group_copies("group_offsets_inclusive")
    result = check_protocol(consumer, engine="explicit")
    [fed] = [f for f in result.values.fed if f.buffer == "offsets_hbm"]
    cumsum = _line(example.offsets_of) + 2
    assert [(s.op, s.loc.line if s.loc else None) for s in fed.through][-1] == ("stablehlo.reduce_window in @cumsum",
                                                                             cumsum)
    [line] = [x for x in render_result(result).splitlines() if x.startswith("    from data: ")]
    assert line.startswith("    from data: the DMA source and the DMA destination at this line are read from offsets_hbm "
                           "(8, 16, 24 on device 0); offsets_hbm is computed from the output of sizes_kernel (called at ")
    assert line.endswith(f"by slice (line {cumsum + 13}), reduce_window in @cumsum (line {cumsum})")


def test_a_finding_whose_line_takes_no_value_from_outside_the_kernel_has_no_data_line():
    """A value the kernel computed from its own stores alone (no script input) is the
    kernel's own business: the excerpt shows it, no `from data:` line."""
    from dataclasses import replace

    from semcheck.report.data_origin import data_lines

    result = check_protocol(_group_copies("group_offsets_inclusive"), engine="explicit")
    [v] = result.errors
    assert data_lines(v, result)
    passed = replace(result, values=replace(result.values, fed=()))  # as if the script passed the offsets
    assert data_lines(v, passed)[0].endswith("read from offsets_hbm (8, 16, 24 on device 0); offsets_hbm holds what "
                                             "the script passed")
    own = tuple(replace(u, script_inputs=()) for u in result.data_uses)
    assert data_lines(v, replace(result, data_uses=own)) == []
    assert data_lines(replace(v, device=1 - v.device), replace(result, data_uses=tuple(
        u for u in result.data_uses if u.device == v.device))) == []
