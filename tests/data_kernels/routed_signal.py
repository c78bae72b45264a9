"""Routing computed in the kernel from the gating logits the script passes.

Each device takes the top-2 experts of its gating row (lax.top_k), keeps them in SMEM and
reads the first back: `expert // LOCAL_EXPERTS` is the device it signals and
`expert % LOCAL_EXPERTS` the semaphore. The script's logits route device d to expert
(2*d + 3) % EXPERTS, so every device receives exactly one signal, on a semaphore it then
waits on. routed_signal_wrong_wait.py sets BUGGY: each device then waits on the other
local semaphore, which nobody signals.

Expected verdict: safe
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

LOCAL_EXPERTS = 2
BUGGY = False


def kernel(logits_ref, o_ref, route_ref, sems):
    n = lax.axis_size("x")
    _top, index = lax.top_k(logits_ref[0, :], 2)  # the router, evaluated on the script's logits
    route_ref[0] = index[0]
    route_ref[1] = index[1]
    expert = route_ref[0]
    pl.semaphore_signal(sems.at[expert % LOCAL_EXPERTS], 1,
                        device_id=(expert // LOCAL_EXPERTS,), device_id_type=pl.DeviceIdType.MESH)
    # Who routes to me: the script's routing is a rotation, so exactly one peer, on the
    # semaphore of my expert (2*me + 3) % experts ... recomputed from the same table.
    me = lax.axis_index("x")
    mine = (2 * ((me - 1 + n) % n) + 3) % (n * LOCAL_EXPERTS) % LOCAL_EXPERTS
    waited = (1 - mine) if BUGGY else mine
    pl.semaphore_wait(sems.at[waited], 1)


def run(devices: int):
    experts = devices * LOCAL_EXPERTS
    mesh = Mesh(np.array(jax.devices()[:devices]), ("x",))
    target = [(2 * d + 3) % experts for d in range(devices)]
    logits = np.zeros((devices, experts), np.float32)
    for d, e in enumerate(target):
        logits[d, e] = 10.0
        logits[d, (e + 1) % experts] = 5.0

    def per_device(block):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
            out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
            scratch_shapes=[pltpu.SMEM((2,), jnp.int32), pltpu.SemaphoreType.REGULAR((LOCAL_EXPERTS,))],
        )(block)

    fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    return fn(jnp.asarray(logits))


if __name__ == "__main__":
    run(jax.device_count())
