"""Capture the Pallas kernels (TPU, and Mosaic GPU's `plgpu.kernel` / `pl.kernel` over a
`plgpu.Mesh`) of a user's script or function, through JAX's own tracing.

Scripts (`semcheck verify kernel.py --devices N`): the script runs as `python kernel.py`
would (its folder first on sys.path, `__name__ == "__main__"`) in a child process of its
own, because the number of fake CPU devices (`XLA_FLAGS=--xla_force_host_platform_device_count=N`)
must be set before JAX starts its backend: a child forked by the run's capture server, which
imported JAX once and started no backend, or a `python` subprocess (capture_process.py).
In that process semcheck registers its own CPU lowering rules for `pallas_call` and
`mpmd_map` (`pl.kernel`, `core_map`, and `plgpu.kernel`, whose mpmd_map sits inside a
`custom_vmap_call` that CPU lowering inlines) with `mlir.register_lowering(..., platform="cpu")`,
which take precedence over JAX's: when the script's jitted code is compiled, each rule
receives the kernel's jaxpr and params, reads the device mesh of the enclosing shard_map
from `ctx.module_context.axis_context`, records the kernel, and returns zeros of the output
avals so the script runs on (which operands may then hold such zeros:
frontends/provenance.py); a TPU pallas_call that lower/exact_outputs.py proves writes every
element of every output from its inputs with exact operations gets its outputs from JAX's
HLO interpreter instead (`_computed_outputs`). A nested `jax.jit` or closed call that holds a kernel is
lowered inline (`_inlined_call`), so that every call is a capture of its own among the
values around it (the program linking follows semaphores through it). After the script
ends (or fails), each recorded kernel is lowered to Protocols, which go back to the parent
pickled, together with structured errors.

Functions (`semcheck.verify(fn, *args)`, in-process): `jax.make_jaxpr(fn)(*args)`, then
every pallas_call / mpmd_map eqn is found inside its shard_map. No lowering, so no cache
can hide a kernel. The operand values come from one run of a fresh `jax.jit` of `fn` under
the hooks (`with_operand_values`).

While capturing, `emit_pipeline` needs to know the TPU generation (for tiling); semcheck
registers the CPU device kind in `pltpu`'s TPU-info registry as a TPU v6e
(`lower/tpu_hardware.py`, `tpu_generation_for_cpu`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import pickle
import runpy
import sys
import tempfile
import threading
import traceback
from dataclasses import field
from typing import Callable

from semcheck import ir
from semcheck.errors import LoadError
from semcheck.jax_compat import JaxInternalMissing, jax_internal, replaced
from semcheck.frontends.jax_removals import removed_api
from semcheck.records import record
from semcheck.version import ISSUES_URL

from semcheck.frontends.capture_process import (  # noqa: F401 (child_environment: for the cache and tests)
    capture_server_address, child_environment, how_it_ended, last_words, run_child, with_device_count,
)

# A script that has not finished after this long is stopped; kernels captured by then are
# still checked.
DEFAULT_TIMEOUT = float(os.environ.get("SEMCHECK_CAPTURE_TIMEOUT", "600"))


@record
class KernelError:
    """A kernel that was captured but cannot be lowered (picklable form of a LoadError)."""

    kernel: str
    message: str
    file: str = ""
    line: int = 0
    hint: str | None = None
    prefixes: list[ir.Protocol] = field(default_factory=list)  # lowered up to the error (LoadError.prefixes)
    devices: int | None = None  # the kernel's mesh size (LoadError.devices)

    def to_load_error(self) -> LoadError:
        loc = ir.Loc(self.file, self.line) if self.file else None
        error = LoadError(self.message, loc, self.hint)
        error.kernel = self.kernel
        error.prefixes = list(self.prefixes)
        error.devices = self.devices
        return error


@record(frozen=True)
class MissingModule:
    """A module the script imports that its Python cannot find. `package_dir`: where the
    deepest package above it that did import lives (`tpu_inference.logger` missing from a
    `tpu_inference` the script put on its path): then nothing needs installing, the package
    found lacks that module."""

    name: str
    package: str | None = None
    package_dir: str | None = None


@record
class CaptureOutcome:
    protocols: list[ir.Protocol] = field(default_factory=list)
    errors: list[KernelError] = field(default_factory=list)
    captured: int = 0  # kernels JAX compiled
    script_error: str | None = None  # the script failed: why and where
    script_error_loc: ir.Loc | None = None  # the script's own line that failed (or exited), if known
    devices: int = 0  # devices the process had
    seconds: dict[str, float] = field(default_factory=dict)  # "jax import", "script", "lowering"
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # the same phases in CPU seconds
    assumptions: list = field(default_factory=list)  # the script's semcheck.assume calls
    timed_out: bool = False  # the script was stopped at the time it was given
    exited: str | None = None  # the script ended itself with sys.exit(0) (or None): how and where
    missing_module: MissingModule | None = None  # the module the script imports that is not found
    sources: dict[str, str] = field(default_factory=dict)  # user files it read -> digest (capture_cache.py)
    kept: bool = False  # served from the capture cache, not captured now
    environment: dict[str, str | None] = field(default_factory=dict)  # variables the script read -> value digest


# --- the hooks ------------------------------------------------------------------------------


@contextlib.contextmanager
def capturing(record: Callable):
    """Within this block, compiling a pallas_call or mpmd_map on CPU records a KernelCapture
    through `record` instead of compiling the kernel."""
    mlir = jax_internal("mlir")
    mpmd = jax_internal("mpmd")
    pallas_call = jax_internal("pallas_call")

    from semcheck.lower import KernelCapture, KernelFlow
    from semcheck.lower.source import loc_of_traceback

    def hook(primitive_name):
        def lowering_rule(ctx, *in_nodes, **params):
            capture = KernelCapture(
                primitive=primitive_name,
                params=params,
                num_operands=len(in_nodes),
                mesh=_mesh_of_axis_context(ctx.module_context.axis_context),
                call_loc=loc_of_traceback(getattr(ctx, "traceback", None)),
                in_avals=tuple(ctx.avals_in),
            )
            record(capture)
            from semcheck.frontends.operands import record_operands

            record_operands(ctx, in_nodes, capture)
            outs = _computed_outputs(ctx, in_nodes, params, capture)
            if outs is None:
                outs = _zeros(ctx, in_nodes)
            # What flows from one kernel to the next (semcheck/lower/program.py): the MLIR
            # values of one module, compared as values.
            capture.flow = KernelFlow(ctx.module_context, tuple(in_nodes), tuple(outs))
            return outs

        return lowering_rule

    from semcheck.frontends.operands import forget_runs, runs_one_at_a_time

    forget_runs()
    table = mlir._platform_specific_lowerings["cpu"]
    prims = {"pallas_call": pallas_call.pallas_call_p, "mpmd_map": mpmd.mpmd_map_p}
    calls = call_primitives()
    saved = {p: table.get(p) for p in (*prims.values(), *calls)}
    # Lowered inline, not through JAX's per-eqn lowering cache: the cache lowers an eqn once
    # into a detached function and clones its body at each use (jax/_src/interpreters/mlir.py,
    # `_emit_lowering_rule_as_fun`, JAX 0.10.2), so a kernel inside it (in a while loop, a
    # cond) would see the template's values, not the program's: two uses would be one
    # capture, and where an operand comes from
    # (frontends/provenance.py) could not be followed. So while capturing, no primitive
    # is cached; one that JAX registers as uncacheable meanwhile stays so after.
    uncacheable = mlir._uncacheable_primitives
    everything: set = set()
    try:
        with replaced("mlir", "_uncacheable_primitives", _EveryPrimitive) as everything:
            for name, prim in prims.items():
                mlir.register_lowering(prim, hook(name), platform="cpu", cacheable=False)
            for prim, param in calls.items():
                mlir.register_lowering(prim, _inlined_call(prim, param), platform="cpu", cacheable=False)
            from semcheck.lower.tpu_hardware import tpu_generation_for_cpu

            with tpu_generation_for_cpu(), runs_one_at_a_time():
                yield
    finally:
        uncacheable.update(p for p in everything if p not in saved)
        for prim, entry in saved.items():
            if entry is None:
                table.pop(prim, None)
            else:
                table[prim] = entry


class _EveryPrimitive(set):
    """JAX's set of primitives it lowers without its per-eqn cache, while capturing: every
    primitive is in it (those added to it are kept, to be put back)."""

    def __contains__(self, primitive) -> bool:
        return True


def call_primitives() -> dict:
    """The primitives of a nested `jax.jit` and of a closed call, with the param that holds
    the called jaxpr."""
    jax_core = jax_internal("core")
    pjit = jax_internal("pjit")

    return {pjit.jit_p: "jaxpr", jax_core.closed_call_p: "call_jaxpr"}


def _inlined_call(prim, param: str):
    """A lowering of `prim` (a nested jit, a closed call) that lowers a called jaxpr holding a
    kernel inline, into the caller's function, as JAX's own custom_jvp lowering does
    (`_custom_jvp_vjp_call_lowering` in jax/_src/custom_derivatives.py, 0.10.2). JAX lowers
    it as a func.call of a function of its own, lowered once per jaxpr and shared by every
    call site: then a kernel's operands are that function's arguments, not the values an
    earlier kernel returned, and two calls are one capture. Inlined, every call is its own
    capture among the values around it, so the program linking (semcheck/lower/program.py)
    follows a semaphore through the call. Calls without a kernel keep JAX's lowering."""
    mlir = jax_internal("mlir")

    def lowering_rule(ctx, *args, **params):
        closed = params[param]
        if not _holds_kernel(closed.jaxpr):
            return mlir._lowerings[prim].rule(ctx, *args, **params)
        consts = mlir.ir_consts(closed.consts, [v.aval for v in closed.jaxpr.constvars])
        outs, tokens = mlir.jaxpr_subcomp(
            ctx.module_context, closed.jaxpr, ctx.name_stack, ctx.tokens_in, consts, *args,
            dim_var_values=ctx.dim_var_values, const_lowering=ctx.const_lowering,
            outer_traceback=ctx.traceback)
        ctx.set_tokens_out(tokens)
        return outs

    return lowering_rule


