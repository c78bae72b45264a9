"""Blackwell tensor-core (tcgen05) operations and their mbarrier arrivals, rules for the
"gpu" backend.

What JAX 0.10.2 states (jax/_src/pallas/mosaic_gpu/primitives.py): `tcgen05_mma` is an
"asynchronous matrix-multiply accumulate" whose `b` operand, and `a` unless it is in TMEM,
are SMEM refs; `async_copy_smem_to_tmem` copies SMEM to TMEM asynchronously; and
`tcgen05_commit_arrive(barrier)` "tracks completion of all preceding tcgen05_mma and
async_copy_smem_to_tmem calls" of the issuing thread, arriving on the barrier (which must
have `orders_tensor_core=True`) once they have completed. `tcgen05_mma(..., barrier=b)` is
the MMA followed by that commit (`_tcgen05_mma_lowering`: `tcgen05.commit_arrive` after
`tcgen05.mma`, lowered to one `nvvm.tcgen05_commit`, an arrival of one, on a barrier that
`_get_barrier` does not scale by the warpgroup size).

How semcheck models it: each SMEM operand an operation reads is a copy in flight from its
issue until it completes (at any later point), so a store into the operand before the
barrier wait that follows the commit is a `data_race`. Completions count on a semaphore of
the issuing thread's tensor core, a thread of its own (numbered after the block's warps)
that, for each commit in turn, waits for the commit to be issued and for every operation
issued before it to complete, then arrives on the commit's barrier. The MMA's writes to its
TMEM accumulator, and TMEM itself, are not race-checked (a note says so).
"""

from __future__ import annotations

import dataclasses

from semcheck import ir
from semcheck.ir import Scope, SemKind, SemOrigin
from semcheck.lower.emitter import Emitter
from semcheck.lower.gpu_kernel import GPU, GpuThreadLowering
from semcheck.lower.gpu_memory import smem_region, split_flat
from semcheck.lower.registry import rule
from semcheck.records import record

TCGEN05_NOTE = (
    "Mosaic GPU tcgen05: an MMA (and async_copy_smem_to_tmem) reads its SMEM operands until it "
    "completes, and tcgen05_commit_arrive (or tcgen05_mma's barrier=) arrives once on its "
    "mbarrier when every tcgen05 operation its thread issued before it has completed "
    "(jax/_src/pallas/mosaic_gpu/primitives.py, tcgen05_mma and tcgen05_commit_arrive, JAX "
    "0.10.2); each issuing thread's tensor core is a thread of the protocol, numbered after the "
    "block's warps; writes to TMEM are not checked for data races"
)


@record
class TensorCore:
    """The tensor core's side of one issuing thread (see the module docstring)."""

    emitter: Emitter
    sub: int
    done: str  # REGULAR semaphore: one count per completed operand read
    commits: str  # REGULAR semaphore: one count per commit the thread issued
    operands: str  # a buffer with one cell per operand read: each copy's nominal destination
    issued: int = 0


def _tensor_core(t: GpuThreadLowering, eqn) -> TensorCore:
    tc = t.tensor_core
    if tc is None:
        ctx = t.kernel
        suffix = f"_thread{t.sub}" if ctx.num_threads > 1 or t.sub else ""
        done, commits, operands = (ctx.unique(f"tcgen05_{what}{suffix}") for what in ("done", "commits", "operands"))
        for name, shown_as in ((done, "the tensor core's reads of this thread's operands"),
                               (commits, "the tcgen05 commits of this thread")):
            ctx.semaphores[name] = ir.SemDecl(name, SemKind.REGULAR, 1, SemOrigin.SCRATCH, Scope.CORE, None, t.loc(eqn),
                                              shown_as=shown_as)
        ctx.buffers[operands] = ir.BufferDecl(operands, (0,), 1, "smem", Scope.CORE, t.loc(eqn))
        # Issuers are numbered below 4 * num_threads (a Pallas thread and its warps).
        tc = t.tensor_core = TensorCore(Emitter(), 4 * ctx.num_threads + t.sub, done, commits, operands)
        ctx.note(TCGEN05_NOTE)
    return tc


def _require_straight_line(t: GpuThreadLowering, eqn) -> None:
    t.require_straight_line(eqn, eqn.primitive.name, "counts a thread's tcgen05 operations")


def _issue_read(t: GpuThreadLowering, eqn, region: ir.Region) -> None:
    """An SMEM operand read by the tensor core from now until the operation completes."""
    tc = _tensor_core(t, eqn)
    cell = tc.issued
    tc.issued += 1
    decl = t.kernel.buffers[tc.operands]
    t.kernel.buffers[tc.operands] = dataclasses.replace(decl, shape=(tc.issued,))
    t.emitter.emit(ir.DmaStart(
        t.loc(eqn), src=region, dst=ir.Region(tc.operands, (cell,), (1,)),
        recv_sem=ir.SemRef(tc.done, 0),
        nbytes=1,  # only a label: a REGULAR semaphore gains 1 per completion
    ))


