"""The kernel's data path, evaluated (lower/data.py, docs/data-evaluation.md).

Values a thread stores and reads back are followed in program order, with JAX's own
primitives; the result says which values deciding the protocol were taken from data.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from semcheck import check_protocol as _check_protocol
from semcheck import ir
from semcheck.passes.assumptions import Assumption, apply
from tests.tpu_kernels import hbm_call, instrs, line_of, mesh, protocols

# Several kernels here pick a route with `lax.top_k`, or load a vector from SMEM, to exercise
# the data path; JAX's Pallas TPU lowering implements neither, so each of them is also
# `not_lowerable` (lower/jax_tpu_lowering.py). These tests judge the synchronization.
NOT_LOWERABLE = "not_lowerable"


def sync_errors(result) -> set[str]:
    """The error kinds of `result` beside JAX's TPU lowering's refusal of the kernel."""
    return {v.kind for v in result.errors} - {NOT_LOWERABLE}

HERE = __file__


def check_protocol(protocol, **options):
    """Every finding: these tests assert each kind a kernel has, not its first counterexample."""
    return _check_protocol(protocol, exhaustive=True, **options)


DMA = pltpu.SemaphoreType.DMA
REGULAR = pltpu.SemaphoreType.REGULAR
STEPS = 3


def _uses(p: ir.Protocol) -> set[tuple]:
    return {(u.what, u.loc.line, u.script_inputs, u.buffers) for u in p.data_uses}


# --- a double-buffer slot index kept in SMEM across grid steps ------------------------------


def _double_buffer(flip: bool):
    def kernel(x_ref, o_ref, slot_ref, buf, sems):
        i, n = pl.program_id(0), pl.num_programs(0)

        def copy(step, slot):
            return pltpu.make_async_copy(x_ref.at[step], buf.at[slot], sems.at[slot])

        @pl.when(i == 0)
        def _():
            slot_ref[0] = 0
            copy(0, 0).start()

        slot = slot_ref[0]

        @pl.when(i + 1 < n)
        def _():
            copy(i + 1, 1 - slot).start()  # prefetch the next block into the other slot

        copy(i, slot).wait()
        o_ref[...] = buf[slot]
        slot_ref[0] = (1 - slot) if flip else slot  # <- the buggy side forgets to flip

    def per_device(block):
        x = block.reshape(STEPS, 8, 128)
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), block.dtype),
            grid=(STEPS,),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
            scratch_shapes=[pltpu.SMEM((1,), jnp.int32), pltpu.VMEM((2, 8, 128), jnp.float32), DMA((2,))],
        )(x)

    return per_device


def test_a_slot_index_written_back_each_grid_step_picks_the_semaphore():
    [p] = protocols(_double_buffer(flip=True), mesh((2,)), rows=8 * STEPS)
    waits = [w.sem.index for w in instrs(p, ir.DmaWait)]
    assert waits == [0, 1, 0]  # the slot flips every step, as the kernel wrote it back
    result = check_protocol(p)
    assert result.verdict.value == "safe", result.violations
    line = line_of(HERE, "slot = slot_ref[0]") + 0
    assert any(u.what.startswith("the DMA's receive semaphore") for u in p.data_uses)
    assert all(u.buffers == ("slot_ref",) and u.script_inputs == () for u in p.data_uses)
    assert any("read back from slot_ref" in n for n in p.notes)
    del line


def test_a_slot_index_not_flipped_races_with_the_copy_still_in_flight():
    [p] = protocols(_double_buffer(flip=False), mesh((2,)), rows=8 * STEPS)
    assert [w.sem.index for w in instrs(p, ir.DmaWait)] == [0, 0, 0]
    result = check_protocol(p)
    assert result.verdict.value == "violation"
    assert "data_race" in {v.kind for v in result.errors}


# --- a scalar-prefetch element the kernel overwrites -----------------------------------------


def _init_flag_call(kernel):
    def per_device(block):
        flags = jnp.ones((1,), jnp.int32)
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid_spec=pltpu.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, grid=(STEPS,),
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[REGULAR]),
        )(flags, block)

    return per_device


def test_a_prefetch_element_the_kernel_overwrites_is_read_back_not_a_fresh_input():
    def kernel(init_ref, x_ref, o_ref, sem):
        @pl.when(init_ref[0] == 1)  # the caller's value: a protocol input on each device
        def _():
            pl.semaphore_signal(sem, 1)
            init_ref[0] = 0  # later steps read back the kernel's 0: they signal no more

        @pl.when(pl.program_id(0) == STEPS - 1)
        def _():
            pl.semaphore_wait(sem, 1)

    [p] = protocols(_init_flag_call(kernel), mesh((2,)))
    assert sorted(i.name for i in p.inputs) == ["init_ref[0]@d0", "init_ref[0]@d1"]  # only the initial value
    one = check_protocol(apply(p, [Assumption("init_ref[0]", 1, 1)]))
    assert one.verdict.value == "safe", one.violations
    # Every other initial value leaves the wait without its signal: a real hang, reported.
    other = check_protocol(apply(p, [Assumption("init_ref[0]", 0, 0)]))
    assert {v.kind for v in other.errors} <= {"unsatisfied_wait", "deadlock"} and other.errors


# --- routing computed in the kernel: device id and semaphore index ----------------------------


LOCAL_EXPERTS = 2


def _routing_kernel(shift: int):
    """Top-2 experts of gating scores computed in the kernel, stored to SMEM and read back:
    the first expert picks the target device (e // LOCAL_EXPERTS) and the semaphore
    (e % LOCAL_EXPERTS) of a remote signal; every device waits for what it is sent."""

    def kernel(x_ref, o_ref, route_ref, sems):
        me = lax.axis_index("x")
        n = lax.axis_size("x")
        experts = n * LOCAL_EXPERTS
        scores = (lax.iota(jnp.int32, 8) * 5 + me * 3) % 8
        scores = jnp.where(lax.iota(jnp.int32, 8) < experts, scores, -1)
        _top, index = lax.top_k(scores.astype(jnp.float32), 2)
        route_ref[0] = index[0]
        expert = route_ref[0] + shift
        pl.semaphore_signal(
            sems.at[expert % LOCAL_EXPERTS], 1,
            device_id=(expert // LOCAL_EXPERTS,), device_id_type=pl.DeviceIdType.MESH,
        )

    return hbm_call(kernel, scratch=[pltpu.SMEM((1,), jnp.int32), REGULAR((LOCAL_EXPERTS,))])


def _expected_expert(me: int, n: int) -> int:
    scores = [(k * 5 + me * 3) % 8 if k < n * LOCAL_EXPERTS else -1 for k in range(8)]
    return int(np.argmax(scores))  # top_k breaks ties by the lower index, as argmax does


def test_routing_from_top_k_decides_the_target_device_and_semaphore():
    n = 2
    [p] = protocols(_routing_kernel(0), mesh((n,)))
    for me in range(n):
        [signal] = [s for s in instrs(p, ir.Signal, device=me) if s.sem.alloc == "sems"]
        expert = _expected_expert(me, n)
        assert (signal.sem.device, signal.sem.index) == (expert // LOCAL_EXPERTS, expert % LOCAL_EXPERTS)
    whats = {u.what for u in p.data_uses}
    assert any("device id" in w for w in whats) and any("index" in w for w in whats)
    assert all(u.buffers == ("route_ref",) for u in p.data_uses)
    # Nobody waits: each routed signal is left over, on the semaphore the routing chose.
    result = check_protocol(p)
    assert {v.kind for v in result.errors} == {"semaphore_leftover", NOT_LOWERABLE}  # top_k


def test_routing_past_the_last_device_is_an_invalid_device_id():
    n = 2
    [p] = protocols(_routing_kernel(2 * LOCAL_EXPERTS), mesh((n,)))  # every expert shifted off the mesh
    result = check_protocol(p)
    assert "invalid_device_id" in {v.kind for v in result.errors}


# --- the script's operand values: routing from the gating logits it passes --------------------

import os  # noqa: E402

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data_kernels")


def _script(name: str) -> str:
    return os.path.join(KERNELS, name)


def _load(name: str, devices: int) -> list:
    from semcheck.frontends import load

    return load(_script(name), devices)


def test_routing_from_the_scripts_logits_is_evaluated_on_every_device():
    from semcheck.frontends import LoadError

    for devices in (2, 4):
        [p] = _load("routed_signal.py", devices)
        assert not isinstance(p, LoadError), p
        experts = devices * 2
        for me in range(devices):
            [signal] = [s for s in instrs(p, ir.Signal, device=me) if s.sem.alloc == "sems"]
            expert = (2 * me + 3) % experts  # what the script's logits route device `me` to
            assert (signal.sem.device, signal.sem.index) == (expert // 2, expert % 2)
        line = line_of(_script("routed_signal.py"), "pl.semaphore_signal(sems.at[expert")
        assert {(u.what, u.loc.line, u.script_inputs, u.buffers) for u in p.data_uses} == {
            ("the signal device id", line, ("logits_ref",), ("logits_ref", "route_ref")),
            ("the signalled semaphore index", line, ("logits_ref",), ("logits_ref", "route_ref")),
        }
        assert sorted(u.device for u in p.data_uses if u.what == "the signal device id") == list(range(devices))
        assert any(n.startswith("the verdict holds for the operand values the script passed") for n in p.notes)
        result = check_protocol(p)
        [refused] = result.errors  # the protocol is safe; JAX's TPU lowering refuses top_k
        assert refused.kind == NOT_LOWERABLE and "top_k" in refused.message, result.violations


def test_a_wait_on_the_semaphore_the_routing_does_not_signal_is_found():
    from semcheck.api import verify_path

    for result in verify_path(_script("routed_signal_wrong_wait.py"), [2, 4], exhaustive=True):
        assert result.verdict.value == "violation"
        assert sync_errors(result) == {"unsatisfied_wait"}
        assert any("taken from data" in n for n in result.notes)


def test_a_kernel_the_script_never_runs_has_no_data_and_says_so():
    from semcheck.frontends import LoadError

    [error] = _load("routed_not_run.py", 2)
    assert isinstance(error, LoadError)
    assert error.message.startswith("semaphore_signal: the signal device id depends on the value loaded from route_ref")
    assert "the capture saw no operand values (the kernel was traced but not run" in error.message
    assert error.loc.line == line_of(_script("routed_signal.py"), "pl.semaphore_signal(sems.at[expert")


def test_a_primitive_jax_cannot_evaluate_on_cpu_is_an_error_naming_it_and_its_line():
    from semcheck.frontends import LoadError

    [error] = _load("routed_by_roll.py", 2)
    assert isinstance(error, LoadError)
    roll_line = line_of(_script("routed_by_roll.py"), "rolled = pltpu.roll(")
    assert "the result of `roll` at " in error.message and f"routed_by_roll.py:{roll_line}" in error.message
    assert "which JAX could not evaluate on CPU (NotImplementedError" in error.message


# --- counts all-gathered by remote DMA, then summed into a wait amount ------------------------


def test_counts_gathered_by_remote_dma_decide_the_wait_amount():
    from semcheck.frontends import LoadError

    for devices in (2, 4):
        [p] = _load("gathered_counts.py", devices)
        assert not isinstance(p, LoadError), p
        [wait] = [w for w in instrs(p, ir.Wait, device=0) if w.sem.alloc == "done_sem"]
        assert wait.value == sum(range(1, devices + 1))  # every peer's count arrived by DMA
        line = line_of(_script("gathered_counts.py"), "pl.semaphore_wait(done_sem")
        [use] = [u for u in p.data_uses if u.what == "the wait value"]
        assert (use.loc.line, use.device, use.value) == (line, 0, sum(range(1, devices + 1)))
        assert use.script_inputs == ("mine_ref",) and use.buffers == ("counts_ref", "mine_ref")
        assert any("data that remote copies carry was followed" in n for n in p.notes)
        result = check_protocol(p)
        assert result.verdict.value == "safe", result.violations


def test_counts_gathered_after_a_handshake_on_a_scratch_barrier_semaphore_are_followed():
    """The canonical run that lands remote copies lets every thread enter first. It let the
    lowest-numbered device run on alone: its handshake signal to a peer that had not entered
    was lost (a scratch BARRIER semaphore is allocated at entry), the run stopped in the
    handshake, no copy landed, and the lowering stopped at the first value the copies carry
    (sglang-jax's fused MoE v2 was checked only up to its metadata all-gather)."""
    from semcheck.frontends import LoadError

    for devices in (2, 4):
        [p] = _load("gathered_counts_scratch_barrier.py", devices)
        assert not isinstance(p, LoadError), p
        assert not any(isinstance(th.body[-1], ir.Cut) for th in p.threads if th.body)
        [wait] = [w for w in instrs(p, ir.Wait, device=0) if w.sem.alloc == "done_sem"]
        assert wait.value == sum(range(1, devices + 1))
        assert any("data that remote copies carry was followed" in n for n in p.notes)
        result = check_protocol(p)
        assert {v.kind for v in result.errors} == {"remote_before_entry"}, result.violations


def test_counts_forwarded_around_a_ring_are_known_once_the_copy_that_brought_them_landed():
    """From step 1 on a device forwards a row that arrived by remote DMA: unknown in the
    first lowering, known in the next once the canonical run lands it (tpu-inference's fused
    MoE all-reduces its per-expert counts this way)."""
    from semcheck.frontends import LoadError

    for devices in (2, 4):
        [p] = _load("ring_forwarded_counts.py", devices)
        assert not isinstance(p, LoadError), p
        [wait] = [w for w in instrs(p, ir.Wait, device=0) if w.sem.alloc == "done_sem"]
        assert wait.value == sum(range(1, devices + 1))
        forwarded = [s for s in instrs(p, ir.DmaStart, device=1)]
        assert [s.src.start[0] for s in forwarded] == [(1 - k) % devices for k in range(devices - 1)]
        assert check_protocol(p).verdict.value == "safe"


def test_a_count_staged_from_a_remote_copys_destination_decides_the_branch_as_the_script_does():
    """The count a receiver branches on arrives by a remote copy into HBM and a local copy
    into VMEM. The first lowering does not know it and makes the branch an input; only
    payloads into buffers that fed a known value were decisive, so the canonical run's
    payload into the inbox was never applied and every outcome was checked: a waiting
    receiver paired with a sender that does not signal, a false unsatisfied_wait (the
    variable-count RDMA exchange of benchmarks/public_kernels.md)."""
    from semcheck.frontends import LoadError

    script = _script("staged_count_branch.py")
    for devices in (2, 4):
        [p] = _load("staged_count_branch.py", devices)
        assert not isinstance(p, LoadError), p
        assert not p.inputs, p.inputs  # each branch taken from the data the script passed
        waiting = {d for d in range(devices) if any(w.sem.alloc == "go_sem" for w in instrs(p, ir.Wait, device=d))}
        # device d receives device d-1's count: 0 from device 0, d elsewhere
        assert waiting == set(range(devices)) - {1 % devices}
        line = line_of(script, "@pl.when(staged[0, 0] != 0)")
        assert {(u.device, u.value, u.script_inputs, u.buffers) for u in p.data_uses if u.loc.line == line} == {
            (d, int(d != 1), ("count_hbm",), ("count_hbm", "inbox", "staged")) for d in range(devices)
        }
        assert any("data that remote copies carry was followed" in n for n in p.notes)
        result = check_protocol(p)
        assert result.verdict.value == "safe", result.violations
        assert result.stats.states == {2: 38, 4: 76}[devices]


def test_summing_counts_before_their_copies_land_is_a_race_and_says_the_values_may_differ():
    from semcheck.frontends import LoadError

    [p] = _load("gathered_counts_read_early.py", 2)
    assert not isinstance(p, LoadError), p
    [wait] = [w for w in instrs(p, ir.Wait, device=0) if w.sem.alloc == "done_sem"]
    assert wait.value == 1  # the canonical schedule read only its own count
    result = check_protocol(p)
    assert {v.kind for v in result.errors} == {"data_race", "semaphore_leftover"}
    assert any(n.startswith("a data race touches counts_ref, which fed values taken from data") for n in result.notes)


# --- semcheck.assume on a value loaded from a buffer ------------------------------------------


def test_an_assumed_buffer_element_is_an_input_over_its_range_not_its_data():
    from semcheck.frontends import LoadError

    [p] = _load("assumed_count.py", 2)
    assert not isinstance(p, LoadError), p
    assert sorted((i.name, i.lo, i.hi) for i in p.inputs) == [("count_ref[0]@d0", 0, 8), ("count_ref[0]@d1", 0, 8)]
    assert not p.data_uses  # nothing was taken from the script's 3
    assert check_protocol(p).verdict.value == "safe"


def test_an_assumed_element_of_a_blocked_operand_is_one_input_per_block():
    """Grid step i holds block i of count_ref: step 0 signals its count, step 1 waits for
    its own. The assumed count_ref[0] was one input per device, shared by both steps, so
    the wait always matched the signal (a false "safe"); 3 then 4 hangs."""
    from semcheck.frontends import LoadError

    [p] = _load("assumed_count_per_block.py", 2)
    assert not isinstance(p, LoadError), p
    # z3 over the assumed 0..8; the explicit search over 3..4 (3 then 4 hangs), which keeps
    # it to 16 input combinations instead of 9**4.
    for engine, assume in (("z3", ()), ("explicit", [Assumption("count_ref[0]", 3, 4)])):
        result = check_protocol(p, engine=engine, assume=assume)
        hangs = [v for v in result.errors if v.kind == "unsatisfied_wait"]
        assert hangs, (engine, result)
        witness, device = hangs[0].inputs, hangs[0].device
        assert witness[f"count_ref[0]@d{device} block (1,)"] > witness[f"count_ref[0]@d{device} block (0,)"], witness
    assert sorted((i.name, i.lo, i.hi) for i in p.inputs) == [
        (f"count_ref[0]@d{d} block ({b},)", 0, 8) for d in (0, 1) for b in (0, 1)]
    assert any("one input per device and block" in n for n in p.notes), p.notes


# --- semcheck.verify(fn, *args) in-process: the arguments' values ------------------------------


def _signal_count_then_wait_3():
    def kernel(count_ref, o_ref, sem):
        pl.semaphore_signal(sem, count_ref[0])  # the count comes from the caller's data
        pl.semaphore_wait(sem, 3)

    def per_device(block):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),
            scratch_shapes=[REGULAR],
        )(block)

    m = mesh((2,))
    from jax.sharding import PartitionSpec as P

    return jax.shard_map(per_device, mesh=m, in_specs=P("x"), out_specs=P("x"), check_vma=False)