def _holds_kernel(jaxpr) -> bool:
    from semcheck.lower.interpreter import subjaxprs

    return any(eqn.primitive.name in ("pallas_call", "mpmd_map") or any(map(_holds_kernel, subjaxprs(eqn.params)))
               for eqn in jaxpr.eqns)


def _computed_outputs(ctx, in_nodes, params, capture):
    """The kernel's outputs as JAX's HLO interpreter computes them (`interpret=True`,
    jax/_src/pallas/hlo_interpreter.py), for a TPU pallas_call that lower/exact_outputs.py
    proves writes every element of every output from its inputs alone with exact operations:
    then a later kernel's operands computed from them are the script's values, not an earlier
    kernel's zeros (frontends/provenance.py), and `capture.computed` says so. None
    (zeros) for any other kernel, with `capture.not_computed` saying why for a TPU
    pallas_call (a GPU kernel keeps zeros and says nothing)."""
    import functools

    import jax

    from semcheck.lower.exact_outputs import Refusal, Rule, interpreter, prove_exact

    if capture.primitive != "pallas_call" or params.get("jaxpr") is None or params.get("grid_mapping") is None:
        return None
    refusal = prove_exact(params, capture.primitive)
    if refusal is not None:
        capture.not_computed = refusal if refusal.rule is not Rule.NOT_TPU else None
        return None
    hlo_interpreter = interpreter()
    if isinstance(hlo_interpreter, Refusal):
        capture.not_computed = hlo_interpreter
        return None
    impl = functools.partial(hlo_interpreter.pallas_call_hlo_interpret,
                             **{k: v for k, v in params.items() if k != "interpret"})
    try:  # traced first: emitting stops nowhere half-way into the program for want of a rule
        traced = jax.make_jaxpr(impl)(*[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ctx.avals_in])
        missing = _missing_cpu_lowering(traced.jaxpr)
    except Exception as e:  # noqa: BLE001 - a kernel the HLO interpreter cannot run keeps zeros
        missing = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    if missing is not None:
        capture.not_computed = Refusal(Rule.NO_INTERPRETER, f"JAX's HLO interpreter cannot run it on the CPU "
                                                            f"({missing})")
        return None
    mlir = jax_internal("mlir")
    # Its own context: record_operands set this one's output tokens (the interpreter has no effects).
    outs = mlir.lower_fun(impl, multiple_results=True)(ctx.replace(tokens_out=None), *in_nodes)
    capture.computed = True
    return list(outs)


