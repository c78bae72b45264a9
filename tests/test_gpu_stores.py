"""GPU remote-ref accesses and TMA stores join the race check (issue 15).

* A load or store through `plgpu.remote_ref` lowers to a plain access of the peer's buffer
  (`ir.Load` / `ir.Store` with a device), ordered by the same signal -> wait edges as a local
  one; both engines, with and without the reduction, find the same racing pairs.
* A TMA store lowers to a local copy with a send side (its SMEM read) and a receive side
  (its GMEM write), counted per bulk group; `wait_smem_to_gmem(n, wait_read_only)` waits for
  the groups it covers on the read counter, and, unless read-only, on the written one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from semcheck import ir
from semcheck.api import check_protocol
from semcheck.ir import Scope
from semcheck.model import ProtocolBuilder
from tests.test_gpu_lowering import body, error, gpu_call, protocol
from tests.test_plain_races import race_keys


def ring(wait: bool, devices: int = 2) -> ir.Protocol:
    """Each device stores its row into the right neighbour's inbox, signals it, waits (or
    not) for the left neighbour's signal, then loads its inbox."""
    p = ProtocolBuilder("ring", devices=devices, cores=1, backend="gpu")
    inbox = p.buffer("inbox", (1, 128), space="gmem", scope=Scope.DEVICE)
    ready = p.global_semaphore("ready")
    for d in range(devices):
        t = p.thread(d, 0)
        t.store(inbox.region(0, size=(1,)), device=(d + 1) % devices)
        t.signal(ready, 1, device=(d + 1) % devices)
        if wait:
            t.wait(ready, 1, decrement=False)
        t.load(inbox.region(0, size=(1,)))
    return p.build()


def test_a_remote_store_ordered_by_signal_and_wait_is_safe_in_both_engines():
    # unreduced: 5 x 5 pcs less the 8 pairs where one thread is past its wait and the other
    # has not signalled yet
    for reduce, states in ((True, 9), (False, 17)):
        result = check_protocol(ring(wait=True), engine="explicit", reduce=reduce, symmetry=False)
        assert (result.verdict.value, result.stats.states) == ("safe", states), reduce
    assert check_protocol(ring(wait=True), engine="z3").verdict.value == "safe"


def test_a_remote_store_without_the_wait_races_with_the_peers_load_in_both_engines():
    protocol_ = ring(wait=False)
    store, load = (i.loc.line for i in protocol_.threads[0].body if isinstance(i, (ir.Load, ir.Store)))
    found = []
    for options in ({"engine": "explicit"}, {"engine": "explicit", "reduce": False}, {"engine": "z3"}):
        result = check_protocol(protocol_, **options)
        assert result.verdict.value == "violation", options
        found.append(race_keys(result))
    assert found[0] == found[1] == found[2] == {frozenset((store, load))}


def test_a_remote_access_outside_the_mesh_faults_in_both_engines():
    p = ProtocolBuilder("outside", devices=2, cores=1, backend="gpu")
    inbox = p.buffer("inbox", (1, 128), space="gmem", scope=Scope.DEVICE)
    for d in range(2):
        p.thread(d, 0).store(inbox.region(0, size=(1,)), device=d + 1)
    for engine in ("explicit", "z3"):
        result = check_protocol(p.build(), engine=engine)
        assert {v.kind for v in result.violations} == {"invalid_device_id"}, engine


def test_remote_ref_loads_and_stores_lower_to_accesses_of_the_peers_buffer():
    def kernel(x_ref, o_ref):
        right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
        plgpu.remote_ref(o_ref, right)[0] = x_ref[0]
        x_ref[1] = plgpu.remote_ref(o_ref, right)[1]

    p = protocol(gpu_call(kernel, grid=(1,)), devices=4)
    accesses = [i for i in body(p, device=3) if isinstance(i, (ir.Load, ir.Store))]
    assert [(type(i).__name__, i.region.buffer, i.device) for i in accesses] == [
        ("Load", "x_ref", None), ("Store", "o_ref", 0), ("Load", "o_ref", 0), ("Store", "x_ref", None),
    ]
    assert accesses[1].region.start[0] == 0 and accesses[2].region.start[0] == 1
    assert not [n for n in p.notes if "remote_ref" in n]


def test_a_remote_ref_of_shared_memory_is_an_error():
    def kernel(x_ref, o_ref, tile):
        plgpu.remote_ref(tile, 0)[...] = x_ref[...]

    e = error(gpu_call(kernel, grid=(1,), scratch=[plgpu.SMEM((8, 128), jnp.float32)]))
    assert "not in GMEM" in e.message


def tma_stores(read_only: bool, n: int = 0, commit_every: bool = True):
    def kernel(x_ref, o_ref, tile):
        for step in range(2):
            tile[...] = x_ref[step]
            plgpu.copy_smem_to_gmem(tile, o_ref.at[step], commit_group=commit_every)
        if not commit_every:
            plgpu.commit_smem_to_gmem_group()
        plgpu.wait_smem_to_gmem(n, wait_read_only=read_only)

    def per_device(block):
        return plgpu.kernel(
            kernel,
            out_type=jax.ShapeDtypeStruct(block.shape, block.dtype),
            grid=(1,),
            grid_names=("g",),
            scratch_types=[plgpu.SMEM(block.shape[1:], block.dtype)],
        )(block)

    return per_device


def waits(p: ir.Protocol) -> list[tuple[str, int, int]]:
    return [(i.sem.alloc, i.sem.index, i.value) for i in body(p) if isinstance(i, ir.Wait)]