def test_verify_in_process_takes_values_from_the_arguments_it_is_given():
    import semcheck

    fn = _signal_count_then_wait_3()
    line = line_of(HERE, "pl.semaphore_signal(sem, count_ref[0])  # the count")
    [safe] = semcheck.verify(fn, jnp.full((2,), 3, jnp.int32), devices=2)
    assert safe.verdict.value == "safe", safe
    assert [(u.what, u.loc.line, u.device, u.value, u.script_inputs) for u in safe.data_uses] == [
        ("the signal increment", line, d, 3, ("count_ref",)) for d in (0, 1)]
    [short] = semcheck.verify(fn, jnp.array([3, 2], jnp.int32), devices=2)  # device 1 signals 2
    assert {(v.kind, v.device) for v in short.errors} == {("unsatisfied_wait", 1)}


def _count_from_an_smem_operand(block: tuple[int, ...] | None):
    """Each grid step signals and waits the count it loads from `count_ref`, an SMEM operand
    of 2 counts per device, received whole (`block` None) or in blocks of `block`."""
    def kernel(count_ref, o_ref, sem):
        count = count_ref[0]
        pl.semaphore_signal(sem, count)
        pl.semaphore_wait(sem, count)

    def per_device(counts):
        spec = (pl.BlockSpec(memory_space=pltpu.SMEM) if block is None
                else pl.BlockSpec(block, lambda i: (i,), memory_space=pltpu.SMEM))
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(counts.shape, counts.dtype), grid=(2,),
            in_specs=[spec], out_specs=pl.BlockSpec(memory_space=pltpu.SMEM), scratch_shapes=[REGULAR],
        )(counts)

    from jax.sharding import PartitionSpec as P

    return jax.shard_map(per_device, mesh=mesh((2,)), in_specs=P("x"), out_specs=P("x"), check_vma=False)