def _commit(t: GpuThreadLowering, eqn, barrier, transforms) -> None:
    from semcheck.lower.gpu_barriers import barrier_ref

    ref, info = barrier_ref(t, eqn, barrier, transforms, "the tcgen05 commit's barrier")
    if info.cluster_axes:
        raise t.error(eqn, "a tcgen05 commit to a ClusterBarrier is not supported by semcheck yet")
    tc = _tensor_core(t, eqn)
    loc = t.loc(eqn)
    t.emitter.emit(ir.Signal(loc, ir.SemRef(tc.commits, 0), 1))
    tc.emitter.emit(ir.Wait(loc, ir.SemRef(tc.commits, 0), 1, True))
    if tc.issued:
        tc.emitter.emit(ir.Wait(loc, ir.SemRef(tc.done, 0), tc.issued, False))
    tc.emitter.emit(ir.Signal(loc, ref, 1))


def _operand_region(t: GpuThreadLowering, eqn, value, transforms, what: str) -> ir.Region | None:
    """The SMEM region an operand covers; None for a TMEM operand (not race-checked)."""
    from semcheck.lower.memory import ref_of

    ref, _ = ref_of(t, eqn, value, what, transforms)
    decl = t.kernel.buffers.get(ref.alloc)
    if decl is not None and decl.space == "tmem":
        return None
    region = smem_region(t, eqn, value, what, transforms)
    if region is None:
        raise t.error(eqn, f"{what} is a plgpu.remote_ref: a tcgen05 operand is in the block's own memory")
    return region


@rule("tcgen05_mma", backend=GPU)
def tcgen05_mma(t: GpuThreadLowering, eqn, inputs):
    params = eqn.params
    if params.get("collective_axis") is not None:
        raise t.error(eqn, "a collective tcgen05_mma (collective_axis, across a block pair) is not "
                      "supported by semcheck yet")
    _require_straight_line(t, eqn)
    _acc, a, b, _accumulate, *rest = inputs
    arrive = bool(params["arrive"])
    barrier = rest.pop(0) if arrive else None
    scaled, sparse = bool(params["scaled"]), bool(params["sparse"])
    rest = rest[(2 if scaled else 0) + (1 if sparse else 0):]  # scales and sparse metadata: TMEM
    trees = [params[k] for k in ("acc_transforms_tree", "a_transforms_tree", "b_transforms_tree",
                                 "barrier_transforms_tree")]
    leaves = []
    for tree in trees:
        n = tree.num_leaves if tree is not None else 0
        leaves.append(tree.unflatten(rest[:n]) if tree is not None else ())
        rest = rest[n:]
    _acc_tr, a_tr, b_tr, bar_tr = leaves
    for value, transforms, what in ((a, a_tr, "the MMA's a operand"), (b, b_tr, "the MMA's b operand")):
        region = _operand_region(t, eqn, value, transforms, what)
        if region is not None:
            _issue_read(t, eqn, region)
    if arrive:
        _commit(t, eqn, barrier, bar_tr)
    return []


@rule("tcgen05_commit_arrive", backend=GPU)
def tcgen05_commit_arrive(t: GpuThreadLowering, eqn, inputs):
    params = eqn.params
    if params.get("collective_axis") is not None:
        raise t.error(eqn, "a collective tcgen05_commit_arrive (collective_axis) is not supported by "
                      "semcheck yet")
    _require_straight_line(t, eqn)
    barrier, *flat = inputs
    tree = params["barrier_transforms_tree"]
    transforms = tree.unflatten(flat) if tree is not None else ()
    _commit(t, eqn, barrier, transforms)
    return []


@rule("async_copy_smem_to_tmem", backend=GPU)
def async_copy_smem_to_tmem(t: GpuThreadLowering, eqn, inputs):
    params = eqn.params
    if params.get("collective_axis") is not None:
        raise t.error(eqn, "a collective async_copy_smem_to_tmem is not supported by semcheck yet")
    _require_straight_line(t, eqn)
    src, _dst, *flat = inputs
    [src_tr, _dst_tr, _] = split_flat(flat, params["smem_tree"], params["tmem_tree"])
    region = _operand_region(t, eqn, src, src_tr, "the copy source")
    if region is not None:
        _issue_read(t, eqn, region)
    return []


def _tmem_access(t: GpuThreadLowering, eqn, inputs):
    """TMEM loads and stores (and their waits, and commit_tmem): not race-checked; the
    result is data."""
    from semcheck.lower.values import Opaque

    t.kernel.note(TCGEN05_NOTE)
    return [Opaque(f"the result of {eqn.primitive.name} at {t.loc(eqn)}") for _ in eqn.outvars]


for _name in ("async_load", "async_store_tmem", "wait_load_tmem", "commit_tmem"):  # async_load: async_load_tmem
    rule(_name, backend=GPU)(_tmem_access)
