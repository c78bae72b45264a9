"""Where a captured kernel's operand values come from (semcheck/frontends/provenance.py): an
operand is withheld on a device when its backward slice through the jitted program reaches
an earlier kernel's outputs (zeros in the capture), or when it comes from outside the
program and a kernel ran before the program's run began (frontends/operands.py). The
kernels here are traced in this process under the capture hooks and never run."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import PartitionSpec as P

from semcheck.api import check_protocol
from semcheck.errors import LoadError
from semcheck.report import text
from semcheck.frontends.capture import capture_function, capturing, lower_captures
from semcheck.frontends.provenance import OperandOrigin, _ModuleWalk, decide_withheld
from semcheck.lower.exact_outputs import Rule
from tests.tpu_kernels import mesh

ZEROS = "semcheck's capture replaces kernel outputs with zeros"
# Why `kern` and `counted` keep zeros (semcheck/lower/exact_outputs.py): their operands are
# moved by DMA (pl.ANY) or in SMEM, not blocked in VMEM. (Their scalar prefetch, read at a
# static index, is no reason since the proof takes it as an input.)
NOT_IN_VMEM = "semcheck computes a kernel's outputs only where it proves them exact, and its {} is in {}, not blocked in VMEM"
KERN_NOT_COMPUTED = NOT_IN_VMEM.format("input 0", "any")
COUNTED_NOT_COMPUTED = NOT_IN_VMEM.format("output 0", "smem")


def copy_kernel(n_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...]


def kern(n, x):
    """A kernel taking a scalar-prefetch operand `n` and a block `x`."""
    return pl.pallas_call(
        copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                                               out_specs=pl.BlockSpec(memory_space=pl.ANY)))(n, x)


def to_count(y):
    return jnp.sum(y).astype(jnp.int32).reshape(1)


N = jnp.array([3], jnp.int32)
X = jnp.ones((8, 128), jnp.float32)


def captured(*calls) -> list:
    """The captures of running each (jitted function, args) in turn, with their withheld
    operands decided."""
    caps: list = []
    with capturing(caps.append):
        for fn, args in calls:
            jax.block_until_ready(fn(*args))
    decide_withheld(caps)
    return caps


def test_an_operand_that_is_a_program_argument_is_the_scripts_value_after_another_kernel():
    @jax.jit
    def f(n, x):
        return kern(n, kern(n, x))

    first, second = captured((f, (N, X)))
    assert second.operand_origins[0] == OperandOrigin(outside=("argument 0 of jit_f",))
    assert second.operand_origins[1].kernels and not second.operand_origins[1].outside
    assert first.withheld == {} and first.ran_before == {}
    assert list(second.withheld) == [0] and list(second.withheld[0]) == [1]  # only the block
    assert second.withheld[0][1].startswith("it is computed from the outputs of copy_kernel (called at ")
    assert second.withheld[0][1].endswith(f"{ZEROS}; for {_label(first)}, {KERN_NOT_COMPUTED}")


def test_an_operand_computed_from_an_earlier_kernels_output_is_withheld():
    @jax.jit
    def f(n, x):
        return kern(to_count(kern(n, x)), x)

    _, second = captured((f, (N, X)))
    assert second.operand_origins[0].kernels and not second.operand_origins[0].outside
    assert sorted(second.withheld[0]) == [0]


def test_the_slice_goes_through_a_nested_jit_with_and_without_a_kernel():
    @jax.jit
    def plain(y):
        return y + 1  # no kernel: JAX lowers it as a func.call of a function of its own

    @jax.jit
    def with_kernel(n, x):
        return kern(n, x)  # holds a kernel: lowered inline (capture._inlined_call)

    @jax.jit
    def f(n, x):
        y = with_kernel(n, x)
        return kern(plain(n), kern(to_count(plain(y)), x))

    a, b, c = captured((f, (N, X)))
    assert "call @plain" in str(a.flow.scope.module)
    assert b.operand_origins[0].kernels == (_label(a),)  # through the func.call of `plain`
    assert c.operand_origins[0] == OperandOrigin(outside=("argument 0 of jit_f",))  # argument, through `plain`
    assert _label(b) in c.operand_origins[1].kernels


def test_a_loop_carrying_a_kernels_output_uses_its_first_calls_value_and_keeps_the_unchanged_count():
    @jax.jit
    def f(n, x):
        return jax.lax.fori_loop(0, 3, lambda i, c: (c[0], kern(c[0], c[1])), (n, x))[1]

    [loop] = captured((f, (N, X)))
    assert loop.operand_origins[0] == OperandOrigin(outside=("argument 0 of jit_f",))
    assert loop.operand_origins[1] == OperandOrigin(outside=("argument 1 of jit_f",), own=True)
    assert loop.earlier_calls is None  # the loop's first iteration is the first call everywhere
    assert loop.withheld == {} and loop.own_carried == (1,)


def test_a_loop_run_while_the_kernels_output_says_so_uses_the_first_calls_values():
    @jax.jit
    def f(n, x):
        return jax.lax.while_loop(lambda c: c[0, 0] > 0, lambda c: kern(n, c), x)  # once: zeros stop it

    [loop] = captured((f, (N, X)))
    # n reaches the kernel unchanged, but whether the loop runs again depends on x, then its output
    assert loop.operand_origins[0] == OperandOrigin(outside=("arguments 0 and 1 of jit_f",), own=True)
    assert loop.earlier_calls is None and loop.withheld == {} and loop.own_carried == (0, 1)


def test_a_kernel_called_before_the_loop_that_carries_its_output_withholds_it():
    @jax.jit
    def f(n, x):
        return jax.lax.fori_loop(0, 3, lambda i, c: kern(n, c), kern(n, x))

    before, loop = captured((f, (N, X)))
    assert loop.operand_origins[1].kernels == (_label(before),) and loop.operand_origins[1].own
    assert loop.withheld[0][1] == (f"it is computed from the outputs of {_label(before)} and this kernel's own "
                                   f"earlier call, and {ZEROS}; for {_label(before)}, {KERN_NOT_COMPUTED}")
    assert loop.own_carried == ()


@pytest.mark.parametrize("unroll", [1, 2])
def test_two_kernels_in_a_loop_feeding_each_other_withhold_what_they_carry(unroll):
    @jax.jit
    def f(n, x):
        return jax.lax.fori_loop(0, 4, lambda i, c: kern(n, kern(n, c)), x, unroll=unroll)

    caps = captured((f, (N, X)))
    assert len(caps) == 2 * unroll  # unrolled, each copy of the body is a kernel of its own
    for capture in caps:
        assert capture.operand_origins[1].kernels and not capture.operand_origins[1].own
        assert sorted(capture.withheld[0]) == [1] and capture.own_carried == ()


def _flag_branch(flag, i, c):
    return jax.lax.cond(flag[0] > i, lambda: kern(N, c), lambda: c)


@pytest.mark.parametrize("around, why", [
    (lambda flag, i, c: _flag_branch(flag, i, c),
     "the branch index of a conditional around it, inside the outermost loop, depends on argument 1 of jit_f"),
    (lambda flag, i, c: jax.lax.fori_loop(0, flag[0], lambda j, d: kern(N, d), c),
     "the condition of a loop around it, inside the outermost loop, depends on argument 1 of jit_f"),
])
def test_a_kernel_first_called_at_a_point_that_depends_on_data_withholds_its_own_output(around, why):
    @jax.jit
    def f(x, flag):
        return jax.lax.fori_loop(0, 3, lambda i, c: around(flag, i, c), x)

    [loop] = captured((f, (X, jnp.array([2], jnp.int32))))
    assert loop.operand_origins[1].own and not loop.operand_origins[1].kernels
    assert loop.earlier_calls == why
    assert loop.withheld[0][1] == (f"it is computed from the outputs of this kernel's own earlier call, and {ZEROS}; "
                                   f"its first call on a device may come after another call of it, since {why}")
    assert loop.own_carried == ()


def test_a_kernel_first_called_on_some_devices_only_withholds_its_own_output():
    m = mesh((2,))

    def per_device(x):
        # Device 1 skips the first layer: its first call could receive device 0's first output.
        def layer(i, c):
            y = jax.lax.cond(jax.lax.axis_index("x") <= i, lambda: kern(N, c), lambda: c)
            return jax.lax.ppermute(y, "x", [(0, 1), (1, 0)])

        return jax.lax.fori_loop(0, 2, layer, x)

    f = jax.jit(jax.shard_map(per_device, mesh=m, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    [loop] = captured((f, (jnp.ones((16, 128), jnp.float32),)))
    assert loop.earlier_calls == ("the branch index of a conditional around it, inside the outermost loop, depends "
                                  "on stablehlo.partition_id, whose value differs between devices")
    assert {d: sorted(w) for d, w in loop.withheld.items()} == {0: [1], 1: [1]}


@pytest.mark.parametrize("around", [
    lambda i, c: jax.lax.cond(i == 1, lambda: kern(N, c), lambda: c),  # first called in the second iteration
    lambda i, c: jax.lax.fori_loop(0, 2, lambda j, d: kern(N, d), c),  # a loop of a fixed length inside
])
def test_a_kernel_first_called_at_the_same_point_on_every_device_uses_its_first_calls_value(around):
    m = mesh((2,))
    per_device = lambda x: jax.lax.fori_loop(0, 3, around, x)  # noqa: E731
    f = jax.jit(jax.shard_map(per_device, mesh=m, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    [loop] = captured((f, (jnp.ones((16, 128), jnp.float32),)))
    assert loop.operand_origins[1].own and loop.earlier_calls is None
    assert loop.withheld == {} and loop.own_carried == (1,) and sorted(loop.operand_values) == [0, 1]


def test_an_own_output_first_called_after_an_earlier_runs_kernel_comes_from_the_arguments():
    @jax.jit
    def other(n, x):
        return kern(n, x)

    @jax.jit
    def f(n, x):
        return jax.lax.fori_loop(0, 3, lambda i, c: kern(n, c), x)

    first, loop = captured((other, (N, X)), (f, (N, X)))
    assert loop.earlier_calls is None and loop.operand_origins[1].own
    assert loop.withheld[0][1].startswith(f"it comes from argument 1 of jit_f, and {_label(first)} ran in an earlier")
    assert loop.own_carried == ()


def test_a_loop_result_depends_on_the_loop_condition():
    @jax.jit
    def f(n, x):
        limit = to_count(kern(n, x))[0]  # the trip count comes from a kernel's output
        m = jax.lax.while_loop(lambda c: c[0] < limit, lambda c: c + 1, n)
        return kern(m, x)

    first, second = captured((f, (N, X)))
    assert second.operand_origins[0].kernels == (_label(first),)


def test_a_branch_chosen_by_a_kernels_output_withholds_its_value():
    @jax.jit
    def f(n, x):
        flag = to_count(kern(n, x))[0] > 0
        m = jax.lax.cond(flag, lambda: n + 1, lambda: n)
        return kern(m, x)

    first, second = captured((f, (N, X)))
    assert second.operand_origins[0].kernels == (_label(first),)


def test_a_kernel_under_a_branch_depends_on_what_chose_the_branch():
    @jax.jit
    def f(n, x):
        y = kern(n, x)
        return jax.lax.cond(to_count(y)[0] > 0, lambda: kern(n, x), lambda: x)

    first, second = captured((f, (N, X)))
    assert second.operand_origins[0].kernels == (_label(first),)
    assert "argument 0 of jit_f" in second.operand_origins[0].outside


def test_a_shard_map_region_maps_its_arguments_to_the_programs():
    m = mesh((4,))

    def per_device(n, x):
        return kern(n, kern(n, x))

    f = jax.jit(jax.shard_map(per_device, mesh=m, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False))
    first, second = captured((f, (jnp.arange(4, dtype=jnp.int32), jnp.ones((32, 128), jnp.float32))))
    assert second.operand_origins[0] == OperandOrigin(outside=("argument 0 of jit_per_device",))
    assert sorted(second.operand_values) == [0, 1, 2, 3]
    assert {d: sorted(w) for d, w in second.withheld.items()} == {d: [1] for d in range(4)}
    assert [int(second.operand_values[d][0][0]) for d in range(4)] == [0, 1, 2, 3]


def test_an_argument_is_withheld_after_a_kernel_of_an_earlier_run():
    @jax.jit
    def f1(n, x):
        return kern(n, x)

    @jax.jit
    def f2(n, x):
        return kern(n + 1, x)

    first, second = captured((f1, (N, X)), (f2, (N, X)))
    assert first.withheld == {}
    assert second.ran_before[0].startswith(f"{_label(first)} ran in an earlier run of a program")
    assert sorted(second.withheld[0]) == [0, 1]
    assert second.withheld[0][0].startswith(f"it comes from argument 0 of jit_f2, and {_label(first)} ran in an ")


def test_a_kernel_first_run_in_a_programs_second_run_is_after_the_first_runs_kernels():
    @jax.jit
    def f(n, x):
        y = kern(n, x)
        return jax.lax.cond(n[0] > 3, lambda: kern(n, y), lambda: y)

    first, second = captured((f, (N, X)), (f, (N + 1, X)))  # the branch's kernel runs only the second time
    assert sorted(first.operand_values) == sorted(second.operand_values) == [0]
    assert first.withheld == {}
    assert _label(first) in second.ran_before[0]
    assert sorted(second.withheld[0]) == [0, 1]
    assert "argument 0 of jit_f" in second.withheld[0][0]


def test_later_runs_of_a_program_are_seen_although_jax_would_take_its_fast_path():
    @jax.jit
    def g(n, x):
        return jax.lax.cond(n[0] > 3, lambda: kern(n, x), lambda: x)

    @jax.jit
    def f(n, x):
        return kern(n, x)

    # g's kernel first runs in g's third call (through JAX's C++ dispatch, were it kept),
    # after f's kernel ran: g's arguments may be f's zeros by then.
    in_g, in_f = captured((g, (N, X)), (f, (N, X)), (g, (N, X)), (g, (N + 1, X)))
    assert sorted(in_g.operand_values) == sorted(in_f.operand_values) == [0]
    assert in_f.withheld == {}
    assert in_g.ran_before[0].startswith(f"{_label(in_f)} ran in an earlier run of a program")
    assert sorted(in_g.withheld[0]) == [0, 1]


def test_a_kernel_whose_runs_are_not_seen_counts_as_run_before_every_later_program():
    m = mesh((2, 2), ("x", "y"))
    # Manual over x only: no per-device callback, so when this kernel runs is not seen.
    partly_manual = jax.jit(jax.shard_map(lambda n, x: kern(n, x), mesh=m, in_specs=(P("x"), P("x")),
                                          out_specs=P("x"), axis_names={"x"}, check_vma=False))

    @jax.jit
    def f(n, x):
        return kern(n, x)

    unseen, later = captured((partly_manual, (jnp.arange(2, dtype=jnp.int32), jnp.ones((16, 128), jnp.float32))),
                             (f, (N, X)))
    assert unseen.operand_values == {}
    assert later.ran_before[0] == (f"{_label(unseen)} is a kernel semcheck saw compiled but cannot see run, so it "
                                   f"may have run before, and {ZEROS}")
    assert sorted(later.withheld[0]) == [0, 1]


def test_a_run_inside_another_makes_runs_indistinguishable_from_then_on():
    @jax.jit
    def inner(n, x):
        return kern(n, x)

    def host(n):
        jax.block_until_ready(inner(jnp.asarray(n), X))  # a run while the outer one is in flight

    @jax.jit
    def outer(n, x):
        jax.debug.callback(host, n)
        return kern(n, x)

    @jax.jit
    def later(n, x):
        return kern(n, x)

    from semcheck.frontends import operands

    in_outer, in_inner, in_later = captured((outer, (N, X)), (later, (N, X)))
    assert operands._runs.overlapped
    assert in_inner.withheld == {}  # the first kernel to run at all
    for capture in (in_outer, in_later):
        assert "semcheck cannot tell whether in an earlier run of a program" in capture.ran_before[0]
        assert sorted(capture.withheld[0]) == [0, 1]


# --- the walk on modules written by hand ----------------------------------------------------------


def _walk(text: str):
    from semcheck.jax_compat import jax_internal

    mlir = jax_internal("mlir")
    ir = jax_internal("mlir_ir")
    context = mlir.make_ir_context()
    module = ir.Module.parse(text, context=context)
    ops = {}
    stack = [module.body]
    while stack:
        block = stack.pop()
        for op in block.operations:
            op = op.operation
            if "tag" in op.attributes:
                ops[op.attributes["tag"].value] = op
            for region in op.regions:
                stack.extend(region.blocks)
    return _ModuleWalk(module), ops, context


def test_an_argument_of_a_function_nothing_calls_is_unresolved():
    walk, ops, context = _walk("""
      func.func public @main(%a: tensor<i32>) -> tensor<i32> {
        return %a : tensor<i32>
      }
      func.func private @orphan(%b: tensor<i32>) -> tensor<i32> {
        %0 = stablehlo.add %b, %b {tag = "use"} : tensor<i32>
        return %0 : tensor<i32>
      }""")
    with context:
        [origin] = walk.origins([ops["use"].result], [])
    assert origin.unresolved == "an argument of the function @orphan, which no func.call in the jitted program calls"
    kernel = _capture_with(origin)
    decide_withheld([kernel])
    assert "could not follow where it comes from" in kernel.withheld[0][0]


def test_an_argument_of_a_called_function_is_what_its_call_sites_pass():
    walk, ops, context = _walk("""
      func.func public @main(%a: tensor<i32>) -> tensor<i32> {
        %c = stablehlo.constant {tag = "zeros"} dense<0> : tensor<i32>
        %0 = func.call @helper(%c) : (tensor<i32>) -> tensor<i32>
        %1 = func.call @helper(%a) : (tensor<i32>) -> tensor<i32>
        return %1 : tensor<i32>
      }
      func.func private @helper(%b: tensor<i32>) -> tensor<i32> {
        %0 = stablehlo.negate %b {tag = "use"} : tensor<i32>
        return %0 : tensor<i32>
      }""")
    walk.add_output(ops["zeros"].result, 0, 0, "producer")
    with context:
        [origin] = walk.origins([ops["use"].result], [])
    assert origin == OperandOrigin(kernels=("producer",), outside=("argument 0 of the jitted program",))


def test_a_while_body_argument_is_the_entering_or_the_yielded_value():
    walk, ops, context = _walk("""
      func.func public @main(%a: tensor<i32>, %z: tensor<i32>) -> tensor<i32> {
        %c = stablehlo.constant {tag = "zeros"} dense<0> : tensor<i32>
        %0:2 = stablehlo.while(%i = %a, %j = %z) : tensor<i32>, tensor<i32>
          cond {
            %p = stablehlo.compare LT, %i, %i : (tensor<i32>, tensor<i32>) -> tensor<i1>
            stablehlo.return %p : tensor<i1>
          } do {
            %u = stablehlo.add %j, %j {tag = "use"} : tensor<i32>
            stablehlo.return %i, %c : tensor<i32>, tensor<i32>
          }
        return %0#0 : tensor<i32>
      }""")
    walk.add_output(ops["zeros"].result, 0, 0, "producer")
    with context:
        [origin] = walk.origins([ops["use"].result], [])
    assert origin == OperandOrigin(kernels=("producer",), outside=("argument 1 of the jitted program",))


def test_a_kernel_in_a_function_called_from_two_sites_may_be_fed_by_its_other_call():
    walk, ops, context = _walk("""
      func.func public @main(%a: tensor<i32>) -> tensor<i32> {
        %0 = func.call @layer(%a) : (tensor<i32>) -> tensor<i32>
        %1 = stablehlo.while(%i = %0) : tensor<i32>
          cond {
            %p = stablehlo.compare LT, %i, %i : (tensor<i32>, tensor<i32>) -> tensor<i1>
            stablehlo.return %p : tensor<i1>
          } do {
            %2 = func.call @layer(%i) : (tensor<i32>) -> tensor<i32>
            stablehlo.return %2 : tensor<i32>
          }
        return %1 : tensor<i32>
      }
      func.func private @layer(%b: tensor<i32>) -> tensor<i32> {
        %0 = stablehlo.negate %b {tag = "kernel"} : tensor<i32>
        return %0 : tensor<i32>
      }""")
    with context:
        result = ops["kernel"].result
        [origin] = walk.origins([ops["kernel"].operands[0]], [result])
        assert origin == OperandOrigin(outside=("argument 0 of the jitted program",), own=True)
        assert walk.earlier_calls([result]) == "it is in the function @layer, which 2 func.call sites in the jitted program call"


def _capture_with(origin: OperandOrigin):
    from semcheck.lower import KernelCapture

    capture = KernelCapture("pallas_call", {}, 1)
    capture.operand_origins = (origin,)
    capture.operand_values = {0: {0: np.zeros(1, np.int32)}}
    return capture


# --- what the lowering makes of it -------------------------------------------------------------------


def count_kernel(n_ref, o_ref, credits):
    pl.semaphore_signal(credits, jnp.clip(n_ref[0], 0, 4))
    pl.semaphore_wait(credits, 4)
    o_ref[0] = n_ref[0]


def counted(n):
    return pl.pallas_call(
        count_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, in_specs=[],
                                               out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
                                               scratch_shapes=[pltpu.SemaphoreType.REGULAR]))(n)


@pytest.mark.parametrize("chained, inputs", [(False, 0), (True, 1)])
def test_a_withheld_scalar_prefetch_element_is_an_input_and_a_note_says_why(chained, inputs):
    def f(n):
        first = counted(n)
        # through floats: computed from the output by an op semcheck does not follow, where the
        # output itself, or integer arithmetic on it, would be handed on
        # (test_an_operand_that_is_exactly_..., tests/test_placing.py).
        return counted(first.astype(jnp.float32).astype(jnp.int32) if chained else n)

    protocols, errors = lower_captures(capture_function(f, jnp.array([4], jnp.int32), operand_values=True))
    assert not errors
    second = protocols[-1]
    assert len(second.inputs) == inputs
    result = check_protocol(second)
    assert result.verdict.value == ("violation" if chained else "safe")
    assert result.values.withheld == (("n_ref",) if chained else ())
    assert text.values_lines(result) == (
        ["  values: over ranges n_ref[0] any int32; not as passed n_ref (an earlier kernel's output may reach them)"]
        if chained else ["  values: as the script passed n_ref"])
    withheld = [note for note in second.notes if note.startswith("the values the script passed are not used for")]
    if chained:
        assert withheld == [
            f"the values the script passed are not used for n_ref on device 0 (it is computed from the outputs of "
            f"count_kernel (called at {_call_line()}), and {ZEROS}; for count_kernel (called at {_call_line()}), "
            f"{COUNTED_NOT_COMPUTED}; semcheck's lowering of count_kernel (called at {_call_line()}) hands nothing of "
            f"it on: stablehlo.convert at tests/test_provenance.py:{f.__code__.co_firstlineno + 5} converts int32 to "
            "float32, which may change its values): such an operand holds what the kernel's own "
            "stores define, and a scalar-prefetch element it reads is an input over its type (docs/data-evaluation.md)"
        ]
        assert any("is a scalar-prefetch operand whose script value is not known (the values the capture saw of "
                   "n_ref on device 0 are not used: it is computed from the outputs of count_kernel" in n for n in second.notes)
    else:
        assert withheld == []


def test_an_operand_that_is_exactly_an_earlier_kernels_output_starts_with_what_its_lowering_wrote():
    """count_kernel stores its count into its SMEM output (o_ref[0] = n_ref[0]); semcheck's
    lowering of it knows that value (4), and the next call, whose operand is exactly that
    output, starts with it (lower/produced.py): no input, safe, and a note says what it rests on."""
    def f(n):
        return counted(counted(n))

    protocols, errors = lower_captures(capture_function(f, jnp.array([4], jnp.int32), operand_values=True))
    assert not errors
    first, second = protocols
    assert second.inputs == () and second.withheld == ()
    assert [(fed.buffer, fed.producer) for fed in second.fed] == [("n_ref", f"count_kernel (called at {_call_line()})")]
    result = check_protocol(second)
    assert result.verdict.value == "safe"
    assert text.values_lines(result) == [
        f"  values: as semcheck's lowering of count_kernel (called at {_call_line()}) computed n_ref"]
    assert any(n.startswith("the values of n_ref (1 of 1 elements known) from the outputs of count_kernel") for n in second.notes)


@pytest.mark.parametrize("branched", [False, True])
def test_a_layer_loops_carried_count_is_checked_as_its_first_call_received_it(branched):
    """count_kernel passes its count on (o_ref[0] = n_ref[0]) and the layer loop carries it
    into the next call: the first call receives the script's 4 (safe), later calls the kernel's
    own output, zeros in the capture. Under a conditional decided by data inside the loop, the
    first call may come after another, so the count is an input over int32 (a violation)."""
    def f(n, flag):
        layer = (lambda i, c: jax.lax.cond(flag[0] > i, counted, lambda c: c, c)) if branched else \
            (lambda i, c: counted(c))
        return jax.lax.fori_loop(0, 3, layer, n)

    [protocol], errors = lower_captures(capture_function(f, jnp.array([4], jnp.int32), jnp.array([2], jnp.int32),
                                                         operand_values=True))
    assert not errors
    result = check_protocol(protocol)
    assert result.verdict.value == ("violation" if branched else "safe")
    assert len(protocol.inputs) == (1 if branched else 0)
    carried = [note for note in protocol.notes if note.startswith("the values the script passed of n_ref are checked")]
    withheld = [note for note in protocol.notes if note.startswith("the values the script passed are not used for")]
    if branched:
        assert carried == [] and len(withheld) == 1
        assert ("n_ref on device 0 (it is computed from the outputs of this kernel's own earlier call, and "
                f"{ZEROS}; its first call on a device may come after another call of it, since the branch index "
                "of a conditional around it, inside the outermost loop, depends on argument 1 of ") in withheld[0]
        assert text.values_lines(result) == [
            "  values: over ranges n_ref[0] any int32; not as passed n_ref (an earlier kernel's output may reach them)"]
    else:
        assert withheld == [] and carried == [
            "the values the script passed of n_ref are checked as the kernel's first call on each device received "
            "them, which no call of the kernel can have fed (every device calls it first at the same point of the "
            "program); later calls may receive values computed from its own earlier output, carried round the loop "
            "around it, which semcheck's capture replaces with zeros: the check covers the first call "
            "(docs/data-evaluation.md)"]
        assert text.values_lines(result) == ["  values: as the script passed n_ref"]


def test_a_gpu_kernels_device_id_from_an_earlier_kernels_output_is_an_error_that_says_why():
    m = mesh((2,))

    def producer(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def consumer(x_ref, peer_ref, o_ref, stage):
        stage[...] = x_ref[...]
        plgpu.copy_smem_to_gmem(stage, plgpu.remote_ref(o_ref, peer_ref[0]))
        plgpu.wait_smem_to_gmem(0)

    def per_device(x, peer, chained):
        peers = plgpu.kernel(producer, out_type=jax.ShapeDtypeStruct(peer.shape, peer.dtype))(peer) if chained else peer
        return plgpu.kernel(consumer, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                            scratch_types=[plgpu.SMEM((8, 128), jnp.float32)])(x, peers)

    x, peer = jnp.ones((16, 128), jnp.float32), jnp.asarray(np.array([1, 0], np.int32))
    for chained in (False, True):
        fn = jax.shard_map(lambda a, b, c=chained: per_device(a, b, c), mesh=m, in_specs=(P("x"), P("x")),
                           out_specs=P("x"), check_vma=False)
        protocols, errors = lower_captures(capture_function(fn, x, peer, operand_values=True))
        if not chained:
            assert not errors and len(protocols) == 1
            continue
        [error] = [e.to_load_error() for e in errors]
        assert isinstance(error, LoadError)
        assert "the values the capture saw of peer_ref on device 0 are not used: it is computed from the outputs " \
               "of producer" in error.message, error.message
        assert "proves them exact" not in error.message  # a GPU kernel keeps zeros, and the proof says nothing


def test_a_grid_extent_from_an_earlier_kernels_output_is_an_error_that_says_why():
    def sized(n, x):
        return pl.pallas_call(copy_block, grid=(n[0],), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[pl.BlockSpec((8, 128), lambda i: (0, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)))(x)

    _, errors = lower_captures(capture_function(lambda n, x: sized(counted(n), x), N, X, operand_values=True))
    [error] = [e.to_load_error() for e in errors]
    assert "has dimensions known only at run time (0), and their values cannot be used: the values the capture saw " \
           "of operand 0 on device 0 are not used: it is computed from the outputs of count_kernel" in error.message


def copy_block(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _label(capture) -> str:
    from semcheck.frontends.provenance import kernel_label

    return kernel_label(capture)


def _call_line() -> str:
    from semcheck import ir

    import inspect

    source, start = inspect.getsourcelines(counted)
    line = start + next(k for k, text in enumerate(source) if "pl.pallas_call(" in text)
    return f"{ir.display_path(__file__)}:{line}"


# A kernel that writes its output only under a condition its inputs never meet: on a chip
# the output holds whatever was in memory. A kernel gated by it must be checked for every
# value (the review of 2026-12-07 found a capture that took JAX's HLO interpreter's fill
# values for such an output as the script's, and called this pair safe).
def _writes_nothing_here(x_ref, o_ref):
    @pl.when(x_ref[0, 0] > 100)
    def _():
        o_ref[...] = x_ref[...]


def _copies_unwaited_when_told(n_ref, x_ref, o_ref, sem):
    @pl.when(n_ref[0] > 0)
    def _():
        pltpu.make_async_copy(x_ref, o_ref, sem).start()  # never waited


def _gated_by_an_unwritten_output(x):
    n = pl.pallas_call(_writes_nothing_here, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)[0, :1]
    return pl.pallas_call(
        _copies_unwaited_when_told, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA]))(n, x)


def test_a_kernel_gated_by_an_output_its_producer_may_not_write_is_checked_for_every_value():
    """The proof rejects the producer: its only store is under a `pl.when`, which counts none."""
    captures = capture_function(_gated_by_an_unwritten_output, jnp.ones((8, 128), jnp.int32), operand_values=True)
    assert not captures[0].computed and captures[0].not_computed.rule is Rule.NOT_WRITTEN_WHOLE
    protocols, errors = lower_captures(captures)
    assert not errors
    result = check_protocol(protocols[-1])
    assert result.verdict.value == "violation"
    assert [v.kind for v in result.violations] == ["semaphore_leftover"]
    assert any("writes 0 of the 1,024 elements of its output 0 block by stores at its top level" in n
               for n in protocols[-1].notes)


# --- outputs of kernels proved exact, computed by the capture (semcheck/lower/exact_outputs.py) ---


def plus_one_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1


def plus_one(x):
    """A kernel whose every output element is stored at the top of its body from its input,
    with an integer add: the capture runs JAX's HLO interpreter of it instead of returning zeros."""
    return pl.pallas_call(plus_one_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


XI = jnp.ones((8, 128), jnp.int32)


def test_a_kernel_proved_exact_has_its_outputs_computed_and_they_withhold_nothing():
    @jax.jit
    def f(n, x, xi):
        return kern(to_count(plus_one(xi)), x)

    computed, second = captured((f, (N, X, XI)))
    assert computed.computed and computed.not_computed is None
    assert not second.computed  # its operands are in HBM (pl.ANY): zeros
    assert second.operand_origins[0].kernels == () and second.operand_origins[0].computed == (_label(computed),)
    assert second.withheld == {}
    assert second.operand_values[0][0].tolist() == [2 * 8 * 128]  # sum(x + 1) for x of ones


def test_a_computed_kernel_in_an_earlier_program_leaves_the_next_programs_arguments_the_scripts():
    first = jax.jit(plus_one)
    second = jax.jit(lambda n, x: kern(n, x))
    computed, after = captured((first, (XI,)), (second, (N, X)))
    assert computed.computed
    assert after.ran_before == {} and after.withheld == {}
    assert after.computed_earlier == (_label(computed),)


def test_a_kernel_with_a_semaphore_still_gets_zeros_and_withholds_what_it_feeds():
    @jax.jit
    def f(n):
        return counted(to_count(counted(n)))

    first, second = captured((f, (jnp.array([4], jnp.int32),)))
    assert not first.computed and first.not_computed.rule is Rule.MEMORY_SPACE
    assert second.operand_origins[0].kernels == (_label(first),) and 0 in second.withheld[0]


def test_a_float_add_is_not_exact_so_its_outputs_stay_zeros_and_the_note_names_it():
    @jax.jit
    def f(n, x):
        return kern(to_count(plus_one(x)), x)

    producer, second = captured((f, (N, X)))
    assert not producer.computed and producer.not_computed.rule is Rule.INEXACT
    assert second.withheld[0][0].endswith(f"for {_label(producer)}, semcheck computes a kernel's outputs only where "
                                          f"it proves them exact, and it has `add` on float32 at {_line_of('+ 1')}, "
                                          "which may round differently on a TPU")


def test_a_kernel_refused_in_an_earlier_program_says_why_in_the_next_programs_note():
    producer, after = captured((jax.jit(plus_one), (X,)), (jax.jit(lambda n, x: kern(n, x)), (N, X)))
    assert not producer.computed and producer.not_computed.rule is Rule.INEXACT
    assert after.ran_before[0] == (
        f"{_label(producer)} ran in an earlier run of a program, whose outputs may have become this program's "
        f"arguments ({ZEROS}; semcheck computes a kernel's outputs only where it proves them exact, and it has `add` "
        f"on float32 at {_line_of('+ 1')}, which may round differently on a TPU)")


def sized_copy_kernel(n_ref, x_ref, o_ref, sem):
    copy = pltpu.make_async_copy(x_ref.at[pl.ds(0, n_ref[0])], o_ref.at[pl.ds(0, n_ref[0])], sem)
    copy.start()
    copy.wait()


def test_a_copy_sized_by_a_computed_kernels_output_is_checked_for_that_size_and_a_note_says_so():
    """Before, the size was an input over int32 and the check a violation (invalid_region)."""
    def sized_copy(n, x):
        return pl.pallas_call(
            sized_copy_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA]))(n, x)

    def f(x):
        rows = plus_one(jnp.full((8, 128), 2, jnp.int32))[0, :1]  # 3
        return sized_copy(rows, x)

    protocols, errors = lower_captures(capture_function(f, X, operand_values=True))
    assert not errors
    second = protocols[-1]
    assert second.inputs == ()
    result = check_protocol(second)
    assert result.verdict.value == "safe", result.violations
    assert text.values_lines(result) == ["  values: as the script passed n_ref"]
    [note] = [n for n in second.notes if "may be computed from the outputs of" in n]
    assert note.startswith("the values of n_ref may be computed from the outputs of plus_one_kernel")
    assert "HLO interpreter of the kernel on the CPU" in note and "having proved from its body" in note
    assert "which flushes f32 subnormals to zero (JAX 0.10.2: jax.jit(lambda x: x > 0)(1e-40) is False)" in note


