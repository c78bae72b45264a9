"""From a captured Mosaic GPU kernel (an `mpmd_map` over a `plgpu.Mesh`, which both
`plgpu.kernel` and `pl.kernel(mesh=plgpu.Mesh(...))` produce) to a Protocol: one thread per
(device, block, Pallas thread), each lowered by the GPU rules (see `gpu_kernel`)."""

from __future__ import annotations

import itertools
import math

from semcheck import ir
from semcheck.errors import LoadError
from semcheck.ir import Backend, SemOrigin
from semcheck.lower.gpu_kernel import GPU, SKIPPED_BARRIER_NOTE, ZERO_FILL_NOTE, GpuKernelContext, GpuThreadLowering
from semcheck.lower.gpu_memory import declare_gpu_ref
from semcheck.lower import gpu_data
from semcheck.lower.context import operand_data
from semcheck.lower.data import data_notes
from semcheck.lower.interpreter import eval_jaxpr
from semcheck.lower.ref_names import ref_names
from semcheck.version import ISSUES_URL


def definition_loc(loc: ir.Loc, name: str) -> ir.Loc:
    """`plgpu.kernel` traces the body through a wrapper of its own, so the jaxpr names the
    wrapper; the body's `def` is the nearest `def name(` at or above its first line."""
    import linecache
    import re

    pattern = re.compile(rf"^\s*def\s+{re.escape(name)}\s*\(")
    for line in range(loc.line, 0, -1):
        if pattern.match(linecache.getline(loc.file, line)):
            return ir.Loc(loc.file, line)
    return loc


def _gpu_compiler_params(compiler_params):
    """The kernel's plgpu.CompilerParams: passed as is, or under the "mosaic_gpu" key."""
    if isinstance(compiler_params, dict):
        return compiler_params.get("mosaic_gpu")
    return compiler_params


def lower_gpu_kernel(capture, name: str, kernel_loc: ir.Loc) -> list[ir.Protocol]:
    """The kernel's protocol, lowered again while some buffer a thread read through the data
    path turns out to have a writer the thread does not follow (gpu_data.py)."""
    unfollowed: dict[str, str] = {}
    for _ in range(gpu_data.MAX_PASSES):
        protocol, ctx = _lower_once(capture, name, kernel_loc, unfollowed)
        found = gpu_data.unfollowed(list(protocol.threads), ctx.gpu_data_reads)
        if found.keys() <= unfollowed.keys():
            return [protocol]
        unfollowed = {**unfollowed, **found}
    raise LoadError(f"{name}: the buffers whose values semcheck can follow did not settle after "
                    f"{gpu_data.MAX_PASSES} lowerings", kernel_loc, hint=f"please report this kernel at {ISSUES_URL}")


