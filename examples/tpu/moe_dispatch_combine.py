"""Fused MoE dispatch and combine across devices, with routing computed in the kernel.

Every device holds TOKENS tokens and LOCAL_EXPERTS experts (expert e lives on device
e // LOCAL_EXPERTS). One call of the kernel:

1. zeroes its mailbox (the bank each local expert receives tokens in), then passes an
   all-to-all entry barrier, so no peer pushes into the mailbox before it is clean;
2. routes: top-TOP_K of the gating logits per token (iterated argmax, as Mosaic lowers it),
   a per-expert histogram, and the routing table copied VMEM -> SMEM;
3. all-gathers the histograms (the metadata) by remote DMA, waiting for all of them with
   one aggregate byte-count wait through a self-addressed descriptor; the metadata shares
   its receive semaphore with the scatter of local expert 0, so a second barrier keeps any
   scatter row from landing before the metadata wait;
4. scatters every (token, choice) row to its expert's mailbox: a pair of copies, one local
   and one remote, sized `pl.ds(start, size)` with traced sizes, the one not taken getting
   0 rows; the target device is `e // LOCAL_EXPERTS` and the semaphore index
   `e % LOCAL_EXPERTS`, both read from the routing table;
5. waits for its experts' rows (the all-gathered counts summed, one aggregate wait per
   expert), runs the experts, and returns each row to the device it came from, then waits
   for its own TOKENS * TOP_K rows and combines them.

Every copy is waited for by its sender and its receiver, and no buffer is touched while a
copy into or out of it is in flight.
"""

# semcheck: expect safe

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

TOKENS = 4  # per device
TOP_K = 2
LOCAL_EXPERTS = 2
HIDDEN = 128


def top_k_routes(logits):
    """(TOKENS, TOP_K) expert ids: the TOP_K largest logits of each token, by repeated argmax."""
    expert = lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    choice = lax.broadcasted_iota(jnp.int32, (logits.shape[0], TOP_K), 1)
    routes = jnp.zeros((logits.shape[0], TOP_K), jnp.int32)
    for k in range(TOP_K):
        best = jnp.argmax(logits, axis=1, keepdims=True).astype(jnp.int32)
        routes = jnp.where(choice == k, best, routes)
        logits = jnp.where(expert == best, -jnp.inf, logits)
    return routes


def moe_kernel(gating_ref, tokens_hbm, out_ref,
               routes_vmem, routes_smem, counts_vmem, counts_smem, slots_smem, sent_smem,
               mailbox, expert_out, returned,
               local_sem, send_sems, recv_sems, gather_send, gather_recv):
    my_id = lax.axis_index("x")
    num_devices = lax.axis_size("x")
    num_experts = num_devices * LOCAL_EXPERTS
    barrier = pltpu.get_barrier_semaphore()

    def all_devices_barrier():
        for d in range(num_devices):
            pl.semaphore_signal(barrier, 1, device_id=(d,))
        pl.semaphore_wait(barrier, num_devices)

    # 1. A clean mailbox before anyone may push into it.
    mailbox[...] = jnp.zeros_like(mailbox)
    all_devices_barrier()

    # 2. Routing, in the kernel.
    routes = top_k_routes(gating_ref[...])
    routes_vmem[...] = routes
    pltpu.sync_copy(routes_vmem, routes_smem)
    experts = lax.broadcasted_iota(jnp.int32, (TOKENS, TOP_K, num_experts), 2)
    histogram = jnp.sum((routes[:, :, None] == experts).astype(jnp.int32), axis=(0, 1))
    counts_vmem[pl.ds(my_id, 1), :] = histogram[None, :]

    # 3. Metadata all-gather: my histogram row to every peer.
    for offset in range(1, num_devices):
        peer = lax.rem(my_id + offset, num_devices)
        pltpu.make_async_remote_copy(
            counts_vmem.at[pl.ds(my_id, 1)], counts_vmem.at[pl.ds(my_id, 1)],
            send_sems.at[0], recv_sems.at[0], device_id=(peer,),
        ).start()
    if num_devices > 1:
        peers_rows = counts_vmem.at[pl.ds(0, num_devices - 1)]  # a descriptor for the byte count
        pltpu.make_async_copy(peers_rows, peers_rows, recv_sems.at[0]).wait()
        pltpu.make_async_copy(peers_rows, peers_rows, send_sems.at[0]).wait()
    pltpu.sync_copy(counts_vmem, counts_smem)
    # recv_sems[0] is the scatter's too: no peer may scatter before everyone has its metadata.
    all_devices_barrier()

    # 4. Scatter every (token, choice) to its expert.
    for e in range(num_experts):
        slots_smem[e] = 0
    for le in range(LOCAL_EXPERTS):
        sent_smem[le] = 0
    for t in range(TOKENS):
        for k in range(TOP_K):
            e = routes_smem[t, k]
            target = e // LOCAL_EXPERTS
            local_expert = e % LOCAL_EXPERTS
            slot = slots_smem[e]
            slots_smem[e] = slot + 1
            start = slot
            for d in range(num_devices):
                start = start + jnp.where(d < my_id, counts_smem[d, e], 0)
            local_rows = jnp.where(target == my_id, 1, 0)
            remote_rows = 1 - local_rows
            sent_smem[local_expert] = sent_smem[local_expert] + remote_rows
            pltpu.make_async_copy(
                tokens_hbm.at[pl.ds(t, local_rows)],
                mailbox.at[local_expert, pl.ds(start, local_rows)],
                recv_sems.at[local_expert],
            ).start()
            pltpu.make_async_remote_copy(
                tokens_hbm.at[pl.ds(t, remote_rows)],
                mailbox.at[local_expert, pl.ds(start, remote_rows)],
                send_sems.at[local_expert], recv_sems.at[local_expert], device_id=(target,),
            ).start()

    # 5. My experts: wait for all their rows, compute, send each row home.
    gathered_remote = 0
    for le in range(LOCAL_EXPERTS):
        my_expert = my_id * LOCAL_EXPERTS + le
        received = 0
        for d in range(num_devices):
            received = received + counts_smem[d, my_expert]
        rows = mailbox.at[le, pl.ds(0, received)]
        pltpu.make_async_copy(rows, rows, recv_sems.at[le]).wait()
        sent = mailbox.at[le, pl.ds(0, sent_smem[le])]
        pltpu.make_async_copy(sent, sent, send_sems.at[le]).wait()
        expert_out[le] = mailbox[le] * (my_expert + 1).astype(jnp.float32)
        start = 0
        for d in range(num_devices):
            n = counts_smem[d, my_expert]
            local_rows = jnp.where(d == my_id, n, 0)
            remote_rows = n - local_rows
            gathered_remote = gathered_remote + remote_rows
            home = returned.at[pl.ds(my_expert * TOKENS, local_rows)]
            pltpu.make_async_copy(expert_out.at[le, pl.ds(start, local_rows)], home, gather_recv).start()
            pltpu.make_async_remote_copy(
                expert_out.at[le, pl.ds(start, remote_rows)],
                returned.at[pl.ds(my_expert * TOKENS, remote_rows)],
                gather_send, gather_recv, device_id=(d,),
            ).start()
            start = start + n

    # Combine: every one of my TOKENS * TOP_K rows comes back once.
    back = returned.at[pl.ds(0, TOKENS * TOP_K)]
    pltpu.make_async_copy(back, back, gather_recv).wait()
    away = returned.at[pl.ds(0, gathered_remote)]
    pltpu.make_async_copy(away, away, gather_send).wait()
    for e in range(num_experts):
        slots_smem[e] = 0
    for t in range(TOKENS):
        acc = jnp.zeros((1, HIDDEN), jnp.float32)
        for k in range(TOP_K):
            e = routes_smem[t, k]
            slot = slots_smem[e]
            slots_smem[e] = slot + 1
            acc = acc + returned[pl.ds(e * TOKENS + slot, 1), :]
        out_ref[pl.ds(t, 1), :] = acc