def test_a_value_loaded_from_a_blocked_operand_is_an_error_that_says_why_and_what_is_followed():
    """The script's values of a blocked operand are not followed: the error said only that
    neither they nor the thread's stores define the value, not why or what would be followed."""
    import semcheck

    counts = jnp.full((512,), 3, jnp.int32)  # blocks of 128: a rank-1 block TPU lowering takes
    [blocked] = semcheck.verify(_count_from_an_smem_operand((128,)), counts, devices=2)
    assert blocked.verdict.value == "error"
    assert ("the value loaded from count_ref at " in blocked.error and "which this thread has not stored, and "
            "the script's values of count_ref are not followed, because the kernel receives that operand "
            "in blocks (a (128,) ref of the (256,) operand)" in blocked.error)
    assert "only when the kernel's ref is the whole array (a BlockSpec with no block shape" in blocked.error
    [whole] = semcheck.verify(_count_from_an_smem_operand(None), counts, devices=2)  # what the error suggests
    assert whole.verdict.value == "safe", whole
    assert {u.value for u in whole.data_uses} == {3}


def _store_in_block_0_then_signal_from_block_1():
    """Step 0 stores 5 into its block of count_ref; step 1 holds the next block, which the
    pipeline copied in from the array, signals its count and waits for 5."""
    def kernel(count_ref, o_ref, sem):
        step = pl.program_id(0)

        @pl.when(step == 0)
        def _():
            count_ref[0] = 5

        @pl.when(step == 1)
        def _():
            pl.semaphore_signal(sem, count_ref[0])  # block 1's count, not step 0's 5
            pl.semaphore_wait(sem, 5)

    def per_device(counts):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(counts.shape, counts.dtype), grid=(2,),
            in_specs=[pl.BlockSpec((128,), lambda i: (i,), memory_space=pltpu.SMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM), scratch_shapes=[REGULAR],
        )(counts)

    from jax.sharding import PartitionSpec as P

    return jax.shard_map(per_device, mesh=mesh((2,)), in_specs=P("x"), out_specs=P("x"), check_vma=False)