def _missing_cpu_lowering(jaxpr) -> str | None:
    """A primitive of `jaxpr` (or of a jaxpr in it) without a CPU lowering, named."""
    from semcheck.lower.jaxprs import subjaxprs

    mlir = jax_internal("mlir")
    cpu = mlir._platform_specific_lowerings["cpu"]
    for eqn in jaxpr.eqns:
        if eqn.primitive not in mlir._lowerings and eqn.primitive not in cpu:
            return f"`{eqn.primitive.name}` has no CPU lowering"
        for sub in subjaxprs(eqn.params):
            found = _missing_cpu_lowering(sub)
            if found is not None:
                return found
    return None


def _zeros(ctx, in_nodes):
    """The kernel's outputs as zeros, so the script can go on. A semaphore output (a kernel
    handing a semaphore to the next one) is zeros of its physical type."""
    import numpy as np
    jax_core = jax_internal("core")
    dtypes = jax_internal("dtypes")
    mlir = jax_internal("mlir")

    del in_nodes
    outs = []
    for aval in ctx.avals_out:
        if dtypes.issubdtype(aval.dtype, dtypes.extended):
            physical = jax_core.physical_element_aval(aval.dtype)
            aval = jax_core.ShapedArray(tuple(aval.shape) + tuple(physical.shape), physical.dtype)
        zero = mlir.ir_constant(np.array(0, aval.dtype))
        outs.append(mlir.broadcast_in_dim(ctx, zero, aval, broadcast_dimensions=()))
    return outs


def _mesh_of_axis_context(axis_context):
    sharding_impls = jax_internal("sharding_impls")

    from semcheck.lower import MeshShape

    if isinstance(axis_context, sharding_impls.SPMDAxisContext):
        return mesh_shape(axis_context.mesh)
    return MeshShape()


def mesh_shape(mesh):
    from semcheck.lower import MeshShape

    names = tuple(mesh.axis_names)
    shape = dict(mesh.shape)
    ids = getattr(mesh, "device_ids", None)  # an AbstractMesh has none
    return MeshShape(names, tuple(int(shape[n]) for n in names),
                     tuple(int(i) for i in ids.ravel()) if ids is not None else ())


# --- lowering what was captured ------------------------------------------------------------


