"""A race in a kernel with no collective_id is never blamed on the default device barrier.

semcheck models XLA's barrier before such a kernel as signals of its own (lower/tpu_kernel.py:
every device signals device 0, which releases them all). Those are no handshake of the
kernel's: a ring whose copies overwrite a neighbour's slot with no capacity semaphore (the
shape of a public fused all-reduce matmul's ring, sweep 6) was reported as "the wait at
line 8 on device d was satisfied by the signal at line 8 from device d-1 ...: send it to
device d-1 instead", line 8 being the kernel's `def`: a fix nobody can make."""

from __future__ import annotations

import os

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from semcheck.api import check_protocol
from semcheck.report import causes, groups
from semcheck.result import CauseKind
from tests.tpu_kernels import line_of, mesh, protocols
from tests.tpu_support import EXAMPLES, results


def ring_into_neighbours_slots(x_ref, o_ref, slots, send_sems, recv_sems):
    # each step forwards the slot received last into the right neighbour's other slot,
    # with no word from that neighbour that the slot is free again
    n = lax.axis_size("x")
    right = lax.rem(lax.axis_index("x") + 1, n)
    slots[0] = x_ref[...]  # own block
    for step in range(n - 1):
        src, dst = step % 2, 1 - step % 2
        copy = pltpu.make_async_remote_copy(slots.at[src], slots.at[dst], send_sems.at[step],
                                            recv_sems.at[step], device_id=(right,),
                                            device_id_type=pl.DeviceIdType.MESH)
        copy.start()  # forward
        copy.wait()
        o_ref[...] += slots[dst]


def per_device(block):
    return pl.pallas_call(  # no collective_id: the default device barrier runs first
        ring_into_neighbours_slots, out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((2, *block.shape), block.dtype), pltpu.SemaphoreType.DMA((3,)),
                        pltpu.SemaphoreType.DMA((3,))])(block)


def test_a_ring_race_after_the_default_device_barrier_is_not_blamed_on_that_barrier():
    [protocol] = protocols(per_device, mesh((4,)))
    result = check_protocol(protocol, engine="explicit", exhaustive=True)
    assert (result.verdict.value, result.stats.states) == ("violation", 4184)
    races = [v for v in result.violations if v.kind == "data_race"]
    # a neighbour's copy lands in slot 0 before this device stored its block there, one lands
    # in a slot this device's copy still reads, and one while this device reads what landed
    assert sorted(v.location.line for v in races) == [
        line_of(__file__, "slots[0] = x_ref[...]  # own block"), line_of(__file__, "copy.start()  # forward"),
        line_of(__file__, "o_ref[...] += slots[dst]")]
    kernel_def = line_of(__file__, "def ring_into_neighbours_slots(")
    for v in races:
        if v.cause is None:
            continue
        assert v.cause.kind is not CauseKind.WRONG_SIGNALLER
        assert v.cause.site.line != kernel_def, causes.statement(v.cause)
        assert "send it to device" not in causes.fix(v.cause)


def test_a_ring_is_not_told_to_wait_for_its_neighbours_copy_before_sending_its_own():
    """The same ring: its race at the copy's start was told "move the wait at line 18 before
    line 17", where the wait takes the left neighbour's copy from line 17 itself; every
    device would then wait for another's copy before starting its own, and the ring
    deadlocks. No LATE_WAIT is said where what the wait takes comes from the line it would
    move before; the capacity handshake the ring lacks is said (NO_GO_AHEAD)."""
    [protocol] = protocols(per_device, mesh((4,)))
    result = check_protocol(protocol, engine="explicit", exhaustive=True)
    causes_found = [v.cause for v in result.violations if v.cause is not None]
    assert all(not (c.kind is CauseKind.LATE_WAIT and c.writer == c.before) for c in causes_found), [
        causes.statement(c) for c in causes_found]
    start = line_of(__file__, "copy.start()  # forward")
    assert any(c.kind is CauseKind.NO_GO_AHEAD and c.site.line == start for c in causes_found)


def test_a_first_copy_into_a_slot_the_neighbour_uses_for_itself_gets_the_capacity_handshake_too():
    """The same ring's other two races: the left neighbour's copy lands in slot 0 before this
    device stored its own block there, or in a slot this device's own copy still reads. Each
    is the first copy into those rows, so no earlier copy needed a go-ahead; what it needed is
    the word that the neighbour is done with its own use of them. All three races are then one
    problem, the capacity semaphore the ring lacks."""
    [protocol] = protocols(per_device, mesh((4,)))
    result = check_protocol(protocol, engine="explicit", exhaustive=True)
    start = line_of(__file__, "copy.start()  # forward")
    by_line = {v.location.line: v.cause for v in result.violations if v.kind == "data_race"}
    assert all(c is not None and (c.kind, c.site.line, c.buffer, c.want_offset) == (CauseKind.NO_GO_AHEAD, start, "slots", 1)
               for c in by_line.values()), by_line
    store = line_of(__file__, "slots[0] = x_ref[...]  # own block")
    assert causes.statement(by_line[store]) == (
        f"the copy at line {start} writes rows of `slots` on device d+1 that device d+1 fills itself, "
        "with no word from device d+1 that it is done with them")
    assert causes.statement(by_line[start]) == (
        f"the copy at line {start} writes rows of `slots` on device d+1 that device d+1 may still be copying "
        "from, with no word from device d+1 that it is done with them")
    assert causes.fix(by_line[store]) == (
        f"have device d+1 signal device d once it is done with `slots`, and wait for that signal before the "
        f"copy at line {start}: a capacity semaphore")
    assert len(groups.group([result])) == 1


def test_a_mailbox_cleared_after_the_barrier_that_lets_peers_push_is_not_told_to_add_a_semaphore():
    """The peer's store into its own rows races a first copy into them there too, but the
    copy's device heard from the peer (the barrier) before the peer began clearing: the fix
    is to clear before the barrier (moe_dispatch_combine.py), not a capacity semaphore."""
    [r] = results(os.path.join(EXAMPLES, "moe_mailbox_zeroed_late.py"), 2)
    [race] = r.violations
    assert race.location.line == 82
    assert race.cause is None or race.cause.kind is not CauseKind.NO_GO_AHEAD
