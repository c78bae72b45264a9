"""Lowering: a captured Pallas kernel (its jaxpr and params) to Protocols (the IR).

A registry maps each primitive name to one small rule (`registry.py`); the rules live by
family: `tpu.py` (semaphores, DMAs, barrier), `gpu_semaphores.py`, `gpu_barriers.py`, `gpu_atomics.py`, `gpu_memory.py`, `gpu_warps.py`, `gpu_tcgen05.py`, `gpu_unsupported.py` (Mosaic GPU, overriding per backend; `gpu_kernel.py` lays out its threads), `control.py` (cond, loops, calls, run_scoped),
`memory.py` (refs, loads, stores), `arith.py` (index arithmetic). `interpreter.py` walks a
jaxpr for one thread and folds everything else with JAX; `tpu_kernel.py` lays out the threads,
the grid, the cores and the default device barrier.

This package imports JAX; nothing downstream of the IR does.
"""

from semcheck.lower import arith, control, gpu_atomics, gpu_barriers, gpu_memory, gpu_semaphores, gpu_tcgen05, gpu_unsupported, gpu_warps, memory, tpu  # noqa: F401  (register the rules)
from semcheck.lower.context import MeshShape
from semcheck.lower.tpu_kernel import KernelCapture, KernelFlow, lower_kernel

__all__ = ["KernelCapture", "KernelFlow", "MeshShape", "lower_kernel"]