def lower_captures(captures, *, tpu_cores: int | None = None, assumed=()) -> tuple[list[ir.Protocol], list[KernelError]]:
    """`assumed`: names the script's semcheck.assume calls bound (a buffer element they
    name stays a protocol input instead of its value in the data)."""
    from semcheck.lower import lower_kernel

    from semcheck.lower.program import link_programs

    lowered: list[list[ir.Protocol]] = []
    errors: list[KernelError] = []
    for j, capture in enumerate(captures):
        capture.assumed = frozenset(assumed)
        _feed(captures, j)
        lowered.append([])
        try:
            lowered[-1] = [dataclasses.replace(p, calls=(j,)) for p in lower_kernel(capture, tpu_cores=tpu_cores)]
        except LoadError as e:
            error = _kernel_error(capture, e.message, e.loc, e.hint)
            error.prefixes = [dataclasses.replace(p, calls=(j,)) for p in e.prefixes]
            errors.append(error)
        except Exception as e:  # a bug in semcheck: report it as an error, not a crash
            if os.environ.get("SEMCHECK_DEBUG"):
                raise
            errors.append(
                _kernel_error(
                    capture,
                    f"internal error while lowering the kernel: {type(e).__name__}: {e}",
                    capture.call_loc,
                    f"set SEMCHECK_DEBUG=1 to see the traceback, and please report it at {ISSUES_URL}",
                )
            )
    return _dedupe(link_programs(captures, lowered)), errors


def _feed(captures: list, j: int) -> None:
    """Hand `captures[j]` what semcheck's lowering computed of an earlier kernel's output
    (lower/produced.py) for each operand placed from it (that output itself, or its elements
    sliced, reshaped, padded with constants, offset, clipped...: frontends/placing.py), where
    that operand is withheld only because it is computed from that output (the capture's
    zeros): the producer runs once in the program, before this kernel, which runs once too.
    Where the producer's lowering does not hand its outputs on, or an op between them is one
    semcheck does not follow, the withheld reason says why."""
    from semcheck.frontends.placing import Placement
    from semcheck.lower.produced import Feed

    consumer = captures[j]
    feeds = []
    for i, placement in sorted(consumer.placed.items()):
        origins = consumer.operand_origins
        if i >= len(origins) or not [why for why in consumer.withheld.values() if i in why]:
            continue
        label = origins[i].kernels[0]
        if not isinstance(placement, Placement):
            _say_why(consumer, i, f"; semcheck's lowering of {label} hands nothing of it on: {placement.sentence()}")
            continue
        producer = captures[placement.producer]
        if producer.produced is None and producer.primitive != "pallas_call":
            continue  # a GPU kernel's lowering hands nothing on, and says nothing of it
        refused = (producer.produced.refused if producer.produced is not None
                   else "its lowering did not complete")
        refused = refused or producer.runs_once or consumer.runs_once
        if refused is None and producer.mesh != consumer.mesh:
            refused = "it runs on another mesh"
        if refused is not None:
            _say_why(consumer, i, f"; semcheck's lowering of {label} does not hand its outputs on: {refused}")
            continue
        assert producer.produced is not None
        m, steps = placement.output, placement.steps()
        outputs = {d: e for d in consumer.operand_values if (e := producer.produced.output(d, m)) is not None}
        elements = {d: placed for d, e in outputs.items() if (placed := placement.apply(e)).count()}
        if elements:
            feeds.append(Feed(i, label, m, elements, placement.producer, steps))
        # where the producer knows none of the output, its reason; where the ops between place
        # none of what it knows into the operand, theirs
        emptied = {d for d in outputs if d not in elements} if steps else set()
        say = f"; semcheck's lowering of {label} hands nothing of it on: "
        _say_why(consumer, i, say + producer.produced.why_not(m), set(elements) | emptied)
        if emptied:
            _say_why(consumer, i, say + f"{', '.join(map(str, steps))} give it no element "
                     "computed only from elements that lowering knows", set(consumer.withheld) - emptied)
    consumer.feeds = tuple(feeds)


def _say_why(consumer, operand: int, reason: str, fed: set | frozenset = frozenset()) -> None:
    """Add `reason` to why `operand` of `consumer` is withheld, on the devices not in `fed`
    (once: a capture lowered again keeps what it says)."""
    for device, why in consumer.withheld.items():
        if operand in why and device not in fed and not why[operand].endswith(reason):
            why[operand] += reason


def _kernel_error(capture, message, loc, hint) -> KernelError:
    from semcheck.lower.source import kernel_function

    jaxpr = capture.params.get("jaxpr") or (capture.params.get("jaxprs") or [None])[0]
    name = capture.params.get("name") or kernel_function(getattr(jaxpr, "debug_info", None))[0]
    loc = loc or capture.call_loc
    return KernelError(name or capture.primitive, message, loc.file if loc else "", loc.line if loc else 0, hint,
                       devices=capture.mesh.size)


def _dedupe(protocols: list[ir.Protocol]) -> list[ir.Protocol]:
    """The same kernel compiled twice is checked once; different kernels (or one kernel at
    different shapes) that share a name get #2, #3..."""
    unique: list[ir.Protocol] = []
    for p in protocols:
        same = next((n for n, q in enumerate(unique) if p == q), None)
        if same is not None:  # its check is the other's: a kernel fed by this call rests on it
            unique[same] = dataclasses.replace(unique[same], calls=unique[same].calls + p.calls)
            continue
        names = {q.name for q in unique}
        if p.name in names:
            n = 2
            while f"{p.name} #{n}" in names:
                n += 1
            p = dataclasses.replace(p, name=f"{p.name} #{n}")
        unique.append(p)
    return unique


