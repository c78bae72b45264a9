"""Buffers and semaphores of a kernel that takes `*args` are named as the kernel names them
(lower/ref_names.py): by the locals it unpacks its arguments into, or the parameters of the
function it passes them on to; JAX's `args[3]` stays where the source does not say."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from semcheck import verify
from tests.tpu_kernels import hbm_call, line_of, mesh, protocols

DMA = pltpu.SemaphoreType.DMA
VMEM = pltpu.VMEM((8, 128), jnp.float32)


def names_of(kernel, scratch=(VMEM, DMA)):
    [p] = protocols(hbm_call(kernel, scratch=list(scratch)), mesh((1,)))
    return [b.name for b in p.buffers] + [s.name for s in p.semaphores]


def copy_through(x_ref, o_ref, staging, sem):
    pltpu.async_copy(x_ref, staging, sem).wait()
    pltpu.async_copy(staging, o_ref, sem).wait()


def unpacked_whole(*args):
    x_ref, o_ref, staging, sem = args
    copy_through(x_ref, o_ref, staging, sem)


def unpacked_with_a_named_head(x_ref, *refs):
    """A docstring before the unpacking."""
    o_ref, staging, sem = refs
    copy_through(x_ref, o_ref, staging, sem)


def unpacked_by_slices(*args):
    (x_ref, o_ref), rest = args[:2], args[2:]
    staging, sem = rest
    copy_through(x_ref, o_ref, staging, sem)


def unpacked_by_index_and_star(*args):
    _, o_ref, *scratch = args
    x_ref = args[0]
    sem = args[-1]
    copy_through(x_ref, o_ref, scratch[0], sem)


def _body(step, x_ref, o_ref, staging, sem):
    del step
    copy_through(x_ref, o_ref, staging, sem)


def passed_on(*args):
    @pl.loop(0, 1)
    def _(step):
        _body(step, *args)


def used_in_place(*args):
    pltpu.async_copy(args[0], args[2], args[3]).wait()
    pltpu.async_copy(args[2], args[1], args[3]).wait()


def unpacked_after_other_work(*args):
    pltpu.async_copy(args[0], args[2], args[3]).wait()
    x_ref, o_ref, staging, sem = args
    pltpu.async_copy(staging, o_ref, sem).wait()
    del x_ref


LOCAL = ["x_ref", "o_ref", "staging", "sem"]
JAX_OWN = ["args[0] (input)", "args[1] (output)", "args[2] (scratch)", "args[3] (scratch)"]


@pytest.mark.parametrize(
    "kernel, expected",
    [
        (unpacked_whole, LOCAL),
        (unpacked_with_a_named_head, LOCAL),
        (unpacked_by_slices, LOCAL),
        # scratch[0] is no local of its own, and `args[-1]` counts from an end semcheck
        # cannot know (JAX's `args[i]` counts the None elements it leaves out of the
        # jaxpr), so JAX's names stay; `_` names nothing.
        (unpacked_by_index_and_star, ["x_ref", "o_ref", "args[2] (scratch)", "args[3] (scratch)"]),
        (passed_on, LOCAL),
        (used_in_place, JAX_OWN),
        # Names bound after the kernel has begun its work are not read: the unpacking
        # is looked for at the top only.
        (unpacked_after_other_work, JAX_OWN),
    ],
)
def test_a_star_args_kernels_refs_take_the_names_its_source_gives_them(kernel, expected):
    assert names_of(kernel) == expected


def rebinds_a_local(*args):
    x_ref = args[0]
    o_ref = args[1]
    x_ref, sem = args[2], args[3]  # `x_ref` now names the staging buffer
    copy_through(args[0], o_ref, x_ref, sem)


def names_a_ref_after_a_parameter(x_ref, *refs):
    x_ref2, o_ref, x_ref, sem = x_ref, refs[0], refs[1], refs[2]  # `x_ref` again, for the staging buffer
    copy_through(x_ref2, o_ref, x_ref, sem)


@pytest.mark.parametrize(
    "kernel, expected",
    [
        (rebinds_a_local, ["args[0] (input)", "o_ref", "args[2] (scratch)", "sem"]),
        (names_a_ref_after_a_parameter, ["x_ref", "o_ref", "refs[1] (scratch)", "sem"]),
    ],
)
def test_a_name_the_source_gives_two_refs_names_neither(kernel, expected):
    """Refs are told apart by name: one name for two refs would make them one buffer (or one
    semaphore: a signal of one would satisfy a wait on the other) to the check."""
    names = names_of(kernel)
    assert names == expected
    assert len(set(names)) == len(names)


def _first(kernel_a, kernel_b, pick):
    return kernel_a if pick else kernel_b


def _variant_a(x_ref, o_ref, staging, sem):
    copy_through(x_ref, o_ref, staging, sem)


def _variant_b(x_ref, o_ref, buffer, sem):
    copy_through(x_ref, o_ref, buffer, sem)


def passed_on_to_one_of_two(*args):
    body = _variant_a if args else _variant_b
    body(*args)


def test_a_ref_passed_on_to_either_of_two_functions_is_named_where_both_agree():
    """flash_attention's kernel picks its body by a static flag and passes `*args` on to
    it (jax/experimental/pallas/ops/tpu/flash_attention.py, JAX 0.10.2); only a
    conditional expression of functions is no plain name, so the names come from no callee
    (JAX's stay), and a name bound to two functions that disagree stays JAX's too."""
    assert names_of(passed_on_to_one_of_two) == JAX_OWN


def passed_on_through_a_local(*args):
    body = _variant_a
    if not args:
        body = _variant_b
    body(*args)


def test_a_local_bound_to_several_functions_names_only_what_they_all_agree_on():
    assert names_of(passed_on_through_a_local) == ["x_ref", "o_ref", "args[2] (scratch)", "sem"]


def scoped_star(*args):
    def scoped(*scratch):
        staging, sem = scratch
        copy_through(args[0], args[1], staging, sem)

    pl.run_scoped(scoped, VMEM, DMA)


def test_run_scoped_allocations_of_a_star_body_take_its_locals():
    assert names_of(scoped_star, scratch=()) == ["args[0] (input)", "args[1] (output)", "staging", "sem"]


def racy(*args):
    """Both copies write `o_ref` and neither is waited for before the other starts."""
    x_ref, o_ref, staging, sem = args
    del staging
    first = pltpu.make_async_copy(x_ref, o_ref, sem)
    second = pltpu.make_async_copy(x_ref, o_ref, sem)
    first.start()
    second.start()
    first.wait()
    second.wait()


def test_a_report_on_a_star_args_kernel_names_its_locals():
    """What the author reads: the race names `o_ref`, not `args[1]`."""
    m = mesh((1,))
    fn = jax.shard_map(hbm_call(racy, scratch=[VMEM, DMA]), mesh=m, in_specs=jax.P("x"), out_specs=jax.P("x"),
                       check_vma=False)
    [result] = verify(fn, jnp.ones((8, 128), jnp.float32))
    text = str(result)
    assert result.verdict.value == "violation"
    assert "o_ref" in text and "args[" not in text


def test_the_wheels_flash_attention_refs_are_named_by_the_body_it_passes_them_to():
    """jax/experimental/pallas/ops/tpu/flash_attention.py (JAX 0.10.2): the kernel takes
    `(q_tile_ref, *args, **kwargs)`, picks one of two bodies by a static flag and calls it
    with `*args`; the absent inputs (bias, segment ids) are None, left out of the jaxpr, so
    the output is JAX's `args[5]`."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    from semcheck.frontends.capture import capture_function, lower_captures

    sizes = fa.BlockSizes(
        block_q=128, block_k_major=128, block_k=128, block_b=1, block_q_major_dkv=128, block_k_major_dkv=128,
        block_k_dkv=128, block_q_dkv=128, block_k_major_dq=128, block_k_dq=128, block_q_dq=128,
    )
    q = jnp.ones((1, 1, 128, 128), jnp.float32)
    found, errors = lower_captures(capture_function(lambda q, k, v: fa.flash_attention(q, k, v, block_sizes=sizes), q, q, q))
    assert not errors
    assert [b.name for b in found[0].buffers] == ["q_tile_ref", "k_tile_ref", "v_tile_ref", "o_tile_ref"]


def gpu_body_with_star(x_ref, *refs):
    o_ref, done = refs
    o_ref[...] = x_ref[...]
    pl.semaphore_signal(done, 1)
    pl.semaphore_wait(done, 1)


def test_a_gpu_kernels_star_body_called_through_plgpu_kernels_wrapper_takes_its_locals():
    """plgpu.kernel calls the body as `body(*refs)`, so the jaxpr says `refs[0]`,
    `refs[1]`, ...: position i of the body's arguments, here the unpacked `*refs` after
    its named `x_ref`."""
    from tests.test_gpu_lowering import REGULAR, gpu_call, protocol

    p = protocol(gpu_call(gpu_body_with_star, scratch=[REGULAR]))
    names = {b.name for b in p.buffers} | {d.name for d in p.semaphores}
    assert {"x_ref", "o_ref", "done"} <= names
    assert not any("refs[" in n for n in names)


def prefetching(*args):
    flags, rest = args[0], args[1:]
    pl.semaphore_signal(rest[2], flags[0] + 1)
    pl.semaphore_wait(rest[2], 1)


def test_a_ref_the_source_does_not_name_says_its_group_of_the_pallas_call():
    """`flags` is a local; the others are reached only through `rest[i]`, so JAX's names
    stay, with the pallas_call group each belongs to (grid spec: one scalar-prefetch
    operand, an input, an output, a scratch semaphore)."""
    from tests.test_tpu_lowering import _prefetch_call

    [p] = protocols(_prefetch_call(prefetching), mesh((1,)))
    assert [b.name for b in p.buffers] + [s.name for s in p.semaphores] == [
        "flags", "args[1] (input)", "args[2] (output)", "args[3] (scratch)"]


def copies_over_a_copy_in_flight(x_ref, o_ref, staging, sem):
    """The second `pltpu.sync_copy` writes `staging` while the copy out of it is in flight."""
    pltpu.sync_copy(x_ref, staging)  # first sync_copy
    out = pltpu.make_async_copy(staging, o_ref, sem)
    out.start()
    pltpu.sync_copy(x_ref, staging)  # second sync_copy
    out.wait()


def test_the_semaphore_a_jax_helper_allocates_is_named_by_the_call_and_line_the_author_wrote():
    """`pltpu.sync_copy` allocates its DMA semaphore in a run_scoped of its own, which JAX
    names `sem` after the helper's parameter: the trace said `sem#2@d0`, a name the kernel
    has nowhere (and beside the kernel's own `sem`, one that reads as the kernel's)."""
    from semcheck.report import text

    fn = jax.shard_map(hbm_call(copies_over_a_copy_in_flight, scratch=[VMEM, DMA]), mesh=mesh((1,)),
                       in_specs=jax.P("x"), out_specs=jax.P("x"), check_vma=False)
    [result] = verify(fn, jnp.ones((8, 128), jnp.float32))
    first, second = line_of(__file__, "# first sync_copy"), line_of(__file__, "# second sync_copy")
    [violation] = result.errors
    assert violation.kind == "data_race"
    report = text.render([result], verbose=True)
    trace = [step.text for step in violation.trace]
    assert trace[1:4] == [
        f"start DMA x_ref[0:8, 0:128] -> staging[0:8, 0:128] (on completion: recv the DMA semaphore of "
        f"`pltpu.sync_copy` at line {first} +128)",
        f"copy started at line {first} lands (receive side): the DMA semaphore of `pltpu.sync_copy` at line "
        f"{first}: 0 -> 128",
        f"dma_wait (recv) the DMA semaphore of `pltpu.sync_copy` at line {first} for 128 units of 32 bytes (128 -> 0)",
    ]
    assert f"recv the DMA semaphore of `pltpu.sync_copy` at line {second} +128" in trace[-1]
    assert "recv sem@d0 +128" in trace[-2]  # the kernel's own semaphore keeps its name
    assert "sem#" not in report
    # the model's names stay in the machine fields
    assert [step.semaphore for step in violation.trace[2:4]] == ["sem#2@d0", "sem#2@d0"]
    assert violation.trace[3].semaphore_shown_as == f"the DMA semaphore of `pltpu.sync_copy` at line {first}"