def test_a_store_into_one_block_says_nothing_about_the_next_block():
    """The thread's store at step 0 stayed known at step 1, though step 1 holds another
    block (3 on every device here): the signal of 5 was taken from it, a false "safe"."""
    import semcheck
    from semcheck.frontends.capture import capture_function, lower_captures

    fn, counts = _store_in_block_0_then_signal_from_block_1(), jnp.full((512,), 3, jnp.int32)
    [unknown] = semcheck.verify(fn, counts, devices=2)
    assert unknown.verdict.value == "error", unknown
    assert "the value loaded from count_ref at " in unknown.error and "in blocks" in unknown.error
    # Assumed, the element is block (1,)'s input at step 1, whatever step 0 stored.
    [p], errors = lower_captures(capture_function(fn, counts, operand_values=True), assumed=["count_ref[0]"])
    assert not errors, errors
    assert sorted(i.name for i in p.inputs) == ["count_ref[0]@d0 block (1,)", "count_ref[0]@d1 block (1,)"]
    result = check_protocol(p, engine="z3", assume=[Assumption("count_ref[0]", 0, 8)])
    assert "unsatisfied_wait" in {v.kind for v in result.errors}, result


# --- semcheck.assume: every read of the element, not only a load of it alone ----------------


def _signal_a_count_of(read, scratch=()):
    """Each device signals the count `read` takes from count_ref (an SMEM operand of 2 counts
    per device, received whole), then waits for 3. A plain load of count_ref[0] comes first:
    it makes the assumed input, so a name check of `assume("count_ref[0]", ...)` passes
    whatever `read` does."""
    def kernel(count_ref, o_ref, sem, *scratch_refs):
        o_ref[0] = count_ref[0]
        pl.semaphore_signal(sem, read(count_ref, *scratch_refs))
        pl.semaphore_wait(sem, 3)

    def per_device(counts):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(counts.shape, counts.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM), scratch_shapes=[REGULAR, *scratch],
        )(counts)

    from jax.sharding import PartitionSpec as P

    return jax.shard_map(per_device, mesh=mesh((2,)), in_specs=P("x"), out_specs=P("x"), check_vma=False)