# A router's top-2 by repeated max and mask (as tpu-inference's fused MoE v2 `_select_kernel`):
# comparisons, selects, max and min, integer indices: every rule of the proof holds.
EXPERTS = 4


def _top2_kernel(x_ref, i_ref):
    x = jnp.where(jnp.isnan(x_ref[...]), -3.0e38, x_ref[...])
    iota = jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)
    for j in range(2):
        m = jnp.max(x, axis=1, keepdims=True)
        idx = jnp.min(jnp.where(x == m, iota, EXPERTS - 1), axis=1)
        i_ref[:, j] = idx
        x = jnp.where(iota == idx[:, None], -3.0e38, x)


def _top2(scores, kernel=_top2_kernel, *, rows=8, grid=(2,), index=lambda i: (i, 0), out_rows=None, scratch=(),
          vmapped=False):
    if vmapped:  # a pallas_call of one 8-row block, vmapped over the two blocks: grid (2, 1)
        one = functools.partial(_top2, kernel=kernel, grid=(1,), scratch=scratch)
        return jax.vmap(one)(scores.reshape(2, rows, EXPERTS)).reshape(2 * rows, 2)
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((out_rows or scores.shape[0], 2), jnp.int32), grid=grid,
        in_specs=[pl.BlockSpec((rows, EXPERTS), lambda i: (i, 0))], out_specs=pl.BlockSpec((rows, 2), index),
        scratch_shapes=list(scratch))(scores)


