"""Mosaic GPU atomics (`plgpu.atomic_add`, `atomic_max`, `atomic_min`, `atomic_and`,
`atomic_or`, `atomic_xor`), rules for the "gpu" backend: an atomic read-modify-write of
every element of the view, on the thread's own memory or, through `plgpu.remote_ref`, on a
peer's (JAX 0.10.2: all bind `mgpu_atomic_store` with the operation as `atomic_type`,
jax/_src/pallas/mosaic_gpu/primitives.py)."""

from __future__ import annotations

from semcheck import ir
from semcheck.lower.gpu_kernel import GPU, GpuThreadLowering
from semcheck.lower.gpu_memory import check_warp_access, located_region
from semcheck.lower.registry import rule

ATOMIC_NOTE = (
    "plgpu atomics (atomic_add, atomic_max, ...) are modelled as an atomic read-modify-write "
    "of each element: two atomics never race with each other, whatever their order, and an "
    "atomic races with a plain load or store of the same element like any write (JAX 0.10.2, "
    "jax/_src/pallas/mosaic_gpu/primitives.py, atomic_add: \"atomicity is only guaranteed on "
    "the element-level\"); the order two atomics take is not checked (floating-point sums may "
    "differ with it)"
)


@rule("mgpu_atomic_store", backend=GPU)
def atomic_store(t: GpuThreadLowering, eqn, inputs):
    ref, transforms, _value = eqn.params["args_tree"].unflatten(inputs)
    check_warp_access(t, eqn, "atomically update")
    reg, device = located_region(t, eqn, ref, "the atomically updated ref", transforms)
    t.kernel.note(ATOMIC_NOTE)
    t.emitter.emit(ir.Store(t.loc(eqn), reg, device, atomic=True))
    return []