def _assumed_lowering(read, scratch=()) -> tuple[list[ir.Protocol], list]:
    """The kernel of `_signal_a_count_of(read)` on counts of 3, lowered with count_ref[0] assumed."""
    from semcheck.frontends.capture import capture_function, lower_captures

    fn = _signal_a_count_of(read, scratch)
    return lower_captures(capture_function(fn, jnp.full((4,), 3, jnp.int32), operand_values=True),
                          assumed=["count_ref[0]"])


def _whole_ref(count_ref):
    return count_ref[...][0]  # a load of the whole ref, then its element 0 (slice, squeeze)


def test_an_assumed_element_read_through_a_load_of_the_whole_ref_is_its_input():
    """The whole-ref load read the script's 3 although count_ref[0] is assumed: the signal
    was 3 and the wait for 3 always satisfied, a false "safe" (counts other than 3 hang)."""
    [p], errors = _assumed_lowering(_whole_ref)
    assert not errors, errors
    assert sorted(i.name for i in p.inputs) == ["count_ref[0]@d0", "count_ref[0]@d1"]
    assert not p.data_uses  # nothing was taken from the script's 3
    for engine in ("explicit", "z3"):
        result = check_protocol(p, engine=engine, assume=[Assumption("count_ref[0]", 0, 8)])
        hangs = [v for v in result.errors if v.kind == "unsatisfied_wait"]
        assert hangs, (engine, result)
        assert hangs[0].inputs[f"count_ref[0]@d{hangs[0].device}"] < 3, (engine, hangs[0].inputs)


