"""A kernel's outputs as semcheck's own lowering of it computed them, handed to the kernel
after it (semcheck/lower/produced.py): the mask of known elements, partial copies that keep
it, and the producer / consumer pair of examples/tpu/schedule_from_kernel*.py traced here
under the capture hooks."""

from __future__ import annotations

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from semcheck import ir
from semcheck.api import check_protocol
from semcheck.frontends.capture import capturing, lower_captures
from semcheck.frontends.provenance import decide_withheld
from semcheck.lower.data import ThreadMemory
from semcheck.lower.produced import KnownElements, known_written
from semcheck.lower.values import Known, Opaque, RefValue
from semcheck.run.provenance import checked_values
from tests.tpu_kernels import mesh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _example(name: str):
    path = os.path.join(ROOT, "examples", "tpu", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _whole(shape) -> ir.Region:
    return ir.Region("b")  # the whole buffer


# --- the mask ------------------------------------------------------------------------------------


def test_only_elements_written_with_a_known_value_are_known():
    value = np.arange(6, dtype=np.int32)
    known = np.array([True, True, False, True, True, True])
    written = np.array([True, True, True, False, True, False])
    elements = known_written(value, known, written, run_time=[(4,)])
    # 0, 1 written and known; 2 written unknown; 3 and 5 known but never written (the
    # buffer's start, which on a chip is whatever memory held); 4 holds a run-time value.
    assert elements.known.tolist() == [True, True, False, False, False, False]
    assert elements.count() == 2 and elements.shape == (6,)


def _window(start: int, size: int, n: int):
    """The indexer of `.at[pl.ds(start, size)]` of a 1-D buffer of `n` elements."""
    from jax._src.state import indexing

    return indexing.NDIndexer((indexing.Slice(np.int32(start), size),), (n,), ())


def _ref(name: str, shape) -> RefValue:
    return RefValue(name, False, tuple(shape), jnp.int32)


def test_a_buffer_starting_with_known_elements_reads_them_and_no_others():
    start = KnownElements(np.array([5, 7, 0, 0], np.int32), np.array([True, True, False, False]))
    memory = ThreadMemory({"sched": start}, unfollowed={"sched": "it is an output nobody wrote there"})
    ref = _ref("sched", (4,))
    idx = _window(0, 2, 4)
    read = memory.read(ref, (idx,), _whole((4,)), jax.core.ShapedArray((2,), jnp.int32), "the bound", 64)
    assert isinstance(read, Known) and read.value.tolist() == [5, 7]
    idx = _window(1, 2, 4)
    read = memory.read(ref, (idx,), _whole((4,)), jax.core.ShapedArray((2,), jnp.int32), "the bound", 64)
    assert isinstance(read, Opaque) and read.why == "the bound, which this thread has not stored, and it is an output nobody wrote there"


def test_a_copy_of_a_partly_known_table_keeps_each_elements_own_mask():
    table = KnownElements(np.array([0, 8, 16, 0], np.int32), np.array([True, True, True, False]))
    memory = ThreadMemory({"table": table})
    src, dst = _ref("table", (4,)), _ref("out", (10,))
    whole = _window(0, 4, 4)
    window = _window(3, 4, 10)
    assert memory.copy_elements(src, (whole,), dst, (window,), "a table element nobody stored")
    out = memory.contents["out"]
    assert out.known.tolist() == [False] * 3 + [True, True, True, False] + [False] * 3
    assert out.written.tolist() == [False] * 3 + [True] * 4 + [False] * 3
    assert out.value[3:6].tolist() == [0, 8, 16]
    assert out.lost == "a table element nobody stored"


def test_a_copy_between_buffers_of_different_dtypes_is_left_to_the_whole_value_write():
    memory = ThreadMemory({"table": KnownElements(np.zeros(4, np.int32), np.ones(4, bool))})
    dst = RefValue("out", False, (4,), jnp.float32)
    whole = _window(0, 4, 4)
    assert not memory.copy_elements(_ref("table", (4,)), (whole,), dst, (whole,), "why")


# --- a producer and its consumer, traced and lowered here ------------------------------------------


def _captured(example, count: int, devices: int = 2, assumed=()) -> tuple[list, list]:
    counts = jnp.full((devices,), count, jnp.int32)
    x = jnp.zeros((devices * example.MAX_COPIES * example.ROWS, 128), jnp.float32)
    return captured_and_lowered(lambda m: example.schedule_then_copy(counts, x, m), devices, assumed)


def captured_and_lowered(call, devices: int = 2, assumed=()) -> tuple[list, list]:
    """The protocols and errors of the kernels `call(mesh)` runs over `devices` devices,
    captured and lowered here as the CLI does."""
    caps: list = []
    with capturing(caps.append):
        jax.block_until_ready(call(mesh((devices,))))
    decide_withheld(caps)
    return lower_captures(caps, assumed=assumed)


def _by_name(protocols) -> dict:
    return {p.name: p for p in protocols}


def test_the_consumer_starts_with_what_the_producers_lowering_wrote_and_is_safe():
    protocols, errors = _captured(_example("schedule_from_kernel"), 3)
    assert errors == []
    kernels = _by_name(protocols)
    consumer = kernels["copy_kernel"]
    assert consumer.withheld == ()
    producer = next(f.producer for f in consumer.fed)
    assert producer.startswith("schedule_kernel (called at ")
    assert {f.buffer for f in consumer.fed} == {"offsets_hbm", "steps_hbm"}
    assert checked_values(consumer).script == ()  # nothing of it is the script's own
    assert any(n.startswith("the values of offsets_hbm (3 of 16 elements known) from the outputs of schedule_kernel")
               and "if its own check finds no data race" in n for n in consumer.notes)
    uses = {(u.what, u.value) for u in consumer.data_uses}
    assert {("the DMA source", 0), ("the DMA source", 8), ("the DMA source", 16)} <= uses
    result = check_protocol(consumer, engine="explicit")
    assert result.verdict.value == "safe" and result.stats.states == 52
    assert check_protocol(kernels["schedule_kernel"], engine="explicit").stats.states == 36


def test_overlapping_offsets_from_the_producer_are_a_data_race_in_the_consumer():
    protocols, errors = _captured(_example("schedule_from_kernel_overlap"), 3)
    assert errors == []
    result = check_protocol(_by_name(protocols)["copy_kernel"], engine="explicit")
    assert [v.kind for v in result.errors] == ["data_race"]
    assert result.errors[0].location.line == 57


def test_a_count_the_producer_did_not_write_stays_unknown():
    """The producer wrote 2 offsets and the count; a consumer that loops to offsets[5] (an
    element of the table nobody stored) stops at its loop, saying why."""
    example = _example("schedule_from_kernel")

    def looping_kernel(steps_hbm, offsets_hbm, o_ref, offsets, dma, sem):
        read = pltpu.make_async_copy(offsets_hbm.at[pl.ds(0, example.MAX_COPIES)], offsets, dma.at[0])
        read.start()
        read.wait()

        def signal(i, carry):
            pl.semaphore_signal(sem, 1)
            pl.semaphore_wait(sem, 1)
            return carry

        jax.lax.fori_loop(0, offsets[5], signal, 0)
        o_ref[0] = 0

    def per_device(count):
        any_space = pl.BlockSpec(memory_space=pl.ANY)
        steps, offsets = pl.pallas_call(
            example.schedule_kernel,
            out_shape=(jax.ShapeDtypeStruct((1,), jnp.int32), jax.ShapeDtypeStruct((16,), jnp.int32)),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[], out_specs=(any_space, any_space),
                scratch_shapes=[pltpu.SMEM((8,), jnp.int32), pltpu.SMEM((1,), jnp.int32),
                                pltpu.SemaphoreType.DMA((1,))]),
        )(count)
        return pl.pallas_call(
            looping_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
            in_specs=[any_space, any_space], out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            scratch_shapes=[pltpu.SMEM((8,), jnp.int32), pltpu.SemaphoreType.DMA((1,)), pltpu.SemaphoreType.REGULAR],
        )(steps, offsets)

    m = mesh((2,))
    caps: list = []
    with capturing(caps.append):
        f = jax.jit(jax.shard_map(per_device, mesh=m, in_specs=P("x"), out_specs=P("x"), check_vma=False))
        jax.block_until_ready(f(jnp.full((2,), 2, jnp.int32)))
    decide_withheld(caps)
    _protocols, errors = lower_captures(caps)
    assert len(errors) == 1 and errors[0].kernel == "looping_kernel"
    assert "not stored" in errors[0].message and "loop condition" in errors[0].message


