"""Mosaic GPU constructs semcheck does not model, each refused with an error that names it
and the kernel's line (never a silent "safe"). docs/gpu.md, "What the GPU frontend models", lists
them. Names are JAX 0.10.2's primitive names (jax/_src/pallas/mosaic_gpu/primitives.py)."""

from __future__ import annotations

from semcheck.lower.gpu_kernel import GPU, GpuThreadLowering
from semcheck.lower.registry import rule

REFUSED = {
    "inline_mgpu_p": "plgpu.inline_mgpu runs Mosaic GPU code that semcheck cannot see (named "
                   "barriers, bar.sync / bar.arrive, any PTX), so what it synchronizes is unknown",
    "async_store_smem": "plgpu.async_store_smem (an asynchronous register-to-SMEM store) is not "
                        "modelled by semcheck yet",
    # JAX 0.10.2 binds try_cluster_cancel first (plgpu.dynamic_scheduling_loop, as the wheel's
    # blackwell_matmul_mgpu.py uses it): which blocks do which work is decided at run time.
    "try_cluster_cancel": "plgpu.try_cluster_cancel (dynamic block scheduling, also inside "
                          "plgpu.dynamic_scheduling_loop) is not modelled by semcheck",
    "query_cluster_cancel": "plgpu.try_cluster_cancel / query_cluster_cancel (dynamic block "
                            "scheduling) is not modelled by semcheck",
    "async_copy_scales_to_tmem": "plgpu.async_copy_scales_to_tmem is not modelled by semcheck yet",
    "async_copy_sparse_metadata_to_tmem": "plgpu.async_copy_sparse_metadata_to_tmem is not modelled "
                                          "by semcheck yet",
    "griddepcontrol_wait": "plgpu.griddepcontrol_wait orders this kernel after the one launched "
                           "before it (programmatic dependent launch); semcheck checks a GPU "
                           "kernel alone",
    "griddepcontrol_launch_dependents": "plgpu.griddepcontrol_launch_dependents lets the next "
                                        "kernel start early (programmatic dependent launch); "
                                        "semcheck checks a GPU kernel alone",
}


def _refuse(t: GpuThreadLowering, eqn, inputs):
    raise t.error(eqn, REFUSED[eqn.primitive.name] + " (the kernel cannot be checked)")


for _name in REFUSED:
    rule(_name, backend=GPU)(_refuse)