# --- functions, in this process --------------------------------------------------------------


def capture_function(fn, *args, operand_values: bool = False, **kwargs) -> list:
    """KernelCaptures of every Pallas kernel `fn(*args, **kwargs)` calls. With
    `operand_values`, also the operand values each kernel receives from these arguments
    (`with_operand_values`)."""
    found = _kernels_in_jaxpr(fn, args, kwargs)
    return with_operand_values(found, fn, args, kwargs) if operand_values and found else found


def with_operand_values(found: list, fn, args, kwargs) -> list:
    """`found` (from the jaxpr) with the operand values the kernels receive when `fn` runs on
    `args`: a fresh `jax.jit` of `fn` runs once under the capture hooks, as a script's
    kernels run (frontends/operands.py), so each kernel's operands reach a callback per device. The
    run's kernels are matched to `found` by position, primitive and operand count; if they
    do not match (a kernel a cache hid, a function that fails when run), `found` stays
    without values, and a value that needs them is an error that says so."""
    import jax

    ran: list = []
    try:
        with capturing(ran.append):
            jax.block_until_ready(jax.jit(lambda *a, **k: fn(*a, **k))(*args, **kwargs))
            _settle_callbacks()
    except Exception:  # noqa: BLE001 - the function's own failure: its kernels are checked without values
        return found
    if [(c.primitive, c.num_operands) for c in ran] != [(c.primitive, c.num_operands) for c in found]:
        return found
    from semcheck.frontends.provenance import decide_withheld

    decide_withheld(ran)
    for kernel, run in zip(found, ran):
        kernel.operand_values = run.operand_values
        kernel.withheld = run.withheld
        kernel.own_carried = run.own_carried
        kernel.operand_origins, kernel.computed, kernel.computed_earlier = \
            run.operand_origins, run.computed, run.computed_earlier
        kernel.not_computed = run.not_computed
        kernel.placed = run.placed
    return found


def _kernels_in_jaxpr(fn, args, kwargs) -> list:
    import jax
    jax_core = jax_internal("core")

    from semcheck.lower import KernelCapture, KernelFlow, MeshShape
    from semcheck.lower.interpreter import subjaxprs
    from semcheck.lower.source import loc_of_traceback
    from semcheck.lower.tpu_hardware import tpu_generation_for_cpu

    with tpu_generation_for_cpu():
        closed = jax.make_jaxpr(fn)(*args, **kwargs)
    found = []
    calls = {prim.name: param for prim, param in call_primitives().items()}
    # plgpu.kernel's mpmd_map sits in a custom_vmap_call, whose CPU lowering is inline too
    # (jax/_src/custom_batching.py lowers it with mlir.lower_fun of the called jaxpr).
    calls["custom_vmap_call"] = "call"

    def walk(jaxpr, mesh, scope, values: dict, once: str | None):
        """`values`: a variable of this jaxpr -> the variable of `scope` it stands for (the
        arguments and results of a nested jit or closed call are the caller's values, as
        the script capture sees them once it lowers such calls inline). `once`: why a kernel
        here may not run exactly once per call of `fn` (None: it does; KernelCapture.runs_once)."""
        def value(atom):
            return values.get(atom, atom) if isinstance(atom, jax_core.Var) else atom

        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name in ("pallas_call", "mpmd_map"):
                found.append(
                    KernelCapture(name, dict(eqn.params), len(eqn.invars), mesh,
                                  loc_of_traceback(eqn.source_info.traceback),
                                  flow=KernelFlow(scope, tuple(map(value, eqn.invars)), tuple(map(value, eqn.outvars))),
                                  in_avals=tuple(v.aval for v in eqn.invars), runs_once=once)
                )
                continue
            if name in calls:
                called = eqn.params[calls[name]].jaxpr
                inner = dict(zip(called.invars, map(value, eqn.invars)))
                walk(called, mesh, scope, inner, once)
                values.update((out, inner.get(v, v) if isinstance(v, jax_core.Var) else v)
                              for out, v in zip(eqn.outvars, called.outvars))
                continue
            if name == "core_map":
                raise LoadError(
                    "pl.core_map was called outside pl.kernel, so JAX has not turned it into a "
                    "kernel yet; semcheck.verify cannot see its operands",
                    loc_of_traceback(eqn.source_info.traceback),
                    hint="use pl.kernel(body, out_shape=..., mesh=...), or check the script with "
                    "`semcheck verify`",
                )
            inner_mesh = mesh_shape(eqn.params["mesh"]) if name == "shard_map" else mesh
            # A shard_map body runs once on each device; a loop's or conditional's, any number of times.
            inner_once = once if name == "shard_map" else f"it is inside a {name} of the program"
            for sub in subjaxprs(eqn.params):
                walk(sub, inner_mesh, sub, {}, inner_once)

    walk(closed.jaxpr, MeshShape(), closed.jaxpr, {}, None)
    return found


