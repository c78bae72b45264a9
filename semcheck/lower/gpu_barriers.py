"""Mosaic GPU mbarriers and TMA loads (docs/semantics.md, "GPU specifics"), rules for the "gpu" backend.

An mbarrier (`plgpu.Barrier`) is modelled by the number of arrivals it has ever seen: phase
k completes when `(k+1) * arrivals_per_phase` arrivals have happened, and a thread's k-th
`barrier_wait` on it is a non-decrementing wait for exactly that (the hardware keeps the
phase parity per waiting thread; semantics reports a wait whose barrier is already a phase
further as `barrier_phase_overrun`). `barrier_arrive` adds one arrival; `copy_gmem_to_smem`
arrives once with its bytes, so it adds one arrival when the copy lands, and writes its SMEM
destination until then. A `ClusterBarrier` arrival reaches the barrier in every block of the
cluster along its axes, and each of those expects `num_arrivals` from every one of them.
"""

from __future__ import annotations

import itertools
import math

from semcheck import ir
from semcheck.lower.gpu_kernel import GPU, GpuThreadLowering, MBarrier
from semcheck.lower.gpu_memory import copy_bytes, located_region, smem_region, split_flat, transformed_aval
from semcheck.lower.memory import semaphore_ref
from semcheck.lower.registry import rule
from semcheck.lower.values import Known


def barrier_ref(t: GpuThreadLowering, eqn, barrier, transforms, what: str) -> tuple[ir.SemRef, MBarrier]:
    from semcheck.lower.memory import ref_of

    value, all_transforms = ref_of(t, eqn, barrier, what, transforms)
    if not all_transforms and math.prod(value.shape) == 1:
        ref = ir.SemRef(value.alloc, 0)  # a single barrier (num_barriers=1) is used unindexed
    else:
        ref = semaphore_ref(t, eqn, barrier, what, transforms)
    info = t.kernel.mbarriers.get(ref.alloc)
    if info is None:
        raise t.error(eqn, f"{what} is {ref.alloc!r}, not a plgpu.Barrier")
    return ref, info


def _cluster_peers(t: GpuThreadLowering, eqn, info: MBarrier) -> list[int]:
    """The blocks (this one included) a ClusterBarrier arrival reaches."""
    sizes = t.kernel.grid_sizes
    for axis in info.cluster_axes:
        if axis not in t.kernel.cluster_names:
            raise t.error(eqn, f"ClusterBarrier axis {axis!r} is not a cluster axis of the mesh "
                          f"({', '.join(t.kernel.cluster_names) or 'none'})")
    if len([a for a in info.cluster_axes if sizes[a] > 1]) > 1:
        raise t.error(eqn, "a ClusterBarrier over several non-trivial cluster axes is not "
                      "supported by semcheck yet", hint="use one cluster axis")
    peers = []
    for values in itertools.product(*(range(sizes[a]) for a in info.cluster_axes)):
        coords = dict(t.block_coords)
        coords.update(zip(info.cluster_axes, values))
        peers.append(t.kernel.block_of(coords))
    return peers


def _arrivals_per_phase(t: GpuThreadLowering, eqn, info: MBarrier) -> int:
    return info.num_arrivals * len(_cluster_peers(t, eqn, info))


@rule("barrier_arrive", backend=GPU)
def barrier_arrive(t: GpuThreadLowering, eqn, inputs):
    barrier, *flat = inputs
    [transforms, _] = split_flat(flat, eqn.params["transforms_treedef"])
    ref, info = barrier_ref(t, eqn, barrier, transforms, "the arrived-at barrier")
    if info.cluster_axes and t.warp is not None:
        raise t.error(eqn, "arriving on a ClusterBarrier from warp-level code (Mosaic GPU lowering "
                      "raises NotImplementedError: jax/_src/pallas/mosaic_gpu/primitives.py, "
                      "_barrier_arrive_lowering)")
    peers = _cluster_peers(t, eqn, info) if info.cluster_axes else [None]
    for block in peers:
        target = ref if block is None else ir.SemRef(ref.alloc, ref.index, None, block)
        t.emitter.emit(ir.Signal(t.loc(eqn), target, 1))
    return []