def fused_moe(gating, tokens, mesh):
    n = mesh.size
    num_experts = n * LOCAL_EXPERTS

    def per_device(gating, tokens):
        return pl.pallas_call(
            moe_kernel,
            out_shape=jax.ShapeDtypeStruct((TOKENS, HIDDEN), jnp.float32),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[
                pltpu.VMEM((TOKENS, TOP_K), jnp.int32),  # routes_vmem
                pltpu.SMEM((TOKENS, TOP_K), jnp.int32),  # routes_smem
                pltpu.VMEM((n, num_experts), jnp.int32),  # counts_vmem: row d is device d's histogram
                pltpu.SMEM((n, num_experts), jnp.int32),  # counts_smem
                pltpu.SMEM((num_experts,), jnp.int32),  # slots_smem: rows sent to each expert so far
                pltpu.SMEM((LOCAL_EXPERTS,), jnp.int32),  # sent_smem: remote rows per send semaphore
                pltpu.VMEM((LOCAL_EXPERTS, n * TOKENS, HIDDEN), jnp.float32),  # mailbox
                pltpu.VMEM((LOCAL_EXPERTS, n * TOKENS, HIDDEN), jnp.float32),  # expert_out
                pltpu.VMEM((num_experts * TOKENS, HIDDEN), jnp.float32),  # returned
                pltpu.SemaphoreType.DMA,  # local_sem
                pltpu.SemaphoreType.DMA((LOCAL_EXPERTS,)),  # send_sems
                pltpu.SemaphoreType.DMA((LOCAL_EXPERTS,)),  # recv_sems
                pltpu.SemaphoreType.DMA,  # gather_send
                pltpu.SemaphoreType.DMA,  # gather_recv
            ],
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )(gating, tokens)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"), check_vma=False)
    )(gating, tokens)


def reference(gating, tokens):
    routes = jax.vmap(top_k_routes)(gating.reshape(-1, TOKENS, gating.shape[1])).reshape(-1, TOP_K)
    return sum(tokens * (routes[:, k : k + 1] + 1).astype(jnp.float32) for k in range(TOP_K))


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    n = mesh.size
    gating = jax.random.normal(jax.random.key(0), (n * TOKENS, n * LOCAL_EXPERTS), jnp.float32)
    tokens = jax.random.normal(jax.random.key(1), (n * TOKENS, HIDDEN), jnp.float32)
    out = fused_moe(gating, tokens, mesh)
    jax.block_until_ready(out)
    print("fused moe:", out.shape, bool(jnp.allclose(out, reference(gating, tokens), atol=1e-4)))