# --- scripts, in a child process ----------------------------------------------------------------


def capture_script(path: str, devices: int, *, timeout: float | None = None,
                   assumed: tuple[str, ...] = ()) -> CaptureOutcome:
    """Run `path` with `devices` CPU devices in a child process and return what it captured.
    `timeout`: the time the script gets (at most DEFAULT_TIMEOUT; a check's budget passes
    what is left of it). `assumed`: the names `--assume` bounds; a buffer element they name
    stays a protocol input, as one the script's own `semcheck.assume` names does (the
    lowering in the child decides which elements are inputs, so it must know them).

    The child runs in a session of its own with stdin closed and its output in files (not
    pipes a background process of the script could hold open); its whole session is
    killed on every way out (done, timeout, Ctrl-C, SIGTERM), so nothing the script
    started outlives the capture."""
    timeout = DEFAULT_TIMEOUT if timeout is None else min(timeout, DEFAULT_TIMEOUT)
    path = os.path.abspath(path)
    with tempfile.TemporaryDirectory(prefix="semcheck-") as tmp:
        output = os.path.join(tmp, "capture.pickle")
        env = child_environment(devices)
        argv = ["--devices", str(devices), "--output", output, "--timeout", str(timeout)]
        argv += [f"--assumed={name}" for name in assumed]
        argv.append(path)
        stdout_path, stderr_path = os.path.join(tmp, "stdout.txt"), os.path.join(tmp, "stderr.txt")
        returncode, imported = run_child(argv, env, stdout_path, stderr_path, timeout + 120, path, devices)
        if not os.path.exists(output):
            raise LoadError(
                f"running {path} with {devices} devices ended ({how_it_ended(returncode)}) before "
                "semcheck could report what it captured" + last_words(stderr_path),
                ir.Loc(path, 0),
                hint=f"run `python {ir.display_path(path)}` with "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={devices} to see why",
            )
        with open(output, "rb") as f:
            outcome = pickle.load(f)
        if imported:  # this capture waited for the capture server to import JAX
            outcome.seconds = {"jax import": imported, **outcome.seconds}
        return outcome


class _ScriptExit(BaseException):
    """The script called os._exit: ended like sys.exit, so its kernels are still checked."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


_real_exit = os._exit  # the child's own exits; the script's os._exit is turned into _ScriptExit


def _refuse_exit(code=0):
    raise _ScriptExit(code)


def _missing_module(name: str) -> MissingModule:
    """`name`, and the deepest package above it that the script did import, if any."""
    parts = name.split(".")
    for k in range(len(parts) - 1, 0, -1):
        package = ".".join(parts[:k])
        module = sys.modules.get(package)
        locations = list(getattr(module, "__path__", None) or [])
        if locations:
            return MissingModule(name, package, str(locations[0]))
    return MissingModule(name)


def _run_script(path: str, exited: list[str | None], missing: list[MissingModule | None] | None = None,
                ) -> tuple[str | None, ir.Loc | None]:
    """Run the script as `python path` would; why it failed and where, or (None, None).
    A script that ended itself with status 0 says how and where in `exited[0]`; one that
    imports a module not installed here names it in `missing[0]`."""
    sys.argv = [path]
    sys.path.insert(0, os.path.dirname(path))
    os._exit = _refuse_exit
    try:
        runpy.run_path(path, run_name="__main__")
    except _ScriptExit as e:
        loc = _where(e)
        return f"the script called os._exit({e.code!r})" + (f" at {loc}" if loc else ""), loc
    except SystemExit as e:
        if e.code not in (None, 0):
            return f"the script exited with status {e.code}", None
        loc = _where(e)
        exited[0] = f"the script exited with sys.exit({'' if e.code is None else e.code!r})"
        return None, loc
    except JaxInternalMissing as e:  # semcheck's own hooks met a JAX they do not know
        return f"semcheck stopped the script: {e.message}", _where(e)
    except BaseException as e:  # noqa: BLE001 - any failure of the user's script is reported
        if isinstance(e, ModuleNotFoundError) and e.name and missing is not None:
            missing[0] = _missing_module(e.name)
        loc = _unparsed_line(e) or _where(e)
        where = f" at {loc}" if loc else ""
        removed = removed_api(e)
        why = (f"; {SEMAPHORE_RESULT}" if _returns_semaphore(e)
               else f"; {NO_CORE_COUNT}" if _asks_core_count(e)
               else f"; {removed.advice}" if removed is not None
               else f"; {_unparsable_here()}" if isinstance(e, SyntaxError) else "")
        said = _first_line(e)
        said = f": {said}" if said else ""
        return f"the script raised {type(e).__name__}{said}{where}{why}", loc
    finally:
        os._exit = _real_exit
    return None, None


SEMAPHORE_RESULT = (
    "a jitted function returned a semaphore, which JAX 0.10.2 cannot do: a semaphore dtype "
    "has no rule to become a result array (jax/_src/pallas/core.py, AbstractSemaphoreTyRules; "
    "jax/_src/array.py asks for global_sharded_result_handler), so a semaphore cannot pass "
    "from one top-level jax.jit call to another; call the kernels that hand semaphores on "
    "inside one jitted function (directly or through nested jax.jit calls), which semcheck "
    "checks as one program"
)


def _returns_semaphore(e: BaseException) -> bool:
    """JAX's failure when a top-level jitted function returns a semaphore."""
    owner = getattr(e, "obj", None)
    return (isinstance(e, AttributeError) and e.name == "global_sharded_result_handler"
            and getattr(owner, "__name__", "") == "AbstractSemaphoreTyRules")


