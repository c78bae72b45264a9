"""The cores of each chip meet at a core-local barrier before copying, as JAX's own
multi-core tests do (tests/pallas/tpu_pallas_distributed_test.py in jax-ml/jax).

The kernel runs over a TensorCoreMesh with `collective_id` set, so XLA runs no default
device barrier before the body. Inside `pl.run_scoped`, every core signals the scoped
REGULAR semaphore of every core of its chip (`device_id={'core': j}`) and waits for one
signal per core, then copies its slice. Nothing shows that the other cores have entered the
kernel before the signal: the kernel is safe when the cores of a chip enter together
(semcheck's default reading, which JAX's code assumes) and `remote_before_entry` under
`--no-assume-cores-enter-together`.
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

SLICE = (8, 128)
CORES = 2


def copy_body(x_hbm, o_hbm):
    def scoped(core_sem):
        for j in range(CORES):
            pl.semaphore_signal(core_sem, 1, device_id={"core": j})
        pl.semaphore_wait(core_sem, CORES)
        core = lax.axis_index("core")
        rows = pl.ds(core * SLICE[0], SLICE[0])
        pltpu.sync_copy(x_hbm.at[rows], o_hbm.at[rows])

    pl.run_scoped(scoped, pltpu.SemaphoreType.REGULAR)


def core_local_copy(x, mesh):
    cores = pltpu.create_tensorcore_mesh("core", num_cores=CORES)

    def per_device(block):
        return pl.kernel(
            copy_body,
            out_type=jax.ShapeDtypeStruct(block.shape, block.dtype),
            mesh=cores,
            compiler_params=pltpu.CompilerParams(
                collective_id=7, allow_collective_id_without_custom_barrier=True
            ),
        )(block)

    return jax.jit(
        jax.shard_map(per_device, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    )(x)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * CORES * SLICE[0], SLICE[1]), jnp.float32)
    jax.block_until_ready(core_local_copy(x, mesh))