def _copies_routed(idx_ref, w_ref, o_ref, sem):
    """Copies the weights of the two experts row 0 is routed to: in range only for real top-k
    indices, and two different rows of `o_ref` (`o_ref.at[e]`) only where they differ."""
    copies = [pltpu.make_async_copy(w_ref.at[idx_ref[j]], o_ref.at[idx_ref[j]], sem.at[j]) for j in range(2)]
    for copy in copies:
        copy.start()
    for copy in copies:
        copy.wait()


def _routed(producer):
    def f(scores, w):
        idx = producer(scores)[0]
        return pl.pallas_call(
            _copies_routed, out_shape=jax.ShapeDtypeStruct(w.shape, w.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA((2,))]))(idx, w)
    return f


SCORES = jnp.array([[0.1, 0.7, 0.2, 0.0]] * 16, jnp.float32)
WEIGHTS = jnp.ones((EXPERTS, 8, 128), jnp.float32)


def _routed_check(producer):
    captures = capture_function(_routed(producer), SCORES, WEIGHTS, operand_values=True)
    protocols, errors = lower_captures(captures)
    assert not errors
    return captures[0], protocols[-1], check_protocol(protocols[-1])


def test_a_consumer_routed_by_a_top_k_proved_exact_is_checked_for_the_routing_it_computes():
    """Withheld, the indices are inputs over int32: a copy of expert 2**31-1 (invalid_region),
    as tpu-inference's MoE v2 at line 730. Computed (experts 1 and 2 of row 0), it is safe."""
    producer, consumer, result = _routed_check(_top2)
    assert producer.computed and producer.not_computed is None
    assert consumer.inputs == ()
    assert result.verdict.value == "safe", result.violations
    assert result.stats.states == 13
    [note] = [n for n in consumer.notes if "may be computed from the outputs of" in n]
    assert note.startswith("the values of idx_ref may be computed from the outputs of _top2_kernel (called at ")


