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
script passed the first time. The capture replaces every kernel's outputs with zeros, so an
operand may be an earlier kernel's zeros: frontends/provenance.py decides, per operand,
whether its value is the script's own. For operands that come from outside the program (its
arguments), that depends on whether any kernel ran before the program's run began. So that
every callback is known to belong to one run, each run of a program that holds semcheck's
callbacks runs alone while capturing (`runs_one_at_a_time`): it goes through JAX's Python
dispatch (`ExecuteReplicated.__call__`; the C++ fast path is not kept for it) and waits for
its callbacks before returning. At each kernel's first call on a device, `ran_before` gets
what ran before that run began, if anything. A kernel that was lowered but never run (e.g.
`.lower()` only) has no values; then the data path cannot be evaluated and says so.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

from semcheck.jax_compat import jax_internal

if TYPE_CHECKING:
    from semcheck.lower.tpu_kernel import KernelCapture

_lock = threading.Lock()


class _Runs:
    """What ran so far in this capture session (guarded by `_lock`)."""

    def __init__(self):
        self.first_calls: list[tuple[KernelCapture, int | None]] = []  # (capture, run) of each first call on a device
        self.count = 0  # runs of programs with semcheck's callbacks begun
        self.current: int | None = None  # the one in progress (None: none, or not known)
        self.in_flight = 0
        self.overlapped = False  # two runs were in flight at once: runs can no longer be told apart
        self.unseen: list[str] = []  # kernels lowered without a callback: when they run is not seen


_runs = _Runs()


def forget_runs() -> None:
    """Start a capture session: kernels that ran in an earlier one (an earlier in-process
    `semcheck.verify`) did not run before this session's kernels."""
    global _runs
    with _lock:
        _runs = _Runs()


def _before_this_run(capture) -> str | None:
    """What ran before the run of `capture`'s program now in progress began (None: no kernel
    did, so none can have fed the program's arguments)."""
    from semcheck.frontends.provenance import ZEROS, kernel_label

    runs = _runs
    if runs.unseen:
        return (f"{runs.unseen[0]} is a kernel semcheck saw compiled but cannot see run, so it may have run "
                f"before, and {ZEROS}")
    earlier = [c for c, run in runs.first_calls
               if not c.computed and (runs.current is None or run != runs.current)]
    if not earlier:
        return None
    refusal = earlier[0].not_computed  # why the capture did not compute its outputs (lower/exact_outputs.py)
    zeros = f"{ZEROS}; {refusal.sentence()}" if refusal is not None else ZEROS
    if runs.current is None:
        return (f"{kernel_label(earlier[0])} ran before it, and semcheck cannot tell whether in an earlier run "
                f"of a program, whose outputs may have become this program's arguments ({zeros})")
    return (f"{kernel_label(earlier[0])} ran in an earlier run of a program, whose outputs may have become "
            f"this program's arguments ({zeros})")


def _computed_before() -> list[str]:
    """The kernels whose outputs the capture computed (KernelCapture.computed) that ran in an
    earlier run of a program: the outputs this program's arguments may be."""
    from semcheck.frontends.provenance import kernel_label

    runs = _runs
    return [kernel_label(c) for c, run in runs.first_calls
            if c.computed and (runs.current is None or run != runs.current)]


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
    if len(sizes) != len(names) or (names and set(axis_context.manual_axes) != set(names)):
        # A mesh semcheck does not lay out, or a partly automatic shard_map (no per-device
        # shards to call back with): no values (the lowering says so if it needs them), and
        # when this kernel runs is not seen either.
        from semcheck.frontends.provenance import kernel_label

        with _lock:
            _runs.unseen.append(kernel_label(capture))
        return
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
            before = _before_this_run(capture)
            if before is not None:
                capture.ran_before[device] = before
            capture.computed_earlier = tuple(dict.fromkeys((*capture.computed_earlier, *_computed_before())))
            _runs.first_calls.append((capture, _runs.current))

    def call_back(*operands):
        coords = [lax.axis_index(n) for n in names]
        _operands_primitive().bind(*coords, *[operands[k] for k in numeric], callback=received)
        return []

    mlir.lower_fun(call_back, multiple_results=True)(ctx, *in_nodes)


@contextlib.contextmanager
def runs_one_at_a_time():
    """Within this block, each run of a compiled program that has host callbacks (semcheck's
    operand callbacks among them) is numbered, runs alone and returns once its callbacks
    ran, so a callback knows which run it belongs to (`_Runs.current`). JAX keeps a C++
    fast path for a jitted function whose jaxpr has no effects (jax/_src/pjit.py,
    `_get_fastpath_data`, 0.10.2), which would run later calls without Python seeing them:
    it is not kept for such programs here. A run that starts while another is in flight (a
    callback that calls a jitted function, threads) makes runs indistinguishable from then
    on (`overlapped`): every later operand from outside its program counts as possibly an
    earlier kernel's output."""
    from semcheck.jax_compat import replaced

    def no_fastpath_with_callbacks(fastpath):
        def get(executable, *args, **kwargs):
            if getattr(getattr(executable, "unsafe_call", None), "has_host_callbacks", False):
                return None
            return fastpath(executable, *args, **kwargs)

        return get

    pxla = jax_internal("pxla")
    execute = pxla.ExecuteReplicated.__call__

    def run_alone(self, *args):
        if not self.has_host_callbacks:
            return execute(self, *args)
        with _lock:
            runs = _runs
            alone = not runs.in_flight and not runs.overlapped
            if alone:
                runs.count += 1
                runs.current = runs.count
            else:
                runs.overlapped, runs.current = True, None
            runs.in_flight += 1
        try:
            out = execute(self, *args)
            if alone:
                _settle()
            return out
        finally:
            with _lock:
                runs.in_flight -= 1
                if not runs.in_flight:
                    runs.current = None

    with replaced("pjit", "_get_fastpath_data", no_fastpath_with_callbacks):
        pxla.ExecuteReplicated.__call__ = run_alone
        try:
            yield
        finally:
            pxla.ExecuteReplicated.__call__ = execute


def _settle() -> None:
    import jax

    try:
        jax.effects_barrier()
    except Exception:  # noqa: BLE001 - a runtime the script broke: its callbacks are what they are
        pass


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
                manual = xc.OpSharding()
                manual.type = xc.OpSharding.Type.MANUAL
                sharding = manual
        elif isinstance(axis_context, sharding_impls.ShardingContext):
            if config.use_shardy_partitioner.value:
                sharding = sharding_impls.SdyArrayList((sharding_impls.SdyArray(
                    mesh_shape=(), dim_shardings=(), logical_device_ids=(0,)),))
            else:
                maximal = xc.OpSharding()
                maximal.type = xc.OpSharding.Type.MAXIMAL
                maximal.tile_assignment_dimensions = [1]
                maximal.tile_assignment_devices = [0]
                sharding = maximal

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