def _lower_once(capture, name: str, kernel_loc: ir.Loc, unfollowed: dict[str, str]):
    kernel_loc = definition_loc(kernel_loc, name)
    params = capture.params
    [jaxpr] = params["jaxprs"]
    [mesh] = params["meshes"]
    if jaxpr.constvars:
        raise LoadError(
            f"{name}: the kernel captures constants (Pallas cannot lower that either)",
            kernel_loc,
            hint="pass the constants as kernel inputs",
        )
    grid, cluster = tuple(mesh.grid), tuple(mesh.cluster)
    if not all(isinstance(d, int) for d in grid + cluster):
        raise LoadError(f"{name}: the grid {grid} has dimensions known only at run time", kernel_loc)
    names = tuple(mesh.grid_names) + tuple(mesh.cluster_names)
    if len(set(names)) != len(names) or set(names) & set(capture.mesh.axis_names):
        raise LoadError(
            f"{name}: grid and cluster axis names {names} must be distinct from each other and "
            f"from the device mesh axes {capture.mesh.axis_names}",
            kernel_loc,
        )
    num_threads = int(mesh.num_threads or 1)
    ctx = GpuKernelContext(
        name=name,
        mesh=capture.mesh,
        cores=math.prod(grid) * math.prod(cluster),
        kernel_loc=kernel_loc,
        backend=GPU,
        grid=grid,
        grid_names=tuple(mesh.grid_names),
        grid_sizes=dict(zip(names, grid + cluster)),
        cluster_names=tuple(mesh.cluster_names),
        thread_axis=mesh.thread_name if mesh.num_threads else None,
        num_threads=num_threads,
        gpu_compiler_params=_gpu_compiler_params(params.get("compiler_params")),
    )
    ctx.note(ZERO_FILL_NOTE)
    if getattr(ctx.gpu_compiler_params, "skip_device_barrier", False):
        ctx.note(SKIPPED_BARRIER_NOTE)
    ctx.gpu_unfollowed = dict(unfollowed)
    n_in, n_out = capture.num_operands, len(params["out_avals"])
    invars = list(jaxpr.invars)
    arg_names = ref_names(jaxpr, "operand", kernel_loc)
    ctx.body_operands = len(invars)
    origins = [SemOrigin.ARGUMENT] * (n_in + n_out) + [SemOrigin.SCRATCH] * (len(invars) - n_in - n_out)
    refs = [declare_gpu_ref(ctx, a, v.aval, o, kernel_loc) for a, v, o in zip(arg_names, invars, origins)]
    _operand_data(ctx, capture, refs[:n_in])
    threads = []
    for device, block, sub in itertools.product(range(ctx.mesh.size), range(ctx.cores), range(num_threads)):
        t = GpuThreadLowering(ctx, device, block, sub)
        t.program_ids = tuple(t.block_coords[n] for n in mesh.grid_names)
        # No KernelEntry/KernelExit: they stand for TPU's per-invocation allocation and
        # entry checks, which a GPU launch does not have; as actions they would only order
        # the Pallas threads of a block against each other for nothing.
        eval_jaxpr(t, jaxpr, [], refs)
        threads.append(ir.Thread(device, block, t.emitter.build(), sub))
        issuers = [t]
        for _warp, w in sorted(t.warp_threads.items()):
            body = w.emitter.build()
            if body:  # a warp that took part in some warp-level core_map
                threads.append(ir.Thread(device, block, body, w.sub))
                issuers.append(w)
        for issuer in issuers:  # their tensor cores (gpu_tcgen05.py)
            if issuer.tensor_core is not None:
                tc = issuer.tensor_core
                threads.append(ir.Thread(device, block, tc.emitter.build(), tc.sub))
    return (
        ir.Protocol(
            name=name,
            backend=Backend.GPU,
            devices=ctx.mesh.size,
            cores=ctx.cores,
            threads=tuple(threads),
            semaphores=tuple(ctx.semaphores.values()),
            buffers=tuple(ctx.buffers.values()),
            inputs=tuple(ctx.inputs),
            loc=kernel_loc,
            frontend="gpu",
            notes=tuple(ctx.notes) + tuple(data_notes(ctx.data_uses)),
            data_uses=tuple(ctx.data_uses),
            withheld=ctx.withheld_buffers(),
            findings=_mesh_order_findings(ctx, capture),
            # What the kernel takes and returns, for the program linking (lower/program.py).
            ports=ir.Ports(tuple(arg_names[:n_in]), tuple(arg_names[n_in:n_in + n_out])),
        ),
        ctx,
    )


def _mesh_order_findings(ctx: GpuKernelContext, capture) -> tuple[ir.LoweringFinding, ...]:
    """Mosaic GPU addresses a peer by its NVSHMEM PE, which is the device id, and has no
    translation from mesh positions: its lowering of a kernel that reaches another device
    raises NotImplementedError unless the mesh lists the devices in id order
    (`_mosaic_gpu_lowering_rule`, jax/experimental/mosaic/gpu/core.py, JAX 0.10.2; JAX's
    test_permuted_mesh expects exactly that). The kernel runs on CPU devices all the same,
    so without this a `Mesh(jax.devices()[::-1], ...)` kernel was called safe."""
    from semcheck.kinds import Kind

    ids = ctx.mesh.device_ids
    if ctx.remote_at is None or not ids or ids == tuple(range(len(ids))):
        return ()
    loc = capture.call_loc or ctx.kernel_loc
    return (ir.LoweringFinding(
        Kind.NOT_LOWERABLE, loc,
        f"not lowerable: Mosaic GPU only supports meshes whose devices follow row-major device "
        f"ids, and this kernel reaches other devices (first at {ctx.remote_at}) over a mesh of "
        f"device ids {list(ids)}: JAX's lowering raises NotImplementedError for it; semcheck "
        "checked its protocol anyway, over mesh positions",
        hint="build the mesh with the devices in id order (jax.make_mesh, or "
             "Mesh(np.array(jax.devices()).reshape(shape), axes)) and permute the data instead",
    ),)


def _operand_data(ctx: GpuKernelContext, capture, inputs: list) -> None:
    """The script's values of the kernel's inputs, per device, as the threads' initial
    memory (lower/data.py; the same rules as a TPU kernel's operands, those that may be an
    earlier kernel's zeros included)."""
    data = operand_data(capture, {k: k for k in range(len(inputs))})
    ctx.use_operand_values(inputs, data)