def _writes_when(x_ref, i_ref):
    @pl.when(x_ref[0, 0] > 100.0)
    def _():
        _top2_kernel(x_ref, i_ref)


def _writes_one_column(x_ref, i_ref):
    i_ref[:, 0] = jnp.ones((8,), jnp.int32)


def _argmax(x_ref, i_ref):
    i_ref[...] = jnp.broadcast_to(jnp.argmax(x_ref[...], axis=1).astype(jnp.int32)[:, None], (8, 2))


# Indices the interpreter and a chip read differently (the review of 2026-12-07, /tmp/review2):
# JAX's HLO interpreter discharges a ref access to `lax.dynamic_slice` /
# `dynamic_update_slice`, which wrap a negative start and clamp a window to the block; Mosaic
# passes the index through and a chip reads or writes the memory beside the block. Each kernel
# below wrote its whole output with the top 2 first, so without the rules that refuse such an
# index it was computed, and its consumer called safe on the interpreter's values.
def _reads_input_at_a_computed_row(x_ref, i_ref):
    _top2_kernel(x_ref, i_ref)
    k = i_ref[0, 0]  # 1 here; on a chip's data any int32
    i_ref[...] = jnp.where(x_ref[pl.ds(k, 1), 0:2] >= -3.0e38, i_ref[...], 0)