def _slice(count_ref):
    return count_ref[0:2][0]


def _stored_whole_into_scratch(count_ref, buf):
    buf[...] = count_ref[...]
    return buf[0]


def _copied_into_scratch(count_ref, buf, copy_sem):
    copy = pltpu.make_async_copy(count_ref, buf, copy_sem)
    copy.start()
    copy.wait()
    return buf[0]


def _neighbour(count_ref):
    return count_ref[...][1]  # not assumed: the script's value


@pytest.mark.parametrize("read, scratch", [
    (_slice, ()),
    (_stored_whole_into_scratch, (pltpu.SMEM((2,), jnp.int32),)),
    (_copied_into_scratch, (pltpu.SMEM((2,), jnp.int32), DMA)),
], ids=["slice", "vector store into another buffer", "copy into another buffer"])
def test_every_read_of_an_assumed_element_that_picks_it_out_is_its_input(read, scratch):
    [p], errors = _assumed_lowering(read, scratch)
    assert not errors, errors
    for d in (0, 1):
        [signal] = [s for s in instrs(p, ir.Signal, device=d) if s.sem.alloc == "sem"]
        assert signal.inc == ir.Reg(f"count_ref[0]@d{d}"), signal
    assert not p.data_uses


def test_an_element_beside_an_assumed_one_is_still_the_scripts_value():
    [p], errors = _assumed_lowering(_neighbour)
    assert not errors, errors
    assert {(u.what, u.value, u.script_inputs) for u in p.data_uses} == {("the signal increment", 3, ("count_ref",))}
    assert not sync_errors(check_protocol(p, assume=[Assumption("count_ref[0]", 0, 8)]))


def _summed(count_ref):
    return jnp.sum(count_ref[...])  # a sum of count_ref[0] and count_ref[1]


def test_an_assumed_element_computed_on_as_an_array_is_an_error_naming_the_primitive():
    """Only indexing picks an assumed element out of an array: a sum of one is an error that
    says which primitive, where, and which element, never the script's value."""
    _, [error] = _assumed_lowering(_summed)
    assert error.line == line_of(HERE, "pl.semaphore_signal(sem, read(count_ref, *scratch_refs))"), error
    line = line_of(HERE, "return jnp.sum(count_ref[...])")
    assert f"the result of `reduce_sum` at {ir.Loc(HERE, line)}" in error.message, error.message
    assert "which holds count_ref[0], whose initial value is a protocol input because semcheck.assume names it" \
        in error.message, error.message


def _chosen_by_a_run_time_branch(count_ref, sem):
    counts = lax.cond(pl.semaphore_read(sem) == 0, lambda: count_ref[...], lambda: jnp.full((2,), 3, jnp.int32))
    return counts[0]


def test_an_array_holding_an_assumed_element_chosen_by_a_run_time_branch_is_an_error():
    """The branch's result is one array or the other: it must not pass for the first
    branch's array (whose element 0 is the input) when it is picked from."""
    _, [error] = _assumed_lowering(_chosen_by_a_run_time_branch, (REGULAR,))
    assert "the value loaded from count_ref at " in error.message and "count_ref[0], whose initial value is " \
        "a protocol input because semcheck.assume names it" in error.message, error.message