def test_a_producer_checked_over_an_assumed_range_hands_nothing_on_and_the_note_says_why():
    """With its count assumed over a range, the producer's lowering has protocol inputs: its
    outputs are not the script's values alone, so the consumer keeps today's withheld
    operands and stops at its loop, and the withheld note says why nothing was handed on."""
    protocols, errors = _captured(_example("schedule_from_kernel"), 3, assumed=("count_ref[0]",))
    assert [e.kernel for e in errors] == ["copy_kernel"]
    assert "loop condition" in errors[0].message
    assert "copy_kernel" not in _by_name(protocols)


def test_the_values_line_and_the_json_name_the_producer():
    from semcheck.report.json import values_dict
    from semcheck.report.text import values_lines

    protocols, _errors = _captured(_example("schedule_from_kernel"), 3)
    consumer = _by_name(protocols)["copy_kernel"]
    result = check_protocol(consumer, engine="explicit")
    result.values = checked_values(consumer)
    producer = consumer.fed[0].producer
    assert values_lines(result) == [f"  values: as semcheck's lowering of {producer} computed offsets_hbm, steps_hbm"]
    assert values_dict(result)["fed"] == [{"operand": "offsets_hbm", "producer": producer, "through": []},
                                          {"operand": "steps_hbm", "producer": producer, "through": []}]