def _stores_at_a_computed_row(x_ref, i_ref):
    _top2_kernel(x_ref, i_ref)
    k = i_ref[0, 0]
    i_ref[pl.ds(k, 1), :] = i_ref[0:1, :]


def _stores_rows_in_a_loop(x_ref, i_ref):
    _top2_kernel(x_ref, i_ref)

    def row(j, carry):
        i_ref[j, :] = i_ref[j, :]  # j is a loop index: computed at run time, nested
        return carry

    jax.lax.fori_loop(0, 8, row, 0)


def _stores_before_the_block(x_ref, i_ref):
    _top2_kernel(x_ref, i_ref)
    i_ref[-8, :] = i_ref[0, :]  # numpy's row 0; on a chip 8 rows before the block


def _reads_input_before_the_block(x_ref, i_ref):
    _top2_kernel(x_ref, i_ref)
    i_ref[...] = jnp.where(x_ref[-1, 0:2] >= -3.0e38, i_ref[...], 0)


def _reads_a_window_before_the_block(x_ref, i_ref):
    y = i_ref[pl.ds(-2, 2), :]  # numpy's slice(-2, 0) is empty: "all written"
    _top2_kernel(x_ref, i_ref)
    i_ref[...] = jnp.where(y[0:1, :] < 0, i_ref[...], 0)


