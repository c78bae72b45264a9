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

from semcheck.jax_compat import jax_internal

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
    dtypes = jax_internal("dtypes")
    sharding_impls = jax_internal("sharding_impls")
    mlir = jax_internal("mlir")

    axis_context = ctx.module_context.axis_context
    names = tuple(axis_context.mesh.axis_names) if isinstance(axis_context, sharding_impls.SPMDAxisContext) else ()
    sizes = tuple(int(capture.mesh.axis_sizes[capture.mesh.axis_names.index(n)]) for n in names) \
        if tuple(capture.mesh.axis_names) == names else ()
    if len(sizes) != len(names):
        return  # a mesh semcheck does not lay out: no values (the lowering says so if it needs them)
    if names and set(axis_context.manual_axes) != set(names):
        return  # a partly automatic shard_map: no per-device shards to call back with
    numeric = [k for k, aval in enumerate(ctx.avals_in) if not dtypes.issubdtype(aval.dtype, dtypes.extended)]

    def received(*args):
        coords, values = args[:len(names)], args[len(names):]
        device = 0
        for coord, size in zip(coords, sizes):
            device = device * size + int(np.asarray(coord))
        arrays = {k: np.array(v) for k, v in zip(numeric, values)}  # host buffers: copy them
        with _lock:
            if device in capture.operand_values:
                return
            capture.operand_values[device] = arrays
            earlier = _ran.setdefault(device, set())
            if earlier - {id(capture)}:
                capture.after_other_kernel.add(device)
            earlier.add(id(capture))

    def call_back(*operands):
        coords = [lax.axis_index(n) for n in names]
        _operands_primitive().bind(*coords, *[operands[k] for k in numeric], callback=received)
        return []

    mlir.lower_fun(call_back, multiple_results=True)(ctx, *in_nodes)


_primitive = None


def _operands_primitive():
    """`jax.debug.callback` without its impl: the same lowering (a per-device host callback
    in a fully manual shard_map, with JAX's debug effect so it is never pruned), but the
    callback gets XLA's host buffers as they are. `debug_callback_impl` first `device_put`s
    them onto CPU device 0 (jax/_src/debugging.py, 0.10.2), and reading that copy waits for
    device 0, which may itself be waiting in a callback or a collective: the script then
    hung for good, intermittently (seen on two public fused MoE kernels)."""
    global _primitive
    if _primitive is not None:
        return _primitive
    jax_callback = jax_internal("callback")
    config = jax_internal("config")
    core = jax_internal("core")
    debugging = jax_internal("debugging")
    sharding_impls = jax_internal("sharding_impls")
    mlir = jax_internal("mlir")
    xc = jax_internal("xla_client")

    primitive = core.Primitive("semcheck_operand_values")
    primitive.multiple_results = True
    primitive.def_effectful_abstract_eval(lambda *avals, callback: ([], {debugging.debug_effect}))

    def lowering(ctx, *args, callback):
        # The shardings debug_callback_lowering gives (same file): per device in a manual
        # shard_map, once on device 0 under automatic sharding, none without partitioning.
        axis_context = ctx.module_context.axis_context
        sharding: object = None
        if isinstance(axis_context, sharding_impls.SPMDAxisContext):
            if config.use_shardy_partitioner.value:
                sharding = jax_callback._get_sdy_array_list_for_callbacks(ctx.avals_out)
            else:
                sharding = xc.OpSharding()
                sharding.type = xc.OpSharding.Type.MANUAL
        elif isinstance(axis_context, sharding_impls.ShardingContext):
            if config.use_shardy_partitioner.value:
                sharding = sharding_impls.SdyArrayList((sharding_impls.SdyArray(
                    mesh_shape=(), dim_shardings=(), logical_device_ids=(0,)),))
            else:
                sharding = xc.OpSharding()
                sharding.type = xc.OpSharding.Type.MAXIMAL
                sharding.tile_assignment_dimensions = [1]
                sharding.tile_assignment_devices = [0]

        def host(*buffers):
            callback(*buffers)
            return ()

        result, _, _ = jax_callback.emit_python_callback(
            ctx, host, None, list(args), ctx.avals_in, ctx.avals_out,
            has_side_effect=True, returns_token=True, partitioned=False, sharding=sharding)  # type: ignore[arg-type]
        return result

    mlir.register_lowering(primitive, lowering, platform="cpu")
    _primitive = primitive
    return primitive