def test_an_output_aliased_to_an_input_holds_the_inputs_values_where_the_kernel_did_not_write_it():
    """`bump` writes element 0 of its output (aliased to its input, the script's 0..7) by DMA:
    on a chip the rest of the buffer is the input's, so the consumer's loop to
    table[0] + table[3] is concrete (2 + 3), and the note counts all 8 elements known."""
    from semcheck.frontends.capture import capture_function

    def bump_kernel(x_hbm, o_hbm, scratch, sem):
        scratch[0] = 2
        copy = pltpu.make_async_copy(scratch, o_hbm.at[pl.ds(0, 1)], sem.at[0])
        copy.start()
        copy.wait()

    def loop_kernel(o_hbm, out, table, dma, credits):
        copy = pltpu.make_async_copy(o_hbm, table, dma.at[0])
        copy.start()
        copy.wait()

        def credit(i, carry):
            pl.semaphore_signal(credits, 1)
            pl.semaphore_wait(credits, 1)
            return carry

        jax.lax.fori_loop(0, table[0] + table[3], credit, 0)
        out[0] = table[0] + table[3]

    any_space = pl.BlockSpec(memory_space=pl.ANY)

    def f(x):
        bumped = pl.pallas_call(
            bump_kernel, out_shape=jax.ShapeDtypeStruct((8,), jnp.int32), in_specs=[any_space], out_specs=any_space,
            scratch_shapes=[pltpu.SMEM((1,), jnp.int32), pltpu.SemaphoreType.DMA((1,))],
            input_output_aliases={0: 0})(x)
        return pl.pallas_call(
            loop_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32), in_specs=[any_space],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            scratch_shapes=[pltpu.SMEM((8,), jnp.int32), pltpu.SemaphoreType.DMA((1,)), pltpu.SemaphoreType.REGULAR],
        )(bumped)

    protocols, errors = lower_captures(capture_function(f, jnp.arange(8, dtype=jnp.int32), operand_values=True))
    assert errors == []
    consumer = _by_name(protocols)["loop_kernel"]
    assert any(n.startswith("the values of o_hbm (8 of 8 elements known) from the outputs of bump_kernel")
               for n in consumer.notes)
    assert check_protocol(consumer, engine="explicit").verdict.value == "safe"


def _count_kernel(n_ref, o_ref, credits):
    pl.semaphore_signal(credits, jnp.clip(n_ref[0], 0, 4))
    pl.semaphore_wait(credits, 4)
    o_ref[0] = n_ref[0]


def _counted(n):
    return pl.pallas_call(
        _count_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, in_specs=[],
                                               out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
                                               scratch_shapes=[pltpu.SemaphoreType.REGULAR]))(n)


def test_kernels_in_a_loop_hand_nothing_on_and_the_withheld_note_says_why():
    """Inside a loop the consumer's first call need not receive the producer's first call's
    output (the one lowered with the script's values), so nothing is handed on: the count
    stays an input over int32, as before, and the note names the loop."""
    from semcheck.frontends.capture import capture_function

    def f(n):
        return jax.lax.fori_loop(0, 2, lambda i, c: c + _counted(_counted(n)), n)

    protocols, errors = lower_captures(capture_function(f, jnp.array([4], jnp.int32), operand_values=True))
    assert errors == []
    second = protocols[-1]
    assert second.fed == () and [i.name for i in second.inputs] == ["n_ref[0]@d0"]
    assert any("does not hand its outputs on: it is inside a " in n and " of the program" in n for n in second.notes)


