"""Mosaic GPU atomics and TMA loads from a peer's memory (issue 26, section 3).

* `plgpu.atomic_add` (and max, min, and, or, xor: `mgpu_atomic_store`) lowers to an atomic
  read-modify-write (`ir.Store(atomic=True)`), on the thread's own buffer or, through
  `plgpu.remote_ref`, on a peer's: two atomics never race with each other, an atomic races
  with a plain load or store (and with a copy in flight) like any write. Both engines, with
  and without the reduction, agree.
* `plgpu.copy_gmem_to_smem` from a `plgpu.remote_ref` lowers to a copy whose source is the
  peer's buffer (`ir.DmaStart.src_device`), read until it lands on the issuer's barrier: a
  peer's store into it meanwhile is a data race.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax
from jax.experimental.pallas import mosaic_gpu as plgpu

from semcheck import ir
from semcheck.api import check_protocol
from semcheck.ir import Scope
from semcheck.model import ProtocolBuilder
from tests.test_gpu_lowering import body, gpu_call, protocol
from tests.test_plain_races import race_keys

ENGINES = ({"engine": "explicit"}, {"engine": "explicit", "reduce": False}, {"engine": "z3"})


def two_writers(first: str, second: str, devices: int = 2) -> ir.Protocol:
    """Every device writes element 0 of device 0's accumulator, `first` on device 0 and
    `second` on the others ("atomic", "store" or "load"), with nothing ordering them."""
    p = ProtocolBuilder("writers", devices=devices, cores=1, backend="gpu")
    acc = p.buffer("acc", (4,), space="gmem", scope=Scope.DEVICE)
    for d in range(devices):
        t = p.thread(d, 0)
        how = first if d == 0 else second
        if how == "load":
            t.load(acc.region(0, size=(1,)), device=0)
        else:
            t.store(acc.region(0, size=(1,)), device=0, atomic=how == "atomic")
    return p.build()


def _verdicts(protocol_: ir.Protocol) -> set:
    found = set()
    for options in ENGINES:
        result = check_protocol(protocol_, **options)
        found.add((result.verdict.value, frozenset(map(frozenset, race_keys(result)))))
    return found


def test_atomics_into_one_element_never_race_with_each_other():
    for devices in (2, 3):
        assert _verdicts(two_writers("atomic", "atomic", devices)) == {("safe", frozenset())}


def test_an_atomic_races_with_a_plain_store_or_load_of_the_same_element():
    for other in ("store", "load"):
        protocol_ = two_writers("atomic", other)
        [verdict] = _verdicts(protocol_)
        assert verdict[0] == "violation", other
        result = check_protocol(protocol_)
        [race] = [v for v in result.violations if v.kind == "data_race"]
        assert "atomically update" in race.message


def test_an_atomic_races_with_a_copy_in_flight_on_its_element():
    p = ProtocolBuilder("atomic_vs_copy", devices=1, cores=1, backend="gpu")
    acc = p.buffer("acc", (4,), space="gmem", scope=Scope.DEVICE)
    src = p.buffer("src", (4,), space="gmem", scope=Scope.DEVICE)
    landed = p.semaphore("landed")
    t = p.thread(0, 0)
    t.dma_start(src.region(0, size=(4,)), acc.region(0, size=(4,)), recv_sem=landed, nbytes=16)
    t.store(acc.region(1, size=(1,)), atomic=True)
    t.wait(landed, 1)
    for options in ENGINES:
        result = check_protocol(p.build(), **options)
        assert {v.kind for v in result.violations} == {"data_race"}, options


def test_the_symmetry_reduction_keeps_atomics_atomic():
    # every device adds into its right neighbour: the rotations map the protocol onto itself
    p = ProtocolBuilder("ring_adds", devices=4, cores=1, backend="gpu")
    acc = p.buffer("acc", (4,), space="gmem", scope=Scope.DEVICE)
    for d in range(4):
        t = p.thread(d, 0)
        t.store(acc.region(0, size=(4,)), atomic=True)
        t.store(acc.region(0, size=(4,)), device=(d + 1) % 4, atomic=True)
    protocol_ = p.build()
    with_symmetry = check_protocol(protocol_, engine="explicit", symmetry=True)
    without = check_protocol(protocol_, engine="explicit", symmetry=False)
    assert with_symmetry.verdict.value == without.verdict.value == "safe"


def test_plgpu_atomics_lower_to_atomic_stores_on_the_own_or_the_peers_buffer():
    def kernel(x_ref, o_ref):
        right = lax.rem(lax.axis_index("x") + 1, lax.axis_size("x"))
        plgpu.atomic_add(o_ref.at[0], x_ref[0])
        plgpu.atomic_max(plgpu.remote_ref(o_ref, right).at[1], x_ref[1])

    p = protocol(gpu_call(kernel, grid=(1,)), devices=4)
    stores = [i for i in body(p, device=3) if isinstance(i, ir.Store)]
    assert [(s.atomic, s.device, s.region.start[0]) for s in stores] == [(True, None, 0), (True, 0, 1)]
    assert any("atomic read-modify-write" in note for note in p.notes)


def test_a_tma_load_from_a_remote_ref_reads_the_peers_buffer():
    def kernel(x_ref, o_ref, tile, barrier):
        left = lax.rem(lax.axis_index("x") + lax.axis_size("x") - 1, lax.axis_size("x"))
        plgpu.copy_gmem_to_smem(plgpu.remote_ref(x_ref, left).at[0], tile, barrier)
        plgpu.barrier_wait(barrier)
        o_ref[0] = tile[...]

    scratch = [plgpu.SMEM((128,), jnp.float32), plgpu.Barrier(num_arrivals=1)]
    p = protocol(gpu_call(kernel, grid=(1,), scratch=scratch), devices=4)
    [copy] = [i for i in body(p, device=0) if isinstance(i, ir.DmaStart)]
    assert (copy.src.buffer, copy.src_device, copy.dst.buffer, copy.device) == ("x_ref", 3, "tile", None)
    assert any("TMA load from a peer's memory" in note for note in p.notes)


def remote_load(ordered: bool) -> ir.Protocol:
    """Device 1 TMA-loads device 0's stage; device 0 writes the stage, then (or, unordered,
    without) signals device 1, which starts the load after its wait."""
    p = ProtocolBuilder("remote_load", devices=2, cores=1, backend="gpu")
    stage = p.buffer("stage", (4,), space="gmem", scope=Scope.DEVICE)
    tile = p.buffer("tile", (4,), space="smem")
    ready = p.global_semaphore("ready")
    landed = p.semaphore("landed")
    owner, reader = p.thread(0, 0), p.thread(1, 0)
    owner.store(stage.region(0, size=(4,)))
    owner.signal(ready, 1, device=1)
    if ordered:
        reader.wait(ready, 1)
    reader.dma_start(stage.region(0, size=(4,)), tile.region(0, size=(4,)), recv_sem=landed, nbytes=16, src_device=0)
    reader.wait(landed, 1)
    reader.load(tile.region(0, size=(4,)))
    if not ordered:
        reader.wait(ready, 1)
    return p.build()


def test_a_remote_tma_load_races_with_the_owners_store_unless_a_signal_orders_them():
    assert _verdicts(remote_load(ordered=True)) == {("safe", frozenset())}
    [(verdict, races)] = _verdicts(remote_load(ordered=False))
    store_line = remote_load(ordered=False).threads[0].body[0].loc.line
    assert verdict == "violation" and any(store_line in race for race in races)


def test_a_remote_tma_load_from_outside_the_mesh_faults_in_both_engines():
    p = ProtocolBuilder("outside", devices=2, cores=1, backend="gpu")
    stage = p.buffer("stage", (4,), space="gmem", scope=Scope.DEVICE)
    tile = p.buffer("tile", (4,), space="smem")
    landed = p.semaphore("landed")
    for d in range(2):
        p.thread(d, 0).dma_start(stage.region(0, size=(4,)), tile.region(0, size=(4,)), recv_sem=landed,
                                 nbytes=16, src_device=d + 1)
    for engine in ("explicit", "z3"):
        result = check_protocol(p.build(), engine=engine)
        assert "invalid_device_id" in {v.kind for v in result.violations}, engine
