"""An operand placed from an earlier kernel's output by element-placing ops
(semcheck/frontends/placing.py): each op's rule on values and on the mask of known
elements, the ops that stop it, and examples/tpu/schedule_from_kernel_sliced*.py traced
here under the capture hooks."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np

from semcheck.api import check_protocol
from semcheck.frontends.capture import capturing, lower_captures
from semcheck.frontends.placing import Placement, Stop, place_operand
from semcheck.frontends.provenance import decide_withheld
from semcheck.lower.produced import KnownElements
from tests.test_produced import _by_name, _example
from tests.tpu_kernels import mesh

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
    assert _placed(lambda x: x.reshape(2, 4).T).ops()[0].startswith("stablehlo.reshape at ")


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
    assert [op.split(" at ")[0] for op in placement.ops()] == ["stablehlo.slice", "stablehlo.reshape"]
    assert all(op.endswith(f"tests/test_placing.py:{line}") for op in placement.ops())


# --- what stops it ------------------------------------------------------------------------------


def _stop(f, value=VALUE) -> Stop:
    stop = _placed(f, value)
    assert isinstance(stop, Stop), stop
    return stop


def test_arithmetic_stops_it_at_its_op_and_line():
    def f(x):
        return x[:4] + 1

    stop = _stop(f)
    assert stop.op == "stablehlo.add" and stop.loc is not None and stop.loc.line == _line(f) + 1
    assert stop.sentence().endswith(f"tests/test_placing.py:{_line(f) + 1} computes its elements rather than placing them")


def test_a_reduction_and_a_float_conversion_stop_it():
    assert _stop(lambda x: jnp.sum(x)).op == "stablehlo.reduce"
    assert _stop(lambda x: x.astype(jnp.float32)).why == "converts int32 to float32, which may change its values"


def test_a_slice_at_a_start_read_from_the_output_stops_it():
    """JAX wraps a negative start first (a select), which stops it: it computes the start."""
    def f(x):
        return jax.lax.dynamic_slice(x, (x[0],), (2,))

    stop = _stop(f)
    assert stop.op == "stablehlo.select" and stop.loc is not None and stop.loc.line == _line(f) + 1


def test_a_gather_at_run_time_indices_stops_it():
    assert _stop(lambda x: x[x[:3]]).sentence().endswith("computes its elements rather than placing them")
    assert _stop(lambda x: x[x[:3]]).op == "stablehlo.gather"


def test_a_call_of_a_jitted_function_stops_it_and_says_so():
    stop = _stop(lambda x: jnp.take(x, x[:3], mode="clip"))
    assert stop.op == "func.call" and stop.why.startswith("calls @") and stop.why.endswith(
        ", a function semcheck does not follow an operand's elements through")


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


def _captured(example, count: int = 3, devices: int = 2):
    m = mesh((devices,))
    caps: list = []
    counts = jnp.full((devices,), count, jnp.int32)
    x = jnp.zeros((devices * example.MAX_COPIES * example.ROWS, 128), jnp.float32)
    with capturing(caps.append):
        jax.block_until_ready(example.schedule_then_copy(counts, x, m))
    decide_withheld(caps)
    return lower_captures(caps)


def test_the_sliced_tables_start_with_what_the_producers_lowering_wrote_and_the_consumer_is_safe():
    protocols, errors = _captured(_example("schedule_from_kernel_sliced"))
    assert errors == []
    consumer = _by_name(protocols)["copy_kernel"]
    assert consumer.withheld == () and {f.buffer for f in consumer.fed} == {"offsets_hbm", "steps_hbm"}
    assert all(f.producer_call == 0 for f in consumer.fed)
    assert any(n.startswith("the values of offsets_hbm (3 of 8 elements known) from the outputs of metadata_kernel")
               and ", placed by stablehlo.slice at " in n for n in consumer.notes)
    uses = {(u.what, u.value) for u in consumer.data_uses}
    assert {("the DMA source", 0), ("the DMA source", 8), ("the DMA source", 16)} <= uses
    result = check_protocol(consumer, engine="explicit")
    assert result.verdict.value == "safe" and result.stats.states == 52


def test_offsets_sliced_one_element_early_are_a_data_race():
    protocols, errors = _captured(_example("schedule_from_kernel_sliced_skew"))
    assert errors == []
    consumer = _by_name(protocols)["copy_kernel"]
    assert {("the DMA source", 3)} <= {(u.what, u.value) for u in consumer.data_uses}
    result = check_protocol(consumer, engine="explicit")
    assert [v.kind for v in result.errors] == ["data_race"] and result.errors[0].location.line == 58


def test_arithmetic_between_the_kernels_keeps_the_operand_withheld_and_the_note_names_it():
    """The count taken as `meta[:1] + 0` is computed, not placed: it stays withheld, the
    consumer stops at its loop, and the reason names the add and its line."""
    example = _example("schedule_from_kernel_sliced")

    def tables(meta):
        return meta[:1] + 0, meta[1:1 + example.MAX_COPIES]

    example.tables = tables
    protocols, errors = _captured(example)
    assert [e.kernel for e in errors] == ["copy_kernel"]
    line = _line(tables) + 1
    assert (f"semcheck's lowering of metadata_kernel (called at examples/tpu/schedule_from_kernel_sliced.py:82) hands "
            f"nothing of it on: stablehlo.add at tests/test_placing.py:{line} computes its elements rather than "
            "placing them") in errors[0].message
