"""The concrete operand values of each kernel call, as the script runs it.

The capture hooks (frontends/capture.py) see a kernel when the script's jitted code is lowered for
CPU, where its operands are MLIR values, not arrays. So the hook also lowers, in the same
place, a `jax.debug.callback` that receives the kernel's operands and the device's mesh
coordinates (`lax.axis_index` of every axis of the enclosing shard_map): when the compiled
program runs, each device calls back with its own shard, and `KernelCapture.operand_values`
gets device -> operand index -> numpy array. This is JAX's own mechanism for seeing
per-device values inside shard_map (jax/_src/debugging.py, 0.10.2); nothing is evaluated
twice and the script's own computation is untouched.

Only the first call of a kernel on each device is kept: the verdict is for the values the
script passed the first time. The capture replaces every kernel's outputs with zeros, so a
kernel that first runs on a device after another kernel ran there may be fed those zeros:
its values on that device are not used (`KernelCapture.after_other_kernel`). A kernel that was lowered but never run (e.g. `.lower()`
only) has no values; then the data path cannot be evaluated and says so.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_ran: dict[int, set[int]] = {}  # device -> ids of the captures that ran on it


def forget_runs() -> None:
    """Start a capture session: kernels that ran in an earlier one (an earlier in-process
    `semcheck.verify`) did not run before this session's kernels."""
    with _lock:
        _ran.clear()


def record_operands(ctx, in_nodes, capture) -> None:
    import numpy as np
    from jax import lax
    from jax._src import dtypes, sharding_impls
    from jax._src.interpreters import mlir

    import jax

    axis_context = ctx.module_context.axis_context
    names = tuple(axis_context.mesh.axis_names) if isinstance(axis_context, sharding_impls.SPMDAxisContext) else ()
    sizes = tuple(int(capture.mesh.axis_sizes[capture.mesh.axis_names.index(n)]) for n in names) \
        if tuple(capture.mesh.axis_names) == names else ()
    if len(sizes) != len(names):
        return  # a mesh semcheck does not lay out: no values (the lowering says so if it needs them)
    numeric = [k for k, aval in enumerate(ctx.avals_in) if not dtypes.issubdtype(aval.dtype, dtypes.extended)]

    def received(*args):
        coords, values = args[:len(names)], args[len(names):]
        device = 0
        for coord, size in zip(coords, sizes):
            device = device * size + int(np.asarray(coord))
        with _lock:
            if device in capture.operand_values:
                return
            capture.operand_values[device] = {k: np.asarray(v) for k, v in zip(numeric, values)}
            earlier = _ran.setdefault(device, set())
            if earlier - {id(capture)}:
                capture.after_other_kernel.add(device)
            earlier.add(id(capture))

    def call_back(*operands):
        coords = [lax.axis_index(n) for n in names]
        jax.debug.callback(received, *coords, *[operands[k] for k in numeric])
        return []

    mlir.lower_fun(call_back, multiple_results=True)(ctx, *in_nodes)