def test_a_tma_store_is_a_copy_whose_read_and_write_complete_apart():
    p = protocol(tma_stores(read_only=True))
    copies = [i for i in body(p) if isinstance(i, ir.DmaStart)]
    assert [(c.src.buffer, c.dst.buffer, c.send_sem, c.recv_sem, c.device) for c in copies] == [
        ("tile", "o_ref", ir.SemRef("tma_store_read", k), ir.SemRef("tma_store_written", k), None) for k in range(2)
    ]
    assert waits(p) == [("tma_store_read", 0, 1), ("tma_store_read", 1, 1)]


def test_a_full_wait_covers_both_sides_and_n_leaves_the_latest_groups_in_flight():
    assert waits(protocol(tma_stores(read_only=False))) == [
        ("tma_store_read", 0, 1), ("tma_store_read", 1, 1), ("tma_store_written", 0, 1), ("tma_store_written", 1, 1),
    ]
    assert waits(protocol(tma_stores(read_only=False, n=1))) == [("tma_store_read", 0, 1), ("tma_store_written", 0, 1)]
    assert waits(protocol(tma_stores(read_only=True, n=2))) == []


def test_stores_committed_together_are_one_group():
    p = protocol(tma_stores(read_only=True, commit_every=False))
    assert {c.send_sem for c in body(p) if isinstance(c, ir.DmaStart)} == {ir.SemRef("tma_store_read", 0)}
    assert waits(p) == [("tma_store_read", 0, 2)]


def test_refilling_the_tile_before_the_read_wait_is_a_race_and_after_it_is_not():
    def kernel(early):
        def body_(x_ref, o_ref, tile):
            tile[...] = x_ref[0]
            plgpu.copy_smem_to_gmem(tile, o_ref.at[0])
            if not early:
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            tile[...] = x_ref[1]
            plgpu.wait_smem_to_gmem(0)
        return body_

    for early, verdict in ((True, "violation"), (False, "safe")):
        p = protocol(gpu_call(kernel(early), grid=(1,), scratch=[plgpu.SMEM((128,), jnp.float32)]))
        for engine in ("explicit", "z3"):
            result = check_protocol(p, engine=engine)
            assert result.verdict.value == verdict, (early, engine)
            assert {v.kind for v in result.violations} == ({"data_race"} if early else set())


def test_a_tma_store_after_run_time_control_flow_is_an_error():
    def kernel(x_ref, o_ref, tile, sem):
        @pl.when(pl.semaphore_read(sem) > 0)
        def _():
            pass
        plgpu.copy_smem_to_gmem(tile, o_ref.at[0])

    e = error(gpu_call(kernel, grid=(1,), scratch=[plgpu.SMEM((128,), jnp.float32), plgpu.SemaphoreType.REGULAR]))
    assert "control flow known only at run time" in e.message


def tma_store_ring(read_only: bool):
    """Each device TMA-stores its tile into the right neighbour's inbox, waits for its bulk
    group (read-only or not), signals the neighbour, waits for its left neighbour's signal
    and loads its inbox."""
    def kernel(x_ref, inbox_ref, tile, ready):
        right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
        tile[...] = x_ref[...]
        plgpu.copy_smem_to_gmem(tile, plgpu.remote_ref(inbox_ref, right))
        plgpu.wait_smem_to_gmem(0, wait_read_only=read_only)
        pl.semaphore_signal(ready, device_id=right)
        pl.semaphore_wait(ready, 1)
        x_ref[...] = inbox_ref[...]

    return gpu_call(kernel, grid=(1,), scratch=[plgpu.SMEM((8, 128), jnp.float32), plgpu.SemaphoreType.REGULAR])


def test_a_tma_store_into_a_peer_writes_the_peers_buffer_and_counts_on_the_issuers_group():
    p = protocol(tma_store_ring(read_only=False), devices=4)
    [copy] = [i for i in body(p, device=3) if isinstance(i, ir.DmaStart)]
    assert (copy.src.buffer, copy.dst.buffer, copy.dst_device, copy.device) == ("tile", "inbox_ref", 0, None)
    assert (copy.send_sem, copy.recv_sem) == (ir.SemRef("tma_store_read", 0), ir.SemRef("tma_store_written", 0))
    assert any("TMA store into a peer's memory" in n and "race-checked on the peer's buffer" in n for n in p.notes)


def test_a_tma_store_into_a_peer_published_after_a_read_only_wait_races_with_the_peers_load():
    for read_only in (False, True):
        p = protocol(tma_store_ring(read_only), devices=2)
        copy_line = next(i.loc.line for i in body(p) if isinstance(i, ir.DmaStart))
        load_line = [i.loc.line for i in body(p) if isinstance(i, ir.Load) and i.region.buffer == "inbox_ref"][0]
        expected = ("violation", {frozenset((copy_line, load_line))}) if read_only else ("safe", set())
        for options in ({"engine": "explicit"}, {"engine": "explicit", "reduce": False, "symmetry": False},
                        {"engine": "z3"}):
            result = check_protocol(p, **options)
            assert (result.verdict.value, race_keys(result)) == expected, (read_only, options)


def test_a_tma_store_into_a_device_outside_the_mesh_faults_in_both_engines():
    p = ProtocolBuilder("outside", devices=2, cores=1, backend="gpu")
    inbox = p.buffer("inbox", (1, 128), space="gmem", scope=Scope.DEVICE)
    tile = p.buffer("tile", (1, 128), space="smem")
    read, written = p.semaphore("read"), p.semaphore("written")
    for d in range(2):
        p.thread(d, 0).dma_start(tile.region(0, size=(1,)), inbox.region(0, size=(1,)), recv_sem=written,
                                 send_sem=read, nbytes=4, dst_device=d + 1)
    for engine in ("explicit", "z3"):
        result = check_protocol(p.build(), engine=engine)
        assert {v.kind for v in result.violations} == {"invalid_device_id"}, engine