NO_CORE_COUNT = (
    "a CPU device has no `num_cores`, which `pltpu.create_tensorcore_mesh` reads from "
    "`jax.devices()[0]` when it is not given one (jax/_src/pallas/mosaic/core.py, JAX "
    "0.10.2): pass `num_cores=` (the TensorCores per chip to check, e.g. 1, or 2 for a "
    "megacore chip)"
)


def _asks_core_count(e: BaseException) -> bool:
    """JAX's failure (an AttributeError with no message) when a TensorCore mesh asks the
    CPU device the script runs on for its core count."""
    owner = getattr(e, "obj", None)
    return (isinstance(e, AttributeError) and e.name == "num_cores"
            and type(owner).__name__.endswith("Device"))


def _unparsed_line(e: BaseException) -> ir.Loc | None:
    """A file the script imports that does not parse fails at its own line, which no frame of
    the traceback holds (the innermost frame is the import that read it)."""
    if not isinstance(e, SyntaxError) or not e.filename or not e.lineno:
        return None
    return ir.Loc(os.path.abspath(e.filename), e.lineno)


def _unparsable_here() -> str:
    """Most files that parse elsewhere and not here are written for a newer Python than the
    one semcheck runs the script with (tokamax's `type` aliases: 3.12)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (f"semcheck runs the script with Python {version} ({sys.executable}), which cannot "
            "parse that line: if it is written for a newer Python (a `type X = ...` alias needs "
            "3.12), run semcheck with that Python")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else ""


def _where(e: BaseException) -> ir.Loc | None:
    """The innermost frame of the failure that is the user's code: of the script's own files
    before an installed package's (where numpy raised says less than the script's line that
    called it)."""
    return _innermost_user_line(traceback.extract_tb(e.__traceback__))


def _running_line(thread: threading.Thread) -> ir.Loc | None:
    """The user's line `thread` is running now (as `_where` picks it): where the script was
    when its time ran out."""
    frame = sys._current_frames().get(thread.ident or -1)
    return None if frame is None else _innermost_user_line(traceback.extract_stack(frame))


def _innermost_user_line(frames: list[traceback.FrameSummary]) -> ir.Loc | None:
    from semcheck.lower.source import is_user_file

    users = [f for f in frames if is_user_file(f.filename)]
    own = [f for f in users if not _installed(f.filename)]
    if not users:
        return None
    frame = (own or users)[-1]
    return ir.Loc(os.path.abspath(frame.filename), frame.lineno or 0)


def _installed(filename: str) -> bool:
    """A file of an installed package (site-packages, or Debian's dist-packages)."""
    parts = os.path.abspath(filename).split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts


def _child(args) -> int:
    """The child: run the script under the hooks, lower, write the outcome."""
    import time

    os.environ["XLA_FLAGS"] = with_device_count(os.environ.get("XLA_FLAGS", ""), args.devices)
    started, started_cpu = time.perf_counter(), time.process_time()
    imports_jax = "jax" not in sys.modules  # not in a child of the capture server, which imported it
    import jax

    use_compilation_cache(jax)
    imported, imported_cpu = time.perf_counter(), time.process_time()

    captures: list = []
    outcome = CaptureOutcome()
    done = threading.Event()
    lock = threading.Lock()

    me = os.getpid()

    def finish(script_error: str | None, where: ir.Loc | None = None) -> None:
        if os.getpid() != me:  # a process the script forked: only the capture child answers
            _real_exit(0)
        with lock:
            if done.is_set():
                return
            outcome.captured = len(captures)
            outcome.script_error, outcome.script_error_loc = script_error, where
            outcome.devices = jax.device_count()
            ran, ran_cpu = time.perf_counter(), time.process_time()
            _settle_callbacks()
            from semcheck.frontends.provenance import decide_withheld

            decide_withheld(captures)
            outcome.protocols, outcome.errors = lower_captures(
                list(captures), assumed=[a.name for a in script_assumptions] + list(args.assumed))
            outcome.assumptions = list(script_assumptions)
            outcome.exited = exited[0]
            outcome.missing_module = missing[0]
            from semcheck.frontends.sources import user_sources

            outcome.sources = user_sources(args.script)
            outcome.environment = read_environment.digests()
            outcome.seconds = {
                "jax import": imported - started,
                "script": ran - imported,
                "lowering": time.perf_counter() - ran,
            }
            outcome.cpu_seconds = {
                "jax import": imported_cpu - started_cpu,
                "script": ran_cpu - imported_cpu,
                "lowering": time.process_time() - ran_cpu,
            }
            if not imports_jax:
                del outcome.seconds["jax import"], outcome.cpu_seconds["jax import"]
            with open(args.output, "wb") as f:
                pickle.dump(outcome, f)
            done.set()

    script_thread = threading.current_thread()

    def on_timeout() -> None:
        outcome.timed_out = True
        finish(f"the script did not finish within {args.timeout:.0f} s, so semcheck stopped it",
               _running_line(script_thread))
        _real_exit(0)

    # The time given counts from this process's start, its JAX import included: the check's
    # own deadline waits only CAPTURE_GRACE past it (run/checks.py), and an import slowed by
    # a busy machine would otherwise push the script's stop past that, and the stopped
    # script's report (where it was) would be lost with the child.
    watchdog = threading.Timer(max(args.timeout - (time.perf_counter() - started), 0.0), on_timeout)
    watchdog.daemon = True
    watchdog.start()
    from semcheck.frontends.sources import environment_reads
    from semcheck.passes import assumptions

    exited: list[str | None] = [None]
    missing: list[MissingModule | None] = [None]
    with assumptions.collecting() as script_assumptions, capturing(captures.append), \
            environment_reads() as read_environment:
        script_error, where = _run_script(os.path.abspath(args.script), exited, missing)
    watchdog.cancel()
    finish(script_error, where)
    return 0


# JAX's persistent compilation cache for the capture child: a script checked again (or
# another script with the same jitted code) loads the XLA executables it compiled last time
# instead of compiling them, and so does the eager evaluation of the kernel's data in the
# lowering (each primitive at each new shape is an XLA compile, tens of ms). JAX keys every
# entry by the lowered module, the compile options, the backend and the jax/jaxlib versions,
# and compiles again on a miss or an unreadable entry, so the cache changes no result (it
# never skips the lowering to MLIR, where the capture hooks run). `SEMCHECK_JAX_CACHE=DIR`
# moves it, `SEMCHECK_JAX_CACHE=off` turns it off; a script that sets JAX's own
# `jax_compilation_cache_dir` (or JAX_COMPILATION_CACHE_DIR) keeps its own.
JAX_CACHE_ENVIRONMENT = "SEMCHECK_JAX_CACHE"
_JAX_CACHE_MAX_BYTES = 512 << 20  # JAX evicts least recently used entries past this


def jax_cache_dir() -> str | None:
    chosen = os.environ.get(JAX_CACHE_ENVIRONMENT)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "0", "off", "no", "false") else chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "semcheck", "jax")