def _stored_under_a_run_time_branch(count_ref, sem):
    @pl.when(pl.semaphore_read(sem) == 1)  # never taken: the semaphore reads 0 here
    def _():
        count_ref[0] = 5

    return count_ref[0]


def _stored_in_a_run_time_loop(count_ref, sem):
    def body(i, carry):
        count_ref[0] = 5
        return carry

    lax.fori_loop(0, pl.semaphore_read(sem), body, 0)
    return count_ref[0]


def test_an_assumed_element_stored_under_a_run_time_branch_holds_its_input_or_the_store():
    """After a branch the lowering cannot decide, an assumed element one side stored to is a
    register each side assigns: the input on the side that left it, 5 on the other (as a
    cond's outputs are). Once this was an error, and before that the side that did not
    store held the script's 3 (a false verdict). The branch is never taken, so the signal is
    the input, and the wait for 3 hangs below 3 and leaves credits over above it."""
    [p], errors = _assumed_lowering(_stored_under_a_run_time_branch, (REGULAR,))
    assert not errors, errors
    assert sorted(i.name for i in p.inputs) == ["count_ref[0]@d0", "count_ref[0]@d1"]
    assert check_protocol(p, engine="explicit", assume=[Assumption("count_ref[0]", 3, 3)]).verdict.value == "safe"
    for engine in ("explicit", "z3"):
        result = check_protocol(p, engine=engine, assume=[Assumption("count_ref[0]", 0, 8)])
        assert {v.kind for v in result.errors} == {"unsatisfied_wait", "semaphore_leftover"}, (engine, result)
        hang = next(v for v in result.errors if v.kind == "unsatisfied_wait")
        assert hang.inputs[f"count_ref[0]@d{hang.device}"] < 3, (engine, hang.inputs)


def test_an_assumed_element_stored_in_a_run_time_loop_says_it_is_assumed():
    """An assumed element a loop of run-time length stores to holds its input or the
    store's value at the loop's head: an error. It once said that neither the script's
    operand values nor the thread's stores define it, without a word of the assumption."""
    _, [error] = _assumed_lowering(_stored_in_a_run_time_loop, (REGULAR,))
    assert "which holds count_ref[0]: semcheck.assume names it, so its initial value is a protocol input, but " \
        "this thread stores to it on some paths only" in error.message, error.message
    assert "neither the script's operand values nor" not in error.message


def _signal_block_0s_count_wait_block_1s():
    """Step 0 signals the count of its block of count_ref, step 1 waits for its own, both
    through a load of the whole (one-element) block."""
    def kernel(count_ref, o_ref, sem):
        step = pl.program_id(0)

        @pl.when(step == 0)
        def _():
            pl.semaphore_signal(sem, count_ref[...][0])

        @pl.when(step == 1)
        def _():
            pl.semaphore_wait(sem, count_ref[...][0])

    def per_device(counts):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(counts.shape, counts.dtype), grid=(2,),
            in_specs=[pl.BlockSpec((1,), lambda i: (i,), memory_space=pltpu.SMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM), scratch_shapes=[REGULAR],
        )(counts)

    from jax.sharding import PartitionSpec as P

    return jax.shard_map(per_device, mesh=mesh((2,)), in_specs=P("x"), out_specs=P("x"), check_vma=False)


def test_an_assumed_element_of_a_blocked_operand_read_through_the_whole_block_is_that_blocks_input():
    from semcheck.frontends.capture import capture_function, lower_captures

    captured = capture_function(_signal_block_0s_count_wait_block_1s(), jnp.full((4,), 3, jnp.int32),
                                operand_values=True)
    [p], errors = lower_captures(captured, assumed=["count_ref[0]"])
    assert not errors, errors
    assert sorted(i.name for i in p.inputs) == [
        f"count_ref[0]@d{d} block ({b},)" for d in (0, 1) for b in (0, 1)]
    result = check_protocol(p, engine="z3", assume=[Assumption("count_ref[0]", 3, 4)])
    [hang, *_] = [v for v in result.errors if v.kind == "unsatisfied_wait"]
    d = hang.device
    assert hang.inputs[f"count_ref[0]@d{d} block (1,)"] > hang.inputs[f"count_ref[0]@d{d} block (0,)"], hang.inputs


# --- against JAX's TPU interpreter ----------------------------------------------------------

# kernel script -> what the interpreter must do with it, from semcheck's verdict
DIFFERENTIAL = {
    "routed_signal.py": "finished",  # safe
    "routed_signal_wrong_wait.py": "hung",  # unsatisfied_wait
    "gathered_counts.py": "finished",  # safe
    "gathered_counts_read_early.py": "finished",  # a race and a leftover: neither hangs
    "gathered_sizes.py": "finished",  # safe
    "staged_count_branch.py": "finished",  # safe
}