@rule("barrier_wait", backend=GPU)
def barrier_wait(t: GpuThreadLowering, eqn, inputs):
    barrier, *flat = inputs
    [transforms, _] = split_flat(flat, eqn.params["transforms_treedef"])
    ref, info = barrier_ref(t, eqn, barrier, transforms, "the waited barrier")
    if not isinstance(ref.index, int):
        raise t.error(
            eqn,
            "the barrier index is known only at run time, so semcheck cannot tell which phase "
            "this wait is for",
            hint="index barrier arrays with values derived from axis_index, program_id and "
            "static loop counters",
        )
    key = (ref.alloc, ref.index)
    if t.warp is None and key in t.diverged_phases:
        raise t.error(
            eqn,
            f"the warps of this Pallas thread waited on {ref.alloc}[{ref.index}] a different number "
            f"of times in the warp-level core_map at {t.diverged_phases[key]}, so they disagree on "
            "which phase this wait is for (Mosaic GPU keeps each lane's phase parities in its own "
            "registers: BarrierRef.wait in jax/experimental/mosaic/gpu/utils.py, JAX 0.10.2)",
            hint="wait on this barrier in warp-level code only, or equally often in every warp",
        )
    phase = t.barrier_waits.get(key, 0)
    t.barrier_waits[key] = phase + 1
    need = (phase + 1) * _arrivals_per_phase(t, eqn, info)
    t.emitter.emit(ir.Wait(t.loc(eqn), ref, need, False))
    return []


@rule("barrier_test", backend=GPU)
def barrier_test(t: GpuThreadLowering, eqn, inputs):
    raise t.error(eqn, "semcheck has no model of barrier_test (a non-blocking phase test) yet",
                  hint="use plgpu.barrier_wait")


REMOTE_TMA_LOAD_NOTE = (
    "a TMA load from a peer's memory (plgpu.copy_gmem_to_smem from a plgpu.remote_ref) reads "
    "the peer's GMEM until the copy lands and arrives on the issuer's barrier (JAX 0.10.2, "
    "jax/_src/pallas/mosaic_gpu/lowering.py, _handle_transforms: a PeerMemRef becomes the "
    "symmetric address on that device; the peer is not told), so it is race-checked on the "
    "peer's buffer until then"
)


@rule("copy_gmem_to_smem", backend=GPU)
def copy_gmem_to_smem(t: GpuThreadLowering, eqn, inputs):
    """A TMA load: arrives once on the barrier, the phase needing its bytes as well; in the
    model the arrival happens when the copy lands. Its source may be a peer's GMEM
    (plgpu.remote_ref), read until then."""
    params = eqn.params
    if not params.get("has_barrier", True):  # JAX 0.11: the pre-Hopper cp.async copy
        raise t.error(eqn, "a copy without a barrier (the cp.async copy of pre-Hopper GPUs, awaited "
                      "by wait_gmem_to_smem; JAX 0.11) is not modelled by semcheck yet",
                      hint="pass a plgpu.Barrier and wait on it (the TMA copy)")
    src, dst, barrier, *flat = inputs
    src_tr, dst_tr, bar_tr, rest = split_flat(
        flat, params["src_transforms_treedef"], params["dst_transforms_treedef"], params["barrier_transforms_treedef"]
    )
    if params.get("has_user_predicate"):  # JAX 0.11: `predicate=` follows the transforms
        [predicate] = rest
        if not isinstance(predicate, Known):
            raise t.error(eqn, "copy_gmem_to_smem: a predicate known only at run time is not supported "
                          "by semcheck yet", hint="issue the copy under pl.when instead")
        if not bool(predicate.value):
            return []
    axes = tuple(params.get("collective_axes") or ())
    if any(t.kernel.grid_sizes.get(a, 1) > 1 for a in axes) or params.get("leader_tracked") is not None:
        raise t.error(eqn, "multicast and partitioned TMA copies (collective_axes over a "
                      "cluster of more than one block) are not supported by semcheck yet")
    ref, _info = barrier_ref(t, eqn, barrier, bar_tr, "the copy's barrier")
    src_region, src_device = located_region(t, eqn, src, "the copy source", src_tr)
    dst_region = smem_region(t, eqn, dst, "the copy destination", dst_tr)
    if dst_region is None:
        raise t.error(eqn, "a TMA load into a peer's memory cannot be lowered (Mosaic GPU loads into "
                      "the block's own shared memory)")
    if src_device is not None:
        t.kernel.note(REMOTE_TMA_LOAD_NOTE)
    dst_aval = transformed_aval(eqn, 1, params["dst_transforms_treedef"], params)
    t.emitter.emit(
        ir.DmaStart(
            t.loc(eqn),
            src=src_region,
            dst=dst_region,
            recv_sem=ref,
            # a TMA copy moves at least one tile; 0 bytes would complete at its start and
            # hide the SMEM write from the race check, so an unknown size counts as 1
            nbytes=max(copy_bytes(t, eqn, dst_aval), 1),
            src_device=src_device,
        )
    )
    return []