def use_compilation_cache(jax) -> None:
    folder = jax_cache_dir()
    if folder is None or jax.config.jax_compilation_cache_dir:
        return
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:  # nowhere to keep it: compile every time, as without the cache
        return
    jax.config.update("jax_compilation_cache_dir", folder)
    # JAX keeps only compiles slower than 1 s by default; the ones here are tens of ms each.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    try:
        import filelock  # noqa: F401 - JAX needs it to bound the cache's size
    except ImportError:
        return
    jax.config.update("jax_compilation_cache_max_size", _JAX_CACHE_MAX_BYTES)


def _settle_callbacks() -> None:
    """Wait for the operand callbacks of kernels the script ran (semcheck/frontends/operands.py)."""
    import jax

    try:
        jax.effects_barrier()
    except Exception:  # a script that broke JAX's runtime: its kernels are lowered without data
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m semcheck.frontends.capture",
                                     description="Run a kernel script and capture its Pallas kernels.")
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    parser.add_argument("--assumed", action="append", default=[], help="a name --assume bounds")
    parser.add_argument("script")
    args = parser.parse_args(argv)
    from semcheck.frontends.isolation import end_with_parent
    from semcheck.frontends.processes import become_subreaper

    become_subreaper()  # what the script starts and leaves (a daemon) stays below this process
    end_with_parent(os.getppid(), _real_exit)  # everything the script started ends with semcheck
    try:
        return _child(args)
    except BaseException as e:  # noqa: BLE001 - say what failed in words, never a traceback
        if os.environ.get("SEMCHECK_DEBUG"):
            traceback.print_exc()
        loc = _where(e)
        outcome = CaptureOutcome(
            script_error=f"semcheck's capture process failed: {type(e).__name__}: {_first_line(e)}"
            + (f" at {loc}" if loc else ""),
            script_error_loc=loc,
        )
        with open(args.output, "wb") as f:
            pickle.dump(outcome, f)
        return 0


def child_main(argv: list[str] | None = None) -> None:
    """The capture child's entry point (see `_CHILD`, and the capture server's fork). Flush,
    end every process the script started and left running, and leave without running the
    user's atexit handlers twice or waiting on their threads: everything semcheck needs is
    in the output file by now."""
    from semcheck.frontends.processes import kill_descendants

    code = main(argv)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a stream the script closed or replaced
            pass
    kill_descendants()
    _real_exit(code)


if __name__ == "__main__":
    # The outcome is pickled from the importable module, not from __main__, so that the
    # parent can load it.
    from semcheck.frontends import capture as _module

    _module.child_main()