# --- the consumer's verdict rests on the producer's ---------------------------------------------


def _result(kernel: str, verdict: str, fed=(), calls=()):
    from semcheck.result import CheckedValues, Result, Verdict

    return Result(kernel, "k.py", 1, "tpu", "tpu", 2, 1, "explicit", Verdict(verdict), values=CheckedValues(fed=fed),
                  calls=calls)


def test_a_safe_consumer_of_a_producer_whose_check_is_not_safe_is_inconclusive():
    """The fed values are the producer's outputs on a chip only if it has no data race: a
    safe verdict resting on them is inconclusive when the producer's check is a violation
    (or anything but safe), and says why; a consumer with a violation keeps it."""
    from semcheck.run.checks import resting_on_producers

    fed = (ir.FedOperand("steps_hbm", "schedule_kernel (called at k.py:40)", 0),)
    consumer = _result("copy_kernel", "safe", fed, calls=(1,))
    judged = resting_on_producers(consumer, [_result("schedule_kernel", "violation", calls=(0,))])
    assert judged.verdict.value == "inconclusive"
    assert judged.unjustified == ("the values of steps_hbm are the outputs of schedule_kernel (called at k.py:40) as "
                                  "semcheck's lowering computed them, which hold on a chip only if that kernel has "
                                  "no data race, and its check here is violation")
    # the producer's call renamed by the dedupe (another kernel of its name came first) counts too
    assert resting_on_producers(consumer, [_result("schedule_kernel #2", "error", calls=(0,))]).verdict.value \
        == "inconclusive"
    assert resting_on_producers(consumer, [_result("schedule_kernel", "safe", calls=(0,))]) is consumer
    assert resting_on_producers(consumer, [_result("other_kernel", "violation", calls=(2,))]) is consumer
    racy = _result("copy_kernel", "violation", fed, calls=(1,))
    assert resting_on_producers(racy, [_result("schedule_kernel", "violation", calls=(0,))]) is racy


def test_kernels_whose_names_share_a_prefix_are_not_taken_for_the_producer():
    """The producer's check is the one holding its call, not one whose name starts with its
    name: a different kernel of the same name (renamed `#2` by the dedupe) that has a data
    race leaves a consumer of the safe one safe, and so does `schedule_kernel_v2`."""
    from semcheck.run.checks import resting_on_producers

    fed = (ir.FedOperand("steps_hbm", "schedule_kernel (called at k.py:40)", 0),)
    consumer = _result("copy_kernel", "safe", fed, calls=(2,))
    earlier = [_result("schedule_kernel", "safe", calls=(0,)), _result("schedule_kernel #2", "violation", calls=(1,)),
               _result("schedule_kernel_v2", "violation", calls=(3,))]
    assert resting_on_producers(consumer, earlier) is consumer
    # the same kernel captured twice is one protocol, one check: a consumer of either call rests on it
    assert resting_on_producers(consumer, [_result("schedule_kernel", "violation", calls=(5, 0))]).verdict.value \
        == "inconclusive"


def test_check_loaded_judges_the_consumer_after_its_producer():
    from semcheck.run.checks import check_loaded

    protocols, errors = _captured(_example("schedule_from_kernel"), 3)
    assert errors == []
    results = check_loaded(protocols, lambda p: check_protocol(p, engine="explicit"), lambda e: None)
    assert [(r.kernel, r.verdict.value) for r in results] == [("schedule_kernel", "safe"), ("copy_kernel", "safe")]
    assert [r.calls for r in results] == [(0,), (1,)]
    assert results[1].values.fed[0].producer_call == 0


def test_the_same_kernel_captured_twice_is_checked_once_for_both_calls():
    """`_dedupe` keeps one of two equal protocols and gives it both calls, so a kernel fed by
    the second call rests on that one check; a different kernel of the same name keeps its own."""
    import dataclasses

    from semcheck.frontends.capture import _dedupe

    kernel = ir.Protocol("schedule_kernel", ir.Backend.TPU, 2, 1, ())
    other = dataclasses.replace(kernel, devices=4, calls=(2,))
    kept = _dedupe([dataclasses.replace(kernel, calls=(0,)), dataclasses.replace(kernel, calls=(1,)), other])
    assert [(p.name, p.calls) for p in kept] == [("schedule_kernel", (0, 1)), ("schedule_kernel #2", (2,))]
