"""A write-write race whose two writes store one and the same value in every element (two
cores of tokamax's gmm_v2 both zero the same unused rows, benchmarks/public_kernels.md sweep
6) is still a race, but its finding says the race alone cannot change the result: the data
path knows what each copy's source holds (`values.fill_of`, `ir.Fill`). Writes of values
that differ, or that come from the inputs, say nothing of the kind."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from semcheck.api import check_protocol
from tests.tpu_kernels import line_of, mesh, protocols

NOTE = "both writes store the same value (0.0 in every element, whatever the inputs), so the race alone cannot change the result"


def fill_device_0(source):
    def kernel(x_ref, o_ref, block, landing, send_sem, recv_sem):
        # devices 1 and 2 each copy a block into the same rows of device 0's `landing`,
        # which nothing orders
        me = lax.axis_index("x")
        if source == "zeros":
            block[...] = jnp.zeros(block.shape, block.dtype)
        elif source == "device":
            block[...] = jnp.full(block.shape, me, block.dtype)
        else:
            block[...] = x_ref[...]
        copy = pltpu.make_async_remote_copy(block, landing, send_sem, recv_sem, device_id=(0,),
                                            device_id_type=pl.DeviceIdType.MESH)

        @pl.when(me != 0)
        def _():
            copy.start()  # into device 0's rows
            copy.wait_send()

        @pl.when(me == 0)
        def _():
            copy.wait_recv()
            copy.wait_recv()

        o_ref[...] = x_ref[...]

    def per_device(b):
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(b.shape, b.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)], out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.VMEM(b.shape, b.dtype), pltpu.VMEM(b.shape, b.dtype),
                            pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
            compiler_params=pltpu.CompilerParams(collective_id=0))(b)

    return per_device


def races(source):
    [protocol] = protocols(fill_device_0(source), mesh((3,)))
    result = check_protocol(protocol, engine="explicit", exhaustive=True)
    assert result.verdict.value == "violation"
    return [v for v in result.violations if v.kind == "data_race"]


def test_two_copies_of_zeros_into_one_peers_rows_race_and_say_they_store_the_same_bytes():
    [race] = races("zeros")
    start = line_of(__file__, "copy.start()  # into device 0's rows")
    assert race.location.line == start and [loc.line for loc in race.related] == [start]
    assert NOTE in race.message


@pytest.mark.parametrize("source", ["device", "input"])
def test_copies_of_values_that_differ_or_come_from_the_inputs_say_nothing_of_it(source):
    [race] = races(source)
    assert "both writes store the same value" not in race.message
