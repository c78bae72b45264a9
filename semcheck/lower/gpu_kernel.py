"""From a captured Mosaic GPU kernel (an `mpmd_map` over a `plgpu.Mesh`, which both
`plgpu.kernel` and `pl.kernel(mesh=plgpu.Mesh(...))` produce) to a Protocol.

* One thread per (device, block, Pallas thread). Devices are the enclosing shard_map's mesh,
  row-major. Blocks are the CUDA blocks: the mesh's `grid` counts clusters and every cluster
  holds `prod(cluster)` blocks (Mosaic GPU launches `grid * cluster` blocks), numbered
  row-major over `(*grid, *cluster)`; in the IR a block is a thread's `core`. With
  `num_threads`, every block runs that many Pallas threads (warpgroups), the thread's `sub`.
* There is no default device barrier and no zero-at-exit obligation: the GMEM semaphore
  scratch is zero-filled before each launch (reference §6), and JAX's own collectives
  signal peers with no entry handshake, relying on that fill happening before any peer's
  signal. semcheck models the kernels as they assume (say so in every report's notes).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from semcheck import ir
from semcheck.frontends import LoadError
from semcheck.ir import Backend, SemOrigin
from semcheck.lower.context import KernelContext, ThreadLowering
from semcheck.lower.interpreter import eval_jaxpr

GPU = "gpu"  # the backend whose lowering rules gpu_*.py register

ZERO_FILL_NOTE = (
    "Mosaic GPU: GMEM semaphores are zero-filled before each launch and may end non-zero; "
    "semcheck assumes, as JAX's GPU collectives do, that every device's zero fill happens "
    "before any peer's first signal (no source states how the two are ordered)"
)


def is_gpu_mesh(mesh) -> bool:
    return type(mesh).__module__.startswith("jax._src.pallas.mosaic_gpu") and hasattr(mesh, "num_threads")


@dataclass(frozen=True)
class MBarrier:
    """What lowering must know of an mbarrier allocation to number its phases."""

    num_arrivals: int
    cluster_axes: tuple[str, ...] = ()  # a ClusterBarrier's axes: arrivals reach every block on them


@dataclass
class GpuKernelContext(KernelContext):
    grid_sizes: dict[str, int] = field(default_factory=dict)  # grid and cluster axes, in order
    cluster_names: tuple[str, ...] = ()
    thread_axis: str | None = None
    num_threads: int = 1
    mbarriers: dict[str, MBarrier] = field(default_factory=dict)
    global_slots: dict = field(default_factory=dict)  # get_global call site -> RefValue

    def block_of(self, coords: dict[str, int]) -> int:
        """The linear block index of grid and cluster coordinates."""
        index = 0
        for name, size in self.grid_sizes.items():
            index = index * size + coords[name]
        return index

    def block_coords(self, block: int) -> dict[str, int]:
        coords = {}
        for name, size in reversed(list(self.grid_sizes.items())):
            coords[name] = block % size
            block //= size
        return dict(reversed(list(coords.items())))


class GpuThreadLowering(ThreadLowering):
    """Lowers the kernel body for one (device, block, Pallas thread)."""

    kernel: GpuKernelContext

    def __init__(self, kernel: GpuKernelContext, device: int, block: int, sub: int):
        super().__init__(kernel, device, block)
        self.sub = sub
        self.block_coords = kernel.block_coords(block)
        # The k-th wait of this thread on an mbarrier waits for phase k (the hardware
        # tracks the parity per waiting thread).
        self.barrier_waits: dict[tuple[str, int], int] = {}
        self.scope_entries: dict[int, int] = {}  # run_scoped site -> times this thread entered it

    def axis_value(self, name, eqn) -> int:
        if name in self.coords:
            return self.coords[name]
        if name in self.block_coords:
            return self.block_coords[name]
        if name is not None and name == self.kernel.thread_axis:
            return self.sub
        raise LoadError(
            f"axis_index: axis {name!r} is neither a mesh axis of the enclosing shard_map "
            f"({', '.join(map(repr, self.coords)) or 'none'}) nor a grid, cluster or thread "
            f"axis of the GPU kernel ({', '.join(map(repr, self.kernel.grid_sizes)) or 'none'})",
            self.loc(eqn),
            hint="call the kernel inside jax.shard_map over a mesh that has this axis",
        )

    def axis_size(self, name) -> int:
        if name in self.coords:
            return self.kernel.mesh.axis_sizes[self.kernel.mesh.axis_names.index(name)]
        if name in self.kernel.grid_sizes:
            return self.kernel.grid_sizes[name]
        if name is not None and name == self.kernel.thread_axis:
            return self.kernel.num_threads
        raise KeyError(name)


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


def lower_gpu_kernel(capture, name: str, kernel_loc: ir.Loc) -> list[ir.Protocol]:
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
    )
    ctx.note(ZERO_FILL_NOTE)
    n_in, n_out = capture.num_operands, len(params["out_avals"])
    invars = list(jaxpr.invars)
    arg_names = list(getattr(jaxpr.debug_info, "arg_names", None) or ())
    if len(arg_names) != len(invars):
        arg_names = [f"operand{k}" for k in range(len(invars))]
    origins = [SemOrigin.ARGUMENT] * (n_in + n_out) + [SemOrigin.SCRATCH] * (len(invars) - n_in - n_out)
    from semcheck.lower.gpu_memory import declare_gpu_ref

    refs = [declare_gpu_ref(ctx, a, v.aval, o, kernel_loc) for a, v, o in zip(arg_names, invars, origins)]
    threads = []
    for device, block, sub in itertools.product(range(ctx.mesh.size), range(ctx.cores), range(num_threads)):
        t = GpuThreadLowering(ctx, device, block, sub)
        t.program_ids = tuple(t.block_coords[n] for n in mesh.grid_names)
        # No KernelEntry/KernelExit: they stand for TPU's per-invocation allocation and
        # entry checks, which a GPU launch does not have; as actions they would only order
        # the Pallas threads of a block against each other for nothing.
        eval_jaxpr(t, jaxpr, [], refs)
        threads.append(ir.Thread(device, block, t.emitter.build(), sub))
    return [
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
            notes=tuple(ctx.notes),
        )
    ]
