"""From a captured kernel to Protocols: threads, grid iteration, cores and the default
device barrier.

* One thread per (device, core). Devices are the enclosing shard_map's whole mesh, numbered
  row-major like MESH device ids.
* pallas_call: the grid runs sequentially in row-major order. With `dimension_semantics`
  marking a prefix of the grid "parallel", a 2-TensorCore chip (v4/v5p megacore) splits it:
  core c runs the contiguous chunk [c*K, (c+1)*K) of the row-major iterations, with
  K = ceil(P/cores) * (N/P), P the size of the parallel sub-grid and N the whole grid — the
  split of JAX's TPU interpreter (without its random shuffling of parallel coordinates;
  Mosaic's own split is not documented). Such kernels are checked twice: on one core and on
  two.
* pl.kernel / core_map over a TensorCoreMesh (an `mpmd_map`): the body runs once per core.
* Default device barrier: when `collective_id` is None and `skip_device_barrier` is False,
  XLA runs a barrier across devices before the kernel body (JAX's interpreter models it
  with a threading.Barrier). It is modelled explicitly with two semaphores that nothing else
  touches: every thread signals `device_barrier.arrive` on device 0 core 0, that thread
  waits for all arrivals and signals `device_barrier.release` on every thread, and every
  thread waits for its release. No thread starts the body before every thread has arrived.
* Every thread starts with KernelEntry and ends with KernelExit.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import field
from typing import TYPE_CHECKING

from semcheck import ir
from semcheck.errors import LoadError
from semcheck.ir import Backend, SemKind, SemOrigin
from semcheck.lower.context import (
    SHARED_HBM_BASIS, KernelContext, MeshShape, OperandData, ThreadLowering, operand_data, values_not_used,
)
from semcheck.lower.data import data_notes
from semcheck.lower.interpreter import eval_jaxpr
from semcheck.lower.produced import Feed, KnownElements, ProducedOutputs, produced_outputs
from semcheck.lower.pipeline import PIPELINE_BASIS, Pipeline, copy_in, copy_out, drop_moved, write_back
from semcheck.lower.ref_names import ref_names
from semcheck.lower.source import is_user_file, kernel_function, loc_of_traceback
from semcheck.lower.tpu_hardware import hardware_notes, in_dma_units
from semcheck.passes.programs import handed_in_note, handed_out_note
from semcheck.jax_compat import jax_internal
from semcheck.records import record
from semcheck.version import ISSUES_URL

if TYPE_CHECKING:
    from semcheck.lower.exact_outputs import Refusal

ARRIVE, RELEASE = ir.DEVICE_BARRIER_ARRIVE, ir.DEVICE_BARRIER_RELEASE


@record(frozen=True)
class KernelFlow:
    """Where a captured kernel sits in the code around it: the scope its values belong to
    (an MLIR module being lowered, or a jaxpr) and the values of its operands and results,
    so that a later kernel's operand can be recognised as an earlier one's result."""

    scope: object
    operands: tuple
    results: tuple


@record
class KernelCapture:
    """One pallas_call or mpmd_map as JAX traced it, with the mesh it runs on."""

    primitive: str  # "pallas_call" or "mpmd_map"
    params: dict
    num_operands: int  # operands of the eqn (pallas_call: dynamic grid bounds, index, inputs)
    mesh: MeshShape = field(default_factory=MeshShape)
    call_loc: ir.Loc | None = None
    # What the script passed when it ran the kernel: device -> operand index -> array
    # (semcheck/frontends/operands.py); empty when the kernel was compiled but never run.
    operand_values: dict = field(default_factory=dict)
    # Names the script's semcheck.assume calls bound: a buffer element they name stays a
    # protocol input (checked over the range) instead of its value in the data.
    assumed: frozenset[str] = frozenset()
    # The capture replaces kernel outputs with zeros, so an operand may hold an earlier
    # kernel's zeros (frontends/provenance.py). Device -> why a kernel ran before the run of
    # this kernel's program began (its outputs may be the program's arguments); what each
    # operand is computed from; why a device's first call may be fed by another call of this
    # kernel (None: it cannot); and, decided from these, device -> operand index -> why its
    # value there is not the script's own (not used), and the operands used although later
    # calls receive the kernel's own output there, carried round a loop.
    ran_before: dict = field(default_factory=dict)
    operand_origins: tuple = ()
    earlier_calls: str | None = "semcheck did not look at where the kernel is called"
    withheld: dict = field(default_factory=dict)
    own_carried: tuple[int, ...] = ()
    flow: KernelFlow | None = None
    # The avals of the eqn's operands, as JAX lowers the call: what JAX's own TPU lowering
    # of the kernel needs (lower/jax_tpu_lowering.py).
    in_avals: tuple = ()
    # Whether the outputs the script got from this kernel are the kernel's own, computed by
    # JAX's HLO interpreter (frontends/capture.py, `_computed_outputs`), not zeros; where they
    # are zeros, why they were not computed (lower/exact_outputs.py), for a TPU pallas_call.
    computed: bool = False
    not_computed: Refusal | None = None
    # The kernels with computed outputs that ran in an earlier run of a program before this
    # kernel's first call on some device: what its program's arguments may have come from.
    computed_earlier: tuple[str, ...] = ()
    # What semcheck's lowering of this kernel computed of its outputs (lower/produced.py),
    # set by lower_kernel; and the operands placed from an earlier kernel's output (that
    # output itself, or its elements sliced, reshaped, padded...), starting with what its
    # lowering computed, so placed (frontends/capture.py, `lower_captures`).
    produced: ProducedOutputs | None = None
    feeds: tuple[Feed, ...] = ()
    # Operand index -> how it is placed from one earlier kernel's output (a Placement), or
    # the op that stops it (a Stop): for operands computed from one kernel's outputs alone
    # (frontends/placing.py, set by provenance.trace_operands).
    placed: dict = field(default_factory=dict)
    # Why the kernel may not run exactly once per run of its program, before the kernels
    # after it (None: it runs once; frontends/provenance.py, `runs_once`).
    runs_once: str | None = "semcheck did not look at where the kernel is called"


def lower_kernel(capture: KernelCapture, *, tpu_cores: int | None = None) -> list[ir.Protocol]:
    """The kernel's protocols. When lowering stops part-way on some thread (an unsupported
    construct), a LoadError for the first stop, carrying the protocols up to there."""
    lower = {"pallas_call": _pallas_call, "mpmd_map": _mpmd_map}.get(capture.primitive)
    if lower is None:
        raise LoadError(f"semcheck cannot lower a captured {capture.primitive!r}")
    protocols = _with_jax_tpu_lowering(capture, lower(capture, tpu_cores))
    stops = [cut for p in protocols for _thread, cut in ir.cuts(p)]
    if stops:
        error = LoadError(stops[0].message, stops[0].loc, stops[0].hint)
        error.prefixes = protocols
        raise error
    return protocols


def _with_jax_tpu_lowering(capture: KernelCapture, protocols: list[ir.Protocol]) -> list[ir.Protocol]:
    """The TPU kernel's protocols with JAX's own Pallas TPU lowering's answer (whether it
    builds for a TPU: lower/jax_tpu_lowering.py), asked once per captured kernel."""
    if not protocols or any(p.backend is not Backend.TPU for p in protocols):
        return protocols
    from semcheck.lower.jax_tpu_lowering import lower_for_tpu, with_outcome

    outcome = lower_for_tpu(capture)
    return [with_outcome(p, outcome, p.loc) for p in protocols]


# --- pallas_call -----------------------------------------------------------------------------


def _pallas_call(capture: KernelCapture, tpu_cores: int | None) -> list[ir.Protocol]:
    params = capture.params
    jaxpr, gm = params["jaxpr"], params["grid_mapping"]
    name, kernel_loc = _identity(params, jaxpr, capture)
    compiler_params = _tpu_compiler_params(params.get("compiler_params"), name, kernel_loc)
    if params.get("mesh") is not None:
        raise LoadError(
            f"pallas_call {name}: a pallas_call over a Pallas mesh is not supported",
            kernel_loc,
            hint="use pl.kernel(..., mesh=pltpu.create_tensorcore_mesh(...))",
        )
    grid, grid_note = _grid_as_passed(capture, tuple(gm.grid), name, kernel_loc)
    parallel = _parallel_prefix(compiler_params, grid, name, kernel_loc)
    if tpu_cores is not None:
        configs = [tpu_cores]
    else:
        configs = [1, 2] if parallel else [1]
    invars = list(jaxpr.invars)
    n_index = gm.num_index_operands
    n_blocks = gm.num_inputs + gm.num_outputs
    origins = (
        [SemOrigin.ARGUMENT] * n_index
        + [SemOrigin.ARGUMENT] * n_blocks
        + [SemOrigin.SCRATCH] * (len(invars) - n_index - n_blocks)
    )
    protocols = []
    for cores in configs:
        label = name if len(configs) == 1 or cores == 1 else f"{name} ({cores} TensorCores per device)"
        ctx = _context(label, capture, cores, kernel_loc, compiler_params, grid, tuple(gm.grid_names or ()), jaxpr)
        points = _grid_points(grid, parallel, cores)
        if grid_note is not None:
            ctx.note(grid_note)
        if cores > 1:
            ctx.note(
                f"checked as on a chip with {cores} TensorCores per device (v4/v5p megacore): the "
                f"parallel grid dimensions are split into contiguous per-core chunks"
            )
        # The eqn's operands are the dynamic grid bounds, then the kernel's index and inputs.
        n_dynamic = capture.num_operands - n_index - gm.num_inputs
        data = operand_data(capture, {k: n_dynamic + k for k in range(n_index + gm.num_inputs)})
        # Output -> the input ref it aliases (lower/produced.py): the pairs index the operands
        # after the dynamic grid bounds (JAX 0.10.2, `_pallas_call_abstract_eval`), the refs' order.
        aliases = {out: into for into, out in (params.get("input_output_aliases") or ())}
        protocols.append(_build(ctx, jaxpr, invars, origins, points, n_index + gm.num_inputs, n_scalar=n_index,
                                data=data, n_leading=n_dynamic,
                                n_results=gm.num_outputs, grid_mapping=gm, call_loc=capture.call_loc,
                                aliases=aliases))
        if cores == 1 or capture.produced is None:  # one core's lowering, where it was made
            capture.produced = ctx.produced
    return protocols


def _grid_as_passed(capture: KernelCapture, grid: tuple, name: str, loc: ir.Loc) -> tuple[tuple[int, ...], str | None]:
    """The grid, with each dimension known only at run time (`grid=(n_ref[0],)`) as the
    script passed it. JAX passes those extents as the pallas_call's leading operands, one
    size-1 array per dynamic dimension in order (jax/_src/pallas/pallas_call.py,
    `dynamic_grid_args`, 0.10.2), so the capture saw their values as it sees any operand's.
    They must be known, and the same, on every device: one grid is checked for all."""
    import numpy as np

    dynamic = [k for k, d in enumerate(grid) if not isinstance(d, int)]
    if not dynamic:
        return grid, None
    unseen = _unseen_operands_reason(capture, range(len(dynamic)))
    per_device = [tuple(int(np.asarray(values[j]).reshape(-1)[0]) for j in range(len(dynamic)))
                  for _, values in sorted(capture.operand_values.items())
                  if all(j in values for j in range(len(dynamic)))]
    if unseen is None and len(per_device) < capture.mesh.size:
        unseen = "the capture saw them on only some devices"
    if unseen is None and len(set(per_device)) > 1:
        unseen = f"the devices were passed different extents {sorted(set(per_device))}, and one grid is checked for all"
    if unseen is not None:
        dims = ", ".join(str(k) for k in dynamic)
        raise LoadError(
            f"pallas_call {name}: the grid {grid} has dimensions known only at run time ({dims}), "
            f"and their values cannot be used: {unseen}",
            loc,
            hint="run the kernel in the script (its grid is then taken as passed), on its own, or with a static grid",
        )
    extents = dict(zip(dynamic, per_device[0]))
    resolved = tuple(extents.get(k, d) for k, d in enumerate(grid))
    return resolved, (
        f"the grid {resolved} has dimensions known only at run time ({', '.join(map(str, dynamic))}): "
        f"checked for the extents the script passed (a pallas_call's leading operands, "
        f"jax/_src/pallas/pallas_call.py, JAX 0.10.2); another extent is another protocol"
    )


def _unseen_operands_reason(capture: KernelCapture, operands) -> str | None:
    if not capture.operand_values:
        return "the kernel was traced but not run, so the capture saw no operand values"
    for device, why in sorted(capture.withheld.items()):
        for k in operands:
            if k in why:
                return values_not_used(why[k], device, f"operand {k}")
    return None


def _parallel_prefix(compiler_params, grid, name, loc) -> int:
    """How many leading grid dims are parallel (split across cores)."""
    semantics = getattr(compiler_params, "dimension_semantics", None)
    if not semantics:
        return 0
    flags = []
    for s in semantics:
        text = str(getattr(s, "value", s)).lower()
        if "subcore" in text:
            raise LoadError(
                f"pallas_call {name}: SparseCore dimension semantics ({text}) are not supported",
                loc,
                hint="the TPU frontend checks TensorCore kernels",
            )
        flags.append(text.endswith("parallel"))
    count = 0
    while count < len(flags) and flags[count]:
        count += 1
    if any(flags[count:]):
        raise LoadError(
            f"pallas_call {name}: parallel grid dimensions must come before the arbitrary "
            f"ones (dimension_semantics={tuple(semantics)})",
            loc,
            hint="reorder the grid so that the parallel dimensions lead",
        )
    return count


def _grid_points(grid, parallel: int, cores: int) -> list[list[tuple[int, ...]]]:
    import itertools

    points: list[tuple[int, ...]] = list(itertools.product(*(range(d) for d in grid))) if grid else [()]
    total = len(points)
    parallel_size = math.prod(grid[:parallel]) if grid else 1
    if total == 0:
        return [[] for _ in range(cores)]
    per_core = -(-parallel_size // cores) * (total // max(parallel_size, 1))
    return [points[c * per_core:min((c + 1) * per_core, total)] for c in range(cores)]


# --- mpmd_map (pl.kernel, core_map) ---------------------------------------------------------


def _mpmd_map(capture: KernelCapture, tpu_cores: int | None) -> list[ir.Protocol]:
    params = capture.params
    jaxprs, meshes = params["jaxprs"], params["meshes"]
    jaxpr = jaxprs[0]
    name, kernel_loc = _identity(params, jaxpr, capture)
    if len(jaxprs) != 1 or params.get("external_meshes"):
        raise LoadError(
            f"mpmd_map {name}: kernels over several meshes are not supported",
            kernel_loc,
            hint="check each mesh's kernel with its own pl.kernel call",
        )
    tpu_core = jax_internal("tpu_core")

    from semcheck.lower.gpu_kernel import is_gpu_mesh
    from semcheck.lower.gpu_layout import lower_gpu_kernel

    mesh = meshes[0]
    if is_gpu_mesh(mesh):
        return lower_gpu_kernel(capture, name, kernel_loc)
    if not isinstance(mesh, tpu_core.TensorCoreMesh):
        raise LoadError(
            f"{name}: a kernel over a {type(mesh).__name__} is not a TPU TensorCore kernel; "
            "the TPU frontend checks pl.kernel / core_map over pltpu.create_tensorcore_mesh",
            kernel_loc,
            hint="SparseCore kernels are not supported yet",
        )
    compiler_params = _tpu_compiler_params(params.get("compiler_params"), name, kernel_loc)
    if getattr(compiler_params, "dimension_semantics", None) is not None:
        raise LoadError(
            f"{name}: dimension_semantics must be None for a kernel over a TensorCoreMesh "
            "(Pallas TPU lowering rejects it)",
            kernel_loc,
            hint="drop dimension_semantics; the mesh already says how the body is split",
        )
    [(axis, cores)] = list(mesh.shape.items())
    n_in, n_out = capture.num_operands, len(params["out_avals"])
    invars = list(jaxpr.invars)
    origins = [SemOrigin.ARGUMENT] * (n_in + n_out) + [SemOrigin.SCRATCH] * (len(invars) - n_in - n_out)
    ctx = _context(name, capture, cores, kernel_loc, compiler_params, (cores,), (axis,), jaxpr)
    ctx.core_axis = axis
    points = [[(core,)] for core in range(cores)]
    data = operand_data(capture, {k: k for k in range(n_in)})
    return [_build(ctx, jaxpr, invars, origins, points, n_in, data=data, n_results=n_out)]


# --- shared -------------------------------------------------------------------------------------


def _identity(params, jaxpr, capture: KernelCapture) -> tuple[str, ir.Loc]:
    """The kernel's name and where it is defined. A kernel JAX re-traced (a raw core_map,
    discharged into an mpmd_map) carries JAX's wrapper as its function, so then the first
    user line of its body stands for it."""
    fn_name, fn_loc = kernel_function(getattr(jaxpr, "debug_info", None))
    name = params.get("name") or fn_name or capture.primitive
    if fn_loc is None or not is_user_file(fn_loc.file):
        fn_loc = _first_user_loc(jaxpr) or fn_loc
    loc = fn_loc or capture.call_loc or ir.UNKNOWN_LOC
    return name, loc


def _first_user_loc(jaxpr) -> ir.Loc | None:
    from semcheck.lower.interpreter import subjaxprs

    for eqn in jaxpr.eqns:
        loc = loc_of_traceback(eqn.source_info.traceback)
        if loc is not None:
            return loc
        for sub in subjaxprs(eqn.params):
            loc = _first_user_loc(sub)
            if loc is not None:
                return loc
    return None


def _tpu_compiler_params(compiler_params, name, loc):
    if compiler_params is None:
        return None
    tpu_core = jax_internal("tpu_core")

    if not isinstance(compiler_params, tpu_core.CompilerParams):
        raise LoadError(
            f"{name}: compiler_params are {type(compiler_params).__module__}."
            f"{type(compiler_params).__name__}, not pltpu.CompilerParams; the TPU frontend "
            "checks Pallas TPU kernels only",
            loc,
            hint="Mosaic GPU and Triton kernels are not supported yet",
        )
    return compiler_params


# Newer JAX (0.11) can assign collective ids itself (`jax_pallas_auto_assign_collective_ids`
# = "yes" or "override", jax/_src/tpu_custom_call.py): a kernel that uses the barrier
# semaphore and has no id (or any id, with "override") gets one from 7000 up, one per distinct
# kernel (keyed by the hash of its lowered module and skip_device_barrier), so two different
# kernels of a program never share a barrier semaphore and two calls of the same kernel do.
# 0.10.2 has no such option, and there a barrier without an id is an error.
AUTO_COLLECTIVE_BASE_ID = 7000
# semcheck keys a kernel by its body's jaxpr, its grid and skip_device_barrier (what its
# lowered module is made from): the id is the base plus a digest of that, which only has to
# be equal for equal kernels and different for different ones.
_AUTO_ID_SPREAD = 1 << 20


def auto_collective_id(jaxpr, grid, skip_device_barrier: bool) -> int:
    """The collective id JAX assigns a kernel, up to its number (equal kernels, equal ids)."""
    key = f"{jaxpr}\n{grid}\n{skip_device_barrier}".encode()
    return AUTO_COLLECTIVE_BASE_ID + zlib.crc32(key) % _AUTO_ID_SPREAD


def _auto_collective_ids() -> str:
    import jax

    return str(getattr(jax.config, "jax_pallas_auto_assign_collective_ids", "no"))


def _uses_barrier_semaphore(jaxpr) -> bool:
    jax_core = jax_internal("core")

    return any(
        eqn.primitive.name == "get_barrier_semaphore"
        or any(_uses_barrier_semaphore(sub) for sub in jax_core.jaxprs_in_params(eqn.params))
        for eqn in jaxpr.eqns
    )


def _context(name, capture, cores, kernel_loc, compiler_params, grid, grid_names, jaxpr=None) -> KernelContext:
    ctx = KernelContext(
        name=name,
        mesh=capture.mesh,
        cores=cores,
        kernel_loc=kernel_loc,
        grid=grid,
        grid_names=grid_names,
        collective_id=getattr(compiler_params, "collective_id", None),
        skip_device_barrier=bool(getattr(compiler_params, "skip_device_barrier", False)),
        allow_unused_collective_id=bool(
            getattr(compiler_params, "allow_collective_id_without_custom_barrier", False)
        ),
        semaphore_checks=not getattr(compiler_params, "disable_semaphore_checks", False),
        bounds_checks=not getattr(compiler_params, "disable_bounds_checks", False),
        assumed=capture.assumed,
    )
    mode = _auto_collective_ids()
    if mode in ("yes", "override") and jaxpr is not None and _uses_barrier_semaphore(jaxpr):
        if ctx.collective_id is None or mode == "override":
            ctx.collective_id = auto_collective_id(jaxpr, grid, ctx.skip_device_barrier)
            ctx.note(
                f"jax_pallas_auto_assign_collective_ids={mode}: JAX assigns this kernel's "
                f"collective_id itself, one per distinct kernel of the program (checked as "
                f"{ctx.collective_id}: its barrier semaphore is shared only with calls of the same kernel, "
                "jax/_src/tpu_custom_call.py, JAX 0.11.1); as with an explicit "
                "id, XLA runs no default device barrier before the body"
            )
    return ctx


def _build(ctx: KernelContext, jaxpr, invars, origins, points, n_inputs: int, n_scalar: int = 0,
           data: OperandData | None = None, n_leading: int = 0,
           n_results: int = 0, grid_mapping=None, call_loc: ir.Loc | None = None,
           aliases: dict[int, int] | None = None) -> ir.Protocol:
    """Threads for every (device, core); `n_inputs` leading operands are the kernel's inputs,
    the first `n_scalar` of them scalar-prefetch operands. `data` holds the script's values
    of those operands per device, and those not used (see lower/data.py). The call's operands are `n_leading`
    that are no ref (dynamic grid bounds), then the inputs; its `n_results` results are the
    refs after the inputs (the kernel's ports, for linking it into a program). A pallas_call's
    `grid_mapping` says which operands the pipeline copies in and out around each grid step
    (pipeline.py)."""
    if jaxpr.constvars:
        raise LoadError(
            f"{ctx.name}: the kernel captures constants (Pallas cannot lower that either)",
            ctx.kernel_loc,
            hint="pass the constants as kernel inputs",
        )
    groups = (["scalar prefetch"] * n_scalar + ["input"] * (n_inputs - n_scalar) + ["output"] * n_results
              + ["scratch"] * (len(invars) - n_inputs - n_results))
    names = ref_names(jaxpr, "operand", ctx.kernel_loc, groups=groups)
    refs = [ctx.declare_ref(n, v.aval, o, ctx.kernel_loc) for n, v, o in zip(names, invars, origins)]
    ctx.scalar_operands = frozenset(r.alloc for r in refs[:n_scalar] if not r.is_semaphore)
    data = data or OperandData()
    ctx.use_operand_values(refs, data)
    handed_in = [
        r.alloc for r, o in zip(refs[:n_inputs], origins) if r.is_semaphore and o is SemOrigin.ARGUMENT
    ]
    if handed_in:
        ctx.note(handed_in_note(handed_in))
    handed_out = [r.alloc for r in refs[n_inputs:n_inputs + n_results] if r.is_semaphore]
    if handed_out:
        ctx.note(handed_out_note(handed_out))
    devices = ctx.mesh.size
    if grid_mapping is not None:
        ctx.pipeline = _pipeline(ctx, grid_mapping, refs, n_scalar, points, data.used, call_loc)
    barrier = _declare_default_barrier(ctx, devices)
    threads, dma_unit = in_dma_units(ctx, _lower_with_copied_data(ctx, jaxpr, refs, points, barrier))
    if n_results:
        ctx.produced = produced_outputs(ctx, refs, n_inputs, n_results, ctx.final_memories, aliases)
    for note in modelling_notes(ctx, devices, barrier) + hardware_notes(ctx):
        ctx.note(note)
    unused_id = ctx.collective_id is not None and "barrier_semaphore" not in ctx.semaphores
    if unused_id and not ctx.allow_unused_collective_id:
        ctx.note(
            f"collective_id={ctx.collective_id} is set but the kernel never uses the barrier "
            "semaphore: Pallas TPU lowering rejects that unless "
            "allow_collective_id_without_custom_barrier=True, and XLA then runs no default "
            "device barrier before the body"
        )
    return ir.Protocol(
        name=ctx.name,
        backend=Backend.TPU,
        devices=devices,
        cores=ctx.cores,
        threads=tuple(threads),
        semaphores=tuple(ctx.semaphores.values()),
        buffers=tuple(ctx.buffers.values()),
        inputs=tuple(ctx.inputs),
        loc=ctx.kernel_loc,
        frontend="tpu",
        notes=tuple(ctx.notes) + tuple(data_notes(ctx.data_uses, ctx.fed_from)),
        data_uses=tuple(ctx.data_uses),
        withheld=ctx.withheld_buffers(),
        fed=ctx.fed_operands(),
        findings=tuple(ctx.findings),
        dma_unit=dma_unit,
        ports=ir.Ports(
            operands=("",) * n_leading + tuple(r.alloc for r in refs[:n_inputs]),
            results=tuple(r.alloc for r in refs[n_inputs:n_inputs + n_results]),
        ),
    )


def _pipeline(ctx: KernelContext, grid_mapping, refs, n_scalar: int, points, data: dict, call_loc) -> Pipeline:
    """The blocks the Pallas pipeline copies per grid step, per device (their indices may
    come from that device's scalar-prefetch operands)."""
    from semcheck.lower.pipeline import pipelined_blocks, uses_scalar_prefetch

    per_device = uses_scalar_prefetch(grid_mapping, len(ctx.grid))
    shared = None
    blocks = {}
    for device in range(ctx.mesh.size):
        if per_device or shared is None:
            values = {k: data.get(device, {}).get(k) for k in range(n_scalar)} if per_device else {}
            # An earlier kernel's output known only in part names no block (lower/produced.py).
            values = {k: v.value if isinstance(v, KnownElements) else v for k, v in values.items()
                      if v is not None and not (isinstance(v, KnownElements) and not v.known.all())}
            shared = pipelined_blocks(grid_mapping, refs, n_scalar, ctx.buffers, points, values,
                                      shared_hbm=ctx.cores > 1)
        blocks[device] = shared
    loc = call_loc or ctx.kernel_loc
    for block in blocks.get(0, []):
        if block.hbm is not None:
            itemsize = ctx.buffers[block.buffer].itemsize
            ctx.buffers[block.hbm] = ir.BufferDecl(block.hbm, block.array_shape, itemsize, "hbm", ir.Scope.DEVICE, loc,
                                                   written_back=True)
    return Pipeline(blocks, loc)


# Lowerings of a kernel whose remote copies carry data, before its payloads must settle.
MAX_DATA_PASSES = 8


def _lower_with_copied_data(ctx: KernelContext, jaxpr, refs, points, barrier: bool) -> list[ir.Thread]:
    """Every thread's lowering. When remote copies carry data some thread may read, the
    protocol is run once in a canonical schedule (schedule.py: the semantics decide when
    each copy lands) and lowered again with those arrivals, until lowering and arrivals
    agree (a fixpoint), so a value that came by remote DMA is the one the copy wrote."""
    from semcheck.lower.schedule import canonical_arrivals, same_arrivals

    fresh = _PassState.of(ctx)
    guessed: list[str] | None = None  # the previous lowering's inputs for unknown data
    for _ in range(MAX_DATA_PASSES):
        fresh.restore(ctx)
        volatile = set(ctx.volatile)
        threads = _lower_threads(ctx, jaxpr, refs, points, barrier)
        if ctx.pipeline is not None and ctx.pipeline.newly_touched(threads):
            continue  # lower again with the pipeline's copies of the blocks DMAs touch
        # Buffers found volatile only now matter if this lowering read them before it knew.
        settled = not (ctx.volatile - volatile) & ctx.read_buffers
        if not ctx.payloads and settled:
            return threads
        if not ctx.payloads:
            continue  # lower again with the volatile buffers unknown
        protocol = ir.Protocol(ctx.name, Backend.TPU, ctx.mesh.size, ctx.cores, tuple(threads),
                               tuple(ctx.semaphores.values()), tuple(ctx.buffers.values()),
                               tuple(ctx.inputs), ctx.kernel_loc, "tpu")
        arrivals = canonical_arrivals(protocol, ctx.read_points, ctx.payloads)
        arrived = {p.ref.alloc for landed in arrivals.values() for p in landed}
        cut = any(th.body and isinstance(th.body[-1], ir.Cut) for th in threads)
        if not ctx.arrivals and not cut and not arrived & ctx.read_buffers and settled:
            return threads  # no thread reads what the copies carry: nothing to lower again
        fed = {b for use in ctx.data_uses for b in use.buffers}
        # Only payloads into buffers that fed a protocol value must agree: a ring's payload
        # moves one hop per lowering and decides nothing (unless a thread was cut short).
        decisive = (lambda landed: landed) if cut else (lambda landed, fed=fed: _landed_in(landed, fed))
        # A value this lowering did not know became an input (a branch on it, say); only
        # payloads into buffers that fed a known value count as decisive, so the payload
        # that defines it (a count staged from a remote copy's destination, which the
        # canonical run landed) would otherwise never be applied: lower again until the
        # inputs for unknown data are the previous lowering's.
        guesses_settled = not ctx.unknown_data_inputs or ctx.unknown_data_inputs == guessed
        guessed = list(ctx.unknown_data_inputs)
        if settled and guesses_settled and same_arrivals(decisive(arrivals), decisive(ctx.arrivals)):
            if arrived & fed and ctx.inputs:
                raise LoadError(
                    f"{ctx.name}: data that remote copies carry into {', '.join(sorted(arrived & fed))} "
                    f"decides values of the protocol, which also has inputs "
                    f"({', '.join(i.name for i in ctx.inputs)}): semcheck follows copied data for "
                    "concrete values only",
                    ctx.kernel_loc,
                    hint="bound the inputs to one value with semcheck.assume, or let the script's data decide them",
                )
            if arrived & fed:
                ctx.note(
                    "data that remote copies carry was followed: each copy's payload lands where "
                    "one canonical run of the protocol completes it (lower/schedule.py), and the "
                    "kernel was lowered again until the values agreed with that run"
                )
            return threads
        ctx.arrivals = arrivals
    raise LoadError(
        f"{ctx.name}: the data that remote copies carry did not settle after {MAX_DATA_PASSES} "
        "lowerings (each changed what the next copies carry)",
        ctx.kernel_loc,
        hint=("semcheck follows data moved by remote DMA for one canonical schedule; please report this "
              f"kernel at {ISSUES_URL}"),
    )


def _landed_in(arrivals: dict, buffers: set[str]) -> dict:
    """The arrivals whose payload lands in one of `buffers`."""
    kept = {k: [p for p in landed if p.ref.alloc in buffers] for k, landed in arrivals.items()}
    return {k: landed for k, landed in kept.items() if landed}


def _lower_threads(ctx, jaxpr, refs, points, barrier) -> list[ir.Thread]:
    """Every thread; one that stops at an unsupported construct ends in an ir.Cut, and the
    prefix before it is still checked (run/prefix.py)."""
    devices = ctx.mesh.size
    threads = []
    for device in range(devices):
        for core in range(ctx.cores):
            t = ThreadLowering(ctx, device, core)
            t.emitter.emit(ir.KernelEntry(ctx.kernel_loc, ctx.name))
            if barrier:
                _emit_device_barrier(t, devices)
            blocks = ctx.pipeline.copied(device) if ctx.pipeline is not None else []
            every_block = ctx.pipeline.every(device) if ctx.pipeline is not None else []
            try:
                for k, point in enumerate(points[core]):
                    t.program_ids = point
                    drop_moved(t, every_block, points[core], k)
                    copy_in(t, blocks, points[core], k, ctx.pipeline.loc if blocks else ctx.kernel_loc)
                    eval_jaxpr(t, jaxpr, [], refs)
                    copy_out(t, blocks, points[core], k, ctx.pipeline.loc if blocks else ctx.kernel_loc)
                    write_back(t, every_block, points[core], k, ctx.pipeline.loc if every_block else ctx.kernel_loc)
                t.emitter.emit(ir.KernelExit(ctx.kernel_loc, ctx.name))
                ctx.final_memories[(device, core)] = t.memory
            except LoadError as e:  # the prefix before it is still checked (run/prefix.py)
                t.emitter.stop(ir.Cut(e.loc or t.context_loc, e.message, e.hint))
            threads.append(ir.Thread(device, core, t.emitter.build()))
    return threads


@record
class _PassState:
    """What one lowering of the threads adds to the kernel context, as it was before."""

    inputs: list
    scalar_inputs: dict
    notes: list
    data_uses: list
    names: set
    findings: list

    @classmethod
    def of(cls, ctx: KernelContext) -> "_PassState":
        return cls(list(ctx.inputs), dict(ctx._scalar_inputs), list(ctx.notes), list(ctx.data_uses), set(ctx._names),
                   list(ctx.findings))

    def restore(self, ctx: KernelContext) -> None:
        ctx.inputs, ctx._scalar_inputs = list(self.inputs), dict(self.scalar_inputs)
        ctx.notes, ctx.data_uses, ctx._names = list(self.notes), list(self.data_uses), set(self.names)
        ctx.findings = list(self.findings)
        ctx.unknown_data_inputs = []
        ctx.read_points, ctx.payloads = {}, {}
        ctx.final_memories = {}
        ctx.read_buffers.clear()


# --- modelling choices a verdict can rest on, stated in the result -------------------------------

DEVICE_BARRIER_BASIS = (
    "JAX 0.10.2: pltpu.CompilerParams documents skip_device_barrier as skipping the default "
    "device barrier (jax/_src/pallas/mosaic/core.py) and jax/_src/tpu_custom_call.py hands "
    "collective_id and skip_device_barrier to Mosaic; the TPU interpreter runs a global barrier "
    "before the body exactly when collective_id is None "
    "(jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py)"
)
SCRATCH_BARRIER_BASIS = (
    "JAX 0.10.2: Mosaic lowers a SemaphoreType.BARRIER allocation to the same !tpu.semaphore "
    "type as a REGULAR one (aval_to_ir_type in jax/_src/pallas/mosaic/lowering.py); only "
    "pltpu.get_barrier_semaphore() names the collective_id's barrier semaphore"
)


def modelling_notes(ctx: KernelContext, devices: int, barrier: bool) -> list[str]:
    """The choices this kernel's verdict rests on: the default device barrier (whether XLA
    runs one before the body) when there is more than one thread, HBM operands shared by
    the cores of a chip, and scratch BARRIER semaphores when the kernel allocates one."""
    notes = []
    if devices * ctx.cores > 1:
        notes.append(_device_barrier_note(ctx, barrier))
    pipeline = ctx.pipeline
    copied = sorted(pipeline.touched) if pipeline is not None else []
    if pipeline is not None and copied:
        notes.append(
            f"{', '.join(copied)}: the Pallas pipeline's copy-in (inputs) and copy-out (outputs) of "
            "these blocks around each grid step are modelled as a write and a read of the whole "
            "block at the pallas_call, skipped while the block index stays the same, so a DMA "
            f"still in flight on the block across a step boundary races with them ({PIPELINE_BASIS})"
        )
        unknown = pipeline.unknown_indices()
        if unknown:
            notes.append(
                f"{', '.join(unknown)}: the block index map reads a scalar-prefetch value the script's "
                "operands did not give, so the block is taken to change at every grid step (copied "
                "in or out at every step boundary); a race with those copies may not happen"
            )
    written_back = sorted(d.name for d in ctx.buffers.values() if d.written_back)
    if written_back:
        notes.append(
            f"{', '.join(written_back)}: the HBM array of a pipelined output is one buffer of the chip, "
            f"shared by its {ctx.cores} TensorCores; each core's copy-out of an output block after a "
            "grid step is modelled as a write of that block's region of it at the pallas_call, so two "
            "cores writing back the same block race (JAX 0.10.2's TPU interpreter stores each output "
            "block into the HBM buffer it allocates once per device, and its race detector compares "
            "the cores' stores: the grid loop of interpret_pallas_call in "
            "jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py)"
        )
    shared = sorted(d.name for d in ctx.buffers.values() if d.scope is ir.Scope.DEVICE and not d.written_back)
    if ctx.cores > 1 and shared:
        notes.append(
            f"{', '.join(shared)}: a kernel operand in HBM is one buffer of the chip, shared by its "
            f"{ctx.cores} TensorCores, so their accesses to it are race-checked against each other; "
            f"VMEM/SMEM buffers and semaphores are each core's own ({SHARED_HBM_BASIS})"
        )
    scratch_barriers = sorted(
        d.name for d in ctx.semaphores.values() if d.kind is SemKind.BARRIER and d.origin is not SemOrigin.BARRIER
    )
    if scratch_barriers:
        notes.append(
            f"{', '.join(scratch_barriers)}: a scratch SemaphoreType.BARRIER semaphore is checked "
            "as an ordinary scratch semaphore of each core, allocated afresh at each entry, not as "
            f"the barrier semaphore of the collective_id ({SCRATCH_BARRIER_BASIS}); a kernel whose "
            "entry barrier is built on it has no handshake with peers that have not entered yet"
        )
    return notes


def _device_barrier_note(ctx: KernelContext, barrier: bool) -> str:
    if barrier:
        return (
            "with collective_id None and skip_device_barrier False, XLA runs a barrier across every "
            "device and core before the body: no thread starts the body before all have entered "
            f"({DEVICE_BARRIER_BASIS})"
        )
    why = (f"collective_id={ctx.collective_id} is set" if ctx.collective_id is not None
           else "skip_device_barrier=True")
    return (
        f"{why}, so no default device barrier runs before the body: a peer may not have entered "
        f"the kernel when a remote signal or copy reaches it ({DEVICE_BARRIER_BASIS})"
    )


def _declare_default_barrier(ctx: KernelContext, devices: int) -> bool:
    """Declare the default device barrier's semaphores when XLA inserts one; whether it does."""
    if ctx.collective_id is not None or ctx.skip_device_barrier or devices * ctx.cores == 1:
        return False
    for name, shown_as in ((ARRIVE, "the arrivals at XLA's device barrier before the kernel"),
                           (RELEASE, "the release from XLA's device barrier before the kernel")):
        ctx.unique(name)
        ctx.semaphores[name] = ir.SemDecl(
            name, SemKind.BARRIER, 1, SemOrigin.BARRIER, ir.Scope.CORE, None, ctx.kernel_loc, shown_as=shown_as
        )
    return True


def _emit_device_barrier(t: ThreadLowering, devices: int) -> None:
    # Located at the kernel's definition: the barrier runs before its first line.
    loc, em = t.kernel.kernel_loc, t.emitter
    total = devices * t.kernel.cores
    em.emit(ir.Signal(loc, ir.SemRef(ARRIVE, 0, 0, 0), 1))
    if t.device == 0 and t.core == 0:
        em.emit(ir.Wait(loc, ir.SemRef(ARRIVE), total))
        for device in range(devices):
            for core in range(t.kernel.cores):
                em.emit(ir.Signal(loc, ir.SemRef(RELEASE, 0, device, core), 1))
    em.emit(ir.Wait(loc, ir.SemRef(RELEASE), 1))