def _stores_a_stride_past_the_block(x_ref, i_ref):
    _top2_kernel(x_ref, i_ref)
    i_ref[pl.ds(0, 5, stride=2), :] = jnp.ones((5, 2), jnp.int32)  # rows 0, 2, 4, 6 and 8


def _sums_floats(x_ref, i_ref):
    i_ref[...] = jnp.broadcast_to((jnp.sum(x_ref[...], axis=1, keepdims=True) > 0).astype(jnp.int32), i_ref.shape)


def _reads_scratch_first(x_ref, i_ref, s_ref):
    i_ref[...] = s_ref[...]


def _exponentiates(x_ref, i_ref):
    _top2_kernel(x_ref, i_ref)
    i_ref[...] = jnp.where(jnp.exp(x_ref[:, :2]) > 1.0, i_ref[...], 0)


REFUSED = {
    "conditional store": (_writes_when, {}, Rule.NOT_WRITTEN_WHOLE,
                          "its body writes 0 of the 16 elements of its output 0 block by stores at its top level"),
    "partial coverage": (_writes_one_column, {}, Rule.NOT_WRITTEN_WHOLE,
                         "its body writes 8 of the 16 elements of its output 0 block"),
    "float reduce_sum": (_sums_floats, {}, Rule.INEXACT, "it has `reduce_sum` on float32 at "),
    "scratch read before write": (_reads_scratch_first, {"scratch": [pltpu.VMEM((8, 2), jnp.int32)]},
                                  Rule.READ_UNWRITTEN, "it reads its scratch 0 at "),
    "padded input edge": (_top2_kernel, {"rows": 6, "grid": (3,), "out_rows": 18}, Rule.PADDED_EDGE,
                          "its input 0's shape (16, 4) is not a multiple of its block (6, 4)"),
    "unvisited block": (_top2_kernel, {"grid": (1,)}, Rule.UNVISITED_BLOCK,
                        "its output 0's block (1, 0) is visited by no grid step"),
    "revisited block": (_top2_kernel, {"index": lambda i: (0, 0)}, Rule.REVISITED_BLOCK,
                        "its output 0's block (0, 0) is visited by grid steps (0,) and (1,)"),
    "block index outside the array": (_top2_kernel, {"index": lambda i: (i + 1, 0)}, Rule.INDEX_OUT_OF_RANGE,
                                      "its output 0's index map gives block (2, 0) at grid step (1,), outside "
                                      "(2, 1) blocks"),
    "unlisted primitive": (_exponentiates, {}, Rule.UNLISTED, "it has `exp` at "),
    "argmax": (_argmax, {}, Rule.INEXACT, "which Mosaic lowers to `tpu.reduce_index`"),
    "a float op in an index map": (_top2_kernel, {"index": lambda i: ((i * 1.0).astype(jnp.int32), 0)}, Rule.INEXACT,
                                   "it has `convert_element_type` on int32 to float32 in its output 0's index map, "
                                   "which may round differently on a TPU"),
    "a vmapped grid": (_top2_kernel, {"vmapped": True}, Rule.GRID, "its grid (2, 1) has vmapped dimensions (0,)"),
    "an input read at a computed row": (_reads_input_at_a_computed_row, {}, Rule.DYNAMIC_INDEX,
                                        "it has `get` on its input 0 at an index computed at run time at "),
    "an output stored at a computed row": (_stores_at_a_computed_row, {}, Rule.DYNAMIC_INDEX,
                                           "it has `swap` on its output 0 at an index computed at run time at "),
    "rows stored in a loop": (_stores_rows_in_a_loop, {}, Rule.DYNAMIC_INDEX,
                              "it has `get` on its output 0 at an index computed at run time at "),
    "a negative static store": (_stores_before_the_block, {}, Rule.OUTSIDE_BLOCK,
                                "it has `swap` on its output 0 at index -8 in dimension 0, outside its block of "
                                "shape (8, 2) at "),
    "a negative static input read": (_reads_input_before_the_block, {}, Rule.OUTSIDE_BLOCK,
                                     "it has `get` on its input 0 at index -1 in dimension 0, outside its block of "
                                     "shape (8, 4) at "),
    "a window before the block, read before any store": (
        _reads_a_window_before_the_block, {}, Rule.OUTSIDE_BLOCK,
        "it has `get` on its output 0 at pl.ds(-2, 2, stride=1) in dimension 0 (elements -2 to -1), outside its block"),
    "a strided window past the block": (
        _stores_a_stride_past_the_block, {}, Rule.OUTSIDE_BLOCK,
        "it has `swap` on its output 0 at pl.ds(0, 5, stride=2) in dimension 0 (elements 0 to 8), outside its block"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_producer_failing_a_rule_of_the_proof_keeps_zeros_and_the_consumers_note_says_why(case):
    kernel, options, rule, why = REFUSED[case]
    producer, consumer, result = _routed_check(lambda s: _top2(s, kernel, **options))
    assert not producer.computed and producer.not_computed.rule is rule, producer.not_computed
    assert why in producer.not_computed.detail
    assert any(producer.not_computed.sentence() in n for n in consumer.notes)
    assert result.verdict.value == "violation"
    assert "invalid_region" in [v.kind for v in result.violations]


def _stages_in_scratch(x_ref, i_ref, s_ref):
    _top2_kernel(x_ref, s_ref)
    i_ref[...] = s_ref[...]  # read after a top-level store wrote it all at this step


def _rewrites_under_a_condition(x_ref, i_ref):
    _top2_kernel(x_ref, i_ref)

    @pl.when(i_ref[0, 0] >= 0)  # reads an output written whole before it
    def _():
        i_ref[...] = jnp.maximum(i_ref[...], 0)


def _reaches_the_last_row(x_ref, i_ref):
    _top2_kernel(x_ref, i_ref)
    i_ref[pl.ds(1, 4, stride=2), :] = i_ref[pl.ds(1, 4, stride=2), :]  # rows 1, 3, 5 and 7: inside
    i_ref[...] = jnp.where(x_ref[7, 0:2] >= -3.0e38, i_ref[...], 0)


ACCEPTED = {
    "scratch written before it is read": (_stages_in_scratch, {"scratch": [pltpu.VMEM((8, 2), jnp.int32)]}),
    "static windows that end on the block's last row": (_reaches_the_last_row, {}),
    "an output read in a condition after it is written whole": (_rewrites_under_a_condition, {}),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_a_producer_that_meets_every_rule_in_another_shape_is_computed_too(case):
    kernel, options = ACCEPTED[case]
    producer, consumer, result = _routed_check(lambda s: _top2(s, kernel, **options))
    assert producer.computed and producer.not_computed is None
    assert result.verdict.value == "safe", result.violations
    assert result.stats.states == 13


# The top 2 again, from a kernel that also takes scalar prefetch (a shift of the indices, as
# a router offsets its experts by a device's first one): the proof takes a scalar-prefetch
# operand as an input, read at static indices, never stored to and read by no index map.
def _top2_shifted_kernel(shift_ref, x_ref, i_ref):
    _top2_kernel(x_ref, i_ref)
    i_ref[...] = i_ref[...] + shift_ref[0]


def _top2_shifted(scores, kernel=_top2_shifted_kernel, *, shift=(0, 1), index=lambda i, shift_ref: (i, 0)):
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((scores.shape[0], 2), jnp.int32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(2,), in_specs=[pl.BlockSpec((8, EXPERTS), lambda i, shift_ref: (i, 0))],
            out_specs=pl.BlockSpec((8, 2), index)))(jnp.array(shift, jnp.int32), scores)


@pytest.mark.parametrize("shift, verdict, states", [(0, "safe", 13), (2, "violation", None)])
def test_a_producer_with_scalar_prefetch_proved_exact_routes_by_the_scripts_prefetch_values(shift, verdict, states):
    """Before, a kernel with scalar prefetch kept zeros (`Rule.GRID`): the indices were inputs
    over int32 and the check a violation for every shift. Computed, shift 0 routes row 0 to
    experts 1 and 2 (safe); shift 2 to experts 3 and 4, and expert 4 of 4 is `invalid_region`."""
    producer, consumer, result = _routed_check(lambda s: _top2_shifted(s, shift=(shift, 1)))
    assert producer.computed and producer.not_computed is None
    assert consumer.inputs == ()
    assert result.verdict.value == verdict, result.violations
    if states is not None:
        assert result.stats.states == states
    else:
        assert [v.kind for v in result.violations] == ["invalid_region"]
    [note] = [n for n in consumer.notes if "may be computed from the outputs of" in n]
    assert "a scalar-prefetch operand read at static indices" in note


def _reads_prefetch_at_a_computed_index(shift_ref, x_ref, i_ref):
    _top2_kernel(x_ref, i_ref)
    i_ref[...] = i_ref[...] + shift_ref[shift_ref[1]]  # 1 here: the interpreter clamps, a chip does not


def _reads_prefetch_before_it(shift_ref, x_ref, i_ref):
    _top2_kernel(x_ref, i_ref)
    i_ref[...] = i_ref[...] + shift_ref[-1]  # numpy's last element; on a chip the word before the array


def _stores_to_prefetch(shift_ref, x_ref, i_ref):
    _top2_shifted_kernel(shift_ref, x_ref, i_ref)
    shift_ref[1] = 0  # SMEM keeps it for the next step on a chip; the interpreter drops it


PREFETCH_REFUSED = {
    "a prefetch read at a computed index": (_reads_prefetch_at_a_computed_index, {}, Rule.DYNAMIC_INDEX,
                                            "it has `get` on its scalar prefetch 0 at an index computed at run time"),
    "a prefetch read before the array": (_reads_prefetch_before_it, {}, Rule.OUTSIDE_BLOCK,
                                         "it has `get` on its scalar prefetch 0 at index -1 in dimension 0, outside "
                                         "its block of shape (2,)"),
    "a store to prefetch": (_stores_to_prefetch, {}, Rule.WRITES_INPUT, "it stores to its scalar prefetch 0 at "),
    "an index map reading prefetch": (_top2_shifted_kernel, {"index": lambda i, shift_ref: (i + shift_ref[0], 0)},
                                      Rule.PREFETCH_INDEX_MAP, "its output 0's index map reads a scalar-prefetch "
                                                               "operand (which block a step holds depends on "
                                                               "run-time values)"),
}


@pytest.mark.parametrize("case", list(PREFETCH_REFUSED))
def test_a_producer_using_its_scalar_prefetch_beyond_static_reads_keeps_zeros_and_says_why(case):
    kernel, options, rule, why = PREFETCH_REFUSED[case]
    producer, consumer, result = _routed_check(lambda s: _top2_shifted(s, kernel, **options))
    assert not producer.computed and producer.not_computed.rule is rule, producer.not_computed
    assert why in producer.not_computed.detail
    assert any(producer.not_computed.sentence() in n for n in consumer.notes)
    assert result.verdict.value == "violation"
    assert "invalid_region" in [v.kind for v in result.violations]


def _gates_on_positive_scores(x_ref, i_ref):
    picks = jax.lax.broadcasted_iota(jnp.int32, (8, 2), 1) + 1
    i_ref[...] = jnp.where(x_ref[:, 0:2] > 0.0, picks, EXPERTS - 1)


def test_a_subnormal_score_compares_as_zero_in_the_computed_outputs_as_the_note_says():
    """The COMPUTED note's basis: XLA's CPU backend flushes f32 subnormals to zero, so 1e-40 > 0
    is False in the interpreter's outputs (experts 3 and 3), as on a TPU that flushes them; a
    CPU that compared them would pick experts 1 and 2."""
    captures = capture_function(_routed(lambda s: _top2(s, _gates_on_positive_scores)),
                                jnp.full((16, EXPERTS), 1e-40, jnp.float32), WEIGHTS, operand_values=True)
    assert captures[0].computed
    assert captures[-1].operand_values[0][0].tolist() == [EXPERTS - 1, EXPERTS - 1]


def test_a_jax_without_the_hlo_interpreter_keeps_zeros(monkeypatch):
    from semcheck import jax_compat

    monkeypatch.setitem(jax_compat.MODULES, "pallas_hlo_interpreter", ("jax._src.pallas.no_such_interpreter",))
    monkeypatch.delitem(jax_compat._loaded, "pallas_hlo_interpreter", raising=False)
    producer, consumer, result = _routed_check(_top2)
    assert not producer.computed and producer.not_computed.rule is Rule.NO_INTERPRETER
    assert result.verdict.value == "violation"


def _line_of(text_in_source: str) -> str:
    import inspect

    from semcheck import ir

    source, start = inspect.getsourcelines(plus_one_kernel)
    line = start + next(k for k, t in enumerate(source) if text_in_source in t)
    return f"{ir.display_path(__file__)}:{line}"


def test_an_operand_computed_from_an_earlier_kernels_output_by_integer_arithmetic_starts_with_its_value():
    """`counted(first + 1)`: count_kernel's lowering knows it stored 4, and the add is
    followed (frontends/placing.py), so the next call starts with 5: no input, safe."""
    def f(n):
        return counted(counted(n) + 1)

    protocols, errors = lower_captures(capture_function(f, jnp.array([4], jnp.int32), operand_values=True))
    assert not errors
    second = protocols[-1]
    assert second.inputs == ()
    assert any(n.startswith("the values of n_ref (1 of 1 elements known) from the outputs of count_kernel")
               and ", through stablehlo.add at tests/test_provenance.py:" in n for n in second.notes)
    assert check_protocol(second).verdict.value == "safe"
