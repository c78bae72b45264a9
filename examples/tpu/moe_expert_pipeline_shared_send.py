"""Fused MoE whose scatter and gather share a send semaphore per slot: `data_race` with 3
local experts.

The same kernel as moe_expert_pipeline.py, except that the gather sends on the scatter's
send semaphores (`send_sems[slot]`), as if semaphores were scarce. The scatter's send waits
are deferred to the end, so when expert 2 is about to overwrite slot 0, `send_sems[0]`
may hold bytes of the scatter of experts 0 and 2 as well as of expert 0's gather: the wait
for expert 0's gather can be satisfied by scatter bytes, and the device overwrites slot 0
while expert 0's rows are still being copied out of it. With 2 local experts no slot is
reused and the sharing is harmless; from 3 it races at every device count.

moe_expert_pipeline.py is the fix: the gather's own send semaphores.
"""

# semcheck: expect data_race

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
LOCAL_EXPERTS = 3  # more local experts than expert_out slots: slots are reused
SLOTS = 2
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
               local_sem, send_sems, recv_sems, _gather_sends, gather_recv):
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
                send_sems.at[local_expert % SLOTS], recv_sems.at[local_expert], device_id=(target,),
            ).start()

    # 5. My experts: wait for all their rows, compute, send each row home.
    # expert_out has SLOTS slots; a slot is reused once the rows it sent home have left.
    gathered = []  # remote rows each local expert sent home
    for le in range(LOCAL_EXPERTS):
        slot = le % SLOTS
        my_expert = my_id * LOCAL_EXPERTS + le
        received = 0
        for d in range(num_devices):
            received = received + counts_smem[d, my_expert]
        rows = mailbox.at[le, pl.ds(0, received)]
        pltpu.make_async_copy(rows, rows, recv_sems.at[le]).wait()
        if le >= SLOTS:
            left = returned.at[pl.ds(0, gathered[le - SLOTS])]
            pltpu.make_async_copy(left, left, send_sems.at[slot]).wait()  # BUG: scatter bytes count too
        expert_out[slot] = mailbox[le] * (my_expert + 1).astype(jnp.float32)  # <- data_race
        start, remote_total = 0, 0
        for d in range(num_devices):
            n = counts_smem[d, my_expert]
            local_rows = jnp.where(d == my_id, n, 0)
            remote_rows = n - local_rows
            remote_total = remote_total + remote_rows
            home = returned.at[pl.ds(my_expert * TOKENS, local_rows)]
            pltpu.make_async_copy(expert_out.at[slot, pl.ds(start, local_rows)], home, local_sem).start()
            pltpu.make_async_remote_copy(
                expert_out.at[slot, pl.ds(start, remote_rows)],
                returned.at[pl.ds(my_expert * TOKENS, remote_rows)],
                send_sems.at[slot], gather_recv, device_id=(d,),
            ).start()  # <- data_race
            start = start + n
        gathered.append(remote_total)
        # My own tokens' rows stay here: wait for them now, so only remote sends hold the slot.
        mine = returned.at[pl.ds(my_expert * TOKENS, counts_smem[my_id, my_expert])]
        pltpu.make_async_copy(mine, mine, local_sem).wait()

    # The scatter's sends are waited for off the critical path, at the end.
    for s in range(SLOTS):
        sent = 0
        for le in range(s, LOCAL_EXPERTS, SLOTS):
            sent = sent + sent_smem[le]
        rows = mailbox.at[0, pl.ds(0, sent)]
        pltpu.make_async_copy(rows, rows, send_sems.at[s]).wait()
    for le in range(max(0, LOCAL_EXPERTS - SLOTS), LOCAL_EXPERTS):
        left = returned.at[pl.ds(0, gathered[le])]
        pltpu.make_async_copy(left, left, send_sems.at[le % SLOTS]).wait()

    # Combine: every one of my TOKENS * TOP_K rows is back once those from peers landed.
    from_peers = TOKENS * TOP_K
    for le in range(LOCAL_EXPERTS):
        from_peers = from_peers - counts_smem[my_id, my_id * LOCAL_EXPERTS + le]
    back = returned.at[pl.ds(0, from_peers)]
    pltpu.make_async_copy(back, back, gather_recv).wait()
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
                pltpu.VMEM((SLOTS, n * TOKENS, HIDDEN), jnp.float32),  # expert_out
                pltpu.VMEM((num_experts * TOKENS, HIDDEN), jnp.float32),  # returned
                pltpu.SemaphoreType.DMA,  # local_sem
                pltpu.SemaphoreType.DMA((SLOTS,)),  # send_sems: the scatter's, by local expert % SLOTS
                pltpu.SemaphoreType.DMA((LOCAL_EXPERTS,)),  # recv_sems
                pltpu.SemaphoreType.DMA((SLOTS,)),  # gather_sends, by expert_out slot
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
    print("fused moe, shared send semaphores:", out.shape, bool(jnp.allclose(out, reference(gating, tokens), atol=1e-4)))
