"""A Mosaic GPU kernel's values through the data path (lower/gpu_data.py, issue 26 section 3):
a device id read from an operand is the value the script passed on that device, as on TPU;
a buffer that another thread, a peer, an atomic or a TMA copy writes is not followed, and a
value read from it that decides the protocol is an error that says why. Kernels are traced
in this process with the operand values of one run (the path of `semcheck.verify`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas import mosaic_gpu as plgpu
from jax.sharding import PartitionSpec as P

from semcheck import ir
from semcheck.api import check_protocol
from semcheck.frontends.capture import capture_function, lower_captures
from tests.tpu_kernels import line_of, mesh

HERE = __file__


def lowered(kernel, peers: list[int], scratch=()):
    """`kernel(x_ref, peer_ref, o_ref, *scratch)` on as many devices as `peers` has entries,
    device d receiving peers[d] in its `peer_ref`."""
    m = mesh((len(peers),))

    def per_device(x, peer):
        return plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                            scratch_types=list(scratch))(x, peer)

    fn = jax.shard_map(per_device, mesh=m, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)
    x = jnp.ones((m.size * 8, 128), jnp.float32)
    peer = jnp.asarray(np.array(peers, np.int32))
    return lower_captures(capture_function(fn, x, peer, operand_values=True))


def test_a_remote_ref_device_id_read_from_an_operand_is_the_scripts_value():
    def kernel(x_ref, peer_ref, o_ref, stage):
        stage[...] = x_ref[...]
        plgpu.copy_smem_to_gmem(stage, plgpu.remote_ref(o_ref, peer_ref[0]))
        plgpu.wait_smem_to_gmem(0)

    [p], errors = lowered(kernel, [2, 0, 1], scratch=[plgpu.SMEM((8, 128), jnp.float32)])
    assert not errors
    targets = {t.device: i.dst_device for t in p.threads for i in t.body if isinstance(i, ir.DmaStart)}
    assert targets == {0: 2, 1: 0, 2: 1}
    [use] = {(u.what, u.script_inputs) for u in p.data_uses}
    assert use == ("the store destination's remote_ref device id", ("peer_ref",))
    assert any("taken from data" in note for note in p.notes)
    assert check_protocol(p).verdict.value == "safe"


def test_a_signal_target_computed_from_an_operand_is_the_scripts_value():
    def kernel(x_ref, peer_ref, o_ref, ready):
        other = peer_ref[0] + 0
        jax.experimental.pallas.semaphore_signal(ready, device_id=other)
        jax.experimental.pallas.semaphore_wait(ready)

    [p], errors = lowered(kernel, [1, 0], scratch=[plgpu.SemaphoreType.REGULAR])
    assert not errors
    signals = {t.device: i.sem.device for t in p.threads for i in t.body if isinstance(i, ir.Signal)}
    assert signals == {0: 1, 1: 0}
    assert check_protocol(p).verdict.value == "safe"


def test_a_value_read_from_a_buffer_a_peer_writes_is_not_followed():
    def kernel(x_ref, peer_ref, o_ref, ids, ready):
        ids[1] = peer_ref[0]  # the thread's own store...
        plgpu.remote_ref(ids, peer_ref[0])[1] = peer_ref[0]  # ...and a peer's, into the same element
        jax.experimental.pallas.semaphore_signal(ready, device_id=ids[1])  # which id? the peer's

    found, [e] = lowered(kernel, [1, 0], scratch=[plgpu.GMEM((2,), jnp.int32), plgpu.SemaphoreType.REGULAR])
    assert not found
    assert "which a peer writes through plgpu.remote_ref" in e.message
    assert e.line == line_of(HERE, "jax.experimental.pallas.semaphore_signal(ready, device_id=ids[1])")


def test_an_unknown_remote_ref_device_id_is_named_once():
    """The message once read "the the store destination (remote_ref) device id"."""
    def kernel(x_ref, peer_ref, o_ref, stage):
        stage[...] = x_ref[...]
        plgpu.copy_smem_to_gmem(stage, plgpu.remote_ref(o_ref, o_ref[0, 0].astype(jnp.int32)))
        plgpu.wait_smem_to_gmem(0)

    found, [e] = lowered(kernel, [1, 0], scratch=[plgpu.SMEM((8, 128), jnp.float32)])
    assert "the the" not in e.message
    assert "the store destination's remote_ref device id depends on the value loaded from o_ref" in e.message