@pytest.fixture
def run_interpreter():
    """The examples' runner: a run whose CPU time stands still is hung (the interpreter
    hangs for ever on a hang), however long a loaded machine makes a live run."""
    import tests.test_tpu_differential as differential

    return differential.run_interpreter


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DIFFERENTIAL))
def test_the_tpu_interpreter_does_what_the_evaluated_verdict_says(name, run_interpreter):
    from semcheck.api import verify_path

    [result] = verify_path(_script(name), [2], exhaustive=True)
    kinds = {v.kind for v in result.errors}
    expected = "hung" if kinds & {"deadlock", "unsatisfied_wait"} else "finished"
    assert expected == DIFFERENTIAL[name], (name, kinds)
    outcome, output = run_interpreter(_script(name), 2, {})
    assert outcome == expected, (outcome, output)


@pytest.mark.slow
def test_the_tpu_interpreter_sees_the_race_of_counts_read_before_they_land(run_interpreter):
    path = _script("gathered_counts_read_early.py")
    for mode in ("on_wait", "eager"):
        outcome, output = run_interpreter(path, 2, {"detect_races": True, "dma_execution_mode": mode}, tail=None)
        assert outcome == "finished", output
        assert "RACE DETECTED" in output, (mode, output[-2000:])
    [safe] = [run_interpreter(_script("gathered_counts.py"), 2, {"detect_races": True}, tail=None)]
    assert safe[0] == "finished" and "RACE DETECTED" not in safe[1]


# --- gathered counts as DMA sizes and offsets (moe-lower's dynamic sizes) ---------------------


def test_gathered_counts_size_and_place_each_senders_rows_in_the_inbox():
    from semcheck.frontends import LoadError

    [p] = _load("gathered_sizes.py", 4)
    assert not isinstance(p, LoadError), p
    rows = {d: d + 1 for d in range(4)}
    for d in (1, 2, 3):
        [copy] = [c for c in instrs(p, ir.DmaStart, device=d) if c.dst.buffer == "inbox"]
        offset = sum(rows[j] for j in range(1, d))
        assert (copy.device, copy.dst.start[0], copy.dst.size[0]) == (0, offset, rows[d])
        assert copy.nbytes == rows[d] * 128 * 4 // p.dma_unit  # in the unit its DMA semaphores count
    [aggregate] = [w for w in instrs(p, ir.DmaWait, device=0) if w.sem.alloc == "recv_sem"]
    assert aggregate.nbytes == 9 * 128 * 4 // p.dma_unit  # one wait for every sender's bytes
    sized = [u for u in p.data_uses if "pl.ds size" in u.what]
    assert sized and all(u.script_inputs == ("mine_ref",) for u in sized)
    assert check_protocol(p).verdict.value == "safe"


def test_senders_landing_at_the_same_offset_race_in_the_inbox():
    from semcheck.api import verify_path

    two, four = verify_path(_script("gathered_sizes_same_offset.py"), [2, 4], exhaustive=True)
    assert two.verdict.value == "safe"  # one sender: nothing to overlap with
    assert {v.kind for v in four.errors} == {"data_race"}


# --- the memo of JAX's reads and writes ------------------------------------------------------


def test_the_memo_of_reads_and_writes_gives_what_jax_gives():
    """lower/discharge.py keeps JAX's answers by their exact inputs: the same read again is the
    same array (read-only), a read of other contents or at another index is asked anew, and
    every answer equals JAX's own without the memo."""
    from jax._src.state import indexing

    from semcheck.lower import discharge

    def indexer(start, size, shape):
        return indexing.NDIndexer((indexing.Slice(np.int32(start), size), indexing.Slice(0, shape[1])),
                                  shape, ())

    discharge._MEMO.clear()
    a = np.arange(32, dtype=np.int32).reshape(8, 4)
    first = discharge.transform_read(a, [indexer(2, 3, a.shape)])
    assert discharge.transform_read(a, [indexer(2, 3, a.shape)]) is first and not first.flags.writeable
    np.testing.assert_array_equal(first, a[2:5])
    np.testing.assert_array_equal(discharge.transform_read(a, [indexer(3, 3, a.shape)]), a[3:6])
    np.testing.assert_array_equal(discharge.transform_read(a + 1, [indexer(2, 3, a.shape)]), a[2:5] + 1)
    value = np.full((3, 4), -1, np.int32)
    written = discharge.transform_write(a, [indexer(1, 3, a.shape)], value)
    assert discharge.transform_write(a, [indexer(1, 3, a.shape)], value) is written
    expected = a.copy()
    expected[1:4] = -1
    np.testing.assert_array_equal(written, expected)
    np.testing.assert_array_equal(discharge.transform_write(a, [indexer(1, 3, a.shape)], value + 5)[1:4], 4)
    discharge._MEMO.clear()
    assert discharge.transform_read(a, [indexer(2, 3, a.shape)]) is not first
