"""The GPU kernel's lowering state: the kernel context and the per-thread lowering that the
GPU rule modules (gpu_semaphores, gpu_barriers, gpu_memory) extend; `gpu_layout` lays the
threads out and runs them. What a GPU kernel is, in semcheck's terms:

* One thread per (device, block, Pallas thread). Devices are the enclosing shard_map's mesh,
  row-major. Blocks are the CUDA blocks: the mesh's `grid` counts clusters and every cluster
  holds `prod(cluster)` blocks (Mosaic GPU launches `grid * cluster` blocks), numbered
  row-major over `(*grid, *cluster)`; in the IR a block is a thread's `core`. With
  `num_threads`, every block runs that many Pallas threads (warpgroups), the thread's `sub`.
  A warp-level core_map adds a thread per warp (gpu_warps.py), and tcgen05 operations a
  tensor-core thread per issuing thread (gpu_tcgen05.py), numbered after them in `sub`.
* There is no default device barrier and no zero-at-exit obligation: the GMEM semaphore
  scratch is zero-filled before each launch (docs/semantics.md), and JAX's own collectives
  signal peers with no entry handshake, relying on that fill happening before any peer's
  signal. semcheck models the kernels as they assume (say so in every report's notes).
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from semcheck import ir
from semcheck.errors import LoadError
from semcheck.lower.context import KernelContext, ThreadLowering
from semcheck.records import record

GPU = "gpu"  # the backend whose lowering rules gpu_*.py register

ZERO_FILL_NOTE = (
    "Mosaic GPU: GMEM semaphores are zero-filled before each launch and may end non-zero; "
    "semcheck assumes, as JAX's GPU collectives do, that every device's zero fill happens "
    "before any peer's first signal (no source states how the two are ordered)"
)


SKIPPED_BARRIER_NOTE = (
    "skip_device_barrier=True (Mosaic GPU, JAX newer than 0.11): no cross-device barrier "
    "orders the GMEM semaphores' zero fill before a peer's first signal, which semcheck "
    "still assumes, so a signal that reaches a peer before its fill is not reported"
)


# The block-wide barrier (`gpu.barrier`, PTX `bar.sync 0`) that Mosaic GPU inserts, named as
# no kernel's allocation can be.
BLOCK_BARRIER = "block barrier (gpu.barrier)"


def is_gpu_mesh(mesh) -> bool:
    return type(mesh).__module__.startswith("jax._src.pallas.mosaic_gpu") and hasattr(mesh, "num_threads")


@record(frozen=True)
class MBarrier:
    """What lowering must know of an mbarrier allocation to number its phases."""

    num_arrivals: int
    cluster_axes: tuple[str, ...] = ()  # a ClusterBarrier's axes: arrivals reach every block on them


@record
class GpuKernelContext(KernelContext):
    grid_sizes: dict[str, int] = field(default_factory=dict)  # grid and cluster axes, in order
    cluster_names: tuple[str, ...] = ()
    thread_axis: str | None = None
    num_threads: int = 1
    mbarriers: dict[str, MBarrier] = field(default_factory=dict)
    global_slots: dict = field(default_factory=dict)  # get_global call site -> RefValue
    # Pallas thread -> the semaphores its TMA stores' completions count on (source read,
    # destination written), indexed by bulk group (gpu_memory.copy_smem_to_gmem).
    bulk_semaphores: dict[int, tuple[str, str]] = field(default_factory=dict)
    # Pallas thread -> its warps' (fork, join) semaphores (gpu_warps.py)
    warp_semaphores: dict[int, tuple[str, str]] = field(default_factory=dict)
    gpu_compiler_params: object = None  # the kernel's plgpu.CompilerParams, if any
    # How many refs plgpu.kernel's wrapper passes the body before its scratch: it allocates
    # the scratch with run_scoped(functools.partial(body, *refs), ...).
    body_operands: int = 0
    # The data path (gpu_data.py): buffer -> the threads that read it through the data path,
    # and buffer -> why its values are not followed (found by an earlier lowering).
    gpu_data_reads: dict[str, set] = field(default_factory=dict)
    gpu_unfollowed: dict[str, str] = field(default_factory=dict)
    # The first construct that reaches another device (a signal with a device id, a
    # multicast signal, a remote_ref): the kernel communicates, as Mosaic GPU's lowering
    # asks before it checks the mesh's device order (gpu_layout.py).
    remote_at: ir.Loc | None = None

    def reaches_peers(self, loc: ir.Loc) -> None:
        if self.remote_at is None:
            self.remote_at = loc

    def block_barrier(self, loc: ir.Loc) -> str:
        """The counter that stands for the block-wide `gpu.barrier` every Pallas thread of a
        block meets (gpu_memory.run_scoped), declared at its first use. It is not phased: a
        thread's k-th wait is for k arrivals of every thread, and the count cannot reach the
        next phase's end before this thread arrives again, so no parity can be overrun (and
        arrivals commute with the waits, as the reduction needs them to)."""
        if BLOCK_BARRIER not in self.semaphores:
            self.semaphores[BLOCK_BARRIER] = ir.SemDecl(
                BLOCK_BARRIER, ir.SemKind.MBARRIER, 1, ir.SemOrigin.SCOPED, ir.Scope.CORE, None, loc,
                shown_as="the block-wide barrier (gpu.barrier) that begins a thread-collective pl.run_scoped",
            )
        return BLOCK_BARRIER

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


@record
class BulkGroups:
    """One thread's TMA stores as PTX bulk async-groups: `cp.async.bulk.commit_group` closes
    the group of every store issued since the last commit, and `cp.async.bulk.wait_group n`
    waits for every group but the `n` most recent (its `.read` form only for their SMEM
    reads). Group k of a thread counts its completions on index k of that thread's two
    semaphores (`GpuKernelContext.bulk_semaphores`)."""

    sizes: list[int] = field(default_factory=list)  # local stores in each committed group
    open: int = 0  # local stores issued since the last commit
    reads_waited: int = 0  # groups whose source reads a wait has covered
    writes_waited: int = 0  # groups whose destination writes a wait has covered


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
        self.block_syncs = 0  # block-wide barriers this thread has met (gpu_memory.run_scoped)
        self.bulk = BulkGroups()
        # Warp-level core_map (gpu_warps.py): while lowering a warp's body, (warp axis name,
        # warp index); the Pallas thread's warps 1-3 as threads of their own; for a warp
        # thread, the Pallas thread it belongs to.
        self.warp: tuple[object, int] | None = None
        self.warp_threads: dict[int, GpuThreadLowering] = {}
        self.pallas_thread = sub
        # Barriers whose phase parities the warps of this Pallas thread no longer agree on
        # (some warp waited on it more often than another in a warp-level core_map), with
        # that core_map's location: a later wait by the whole warpgroup has no one phase.
        self.diverged_phases: dict[tuple[str, int], ir.Loc] = {}
        # For a warp thread: its Pallas thread's barrier wait counts at the last join.
        self.parent_phases_at_join: dict[tuple[str, int], int] | None = None
        self.tensor_core: Any = None  # gpu_tcgen05.TensorCore, at this thread's first tcgen05 operation

    def require_straight_line(self, eqn, subject: str, counted: str) -> None:
        """`counted` (what this thread numbers while lowering) must lie on the thread's one
        path: after a branch or loop known only at run time the count would depend on it."""
        if self.emitter.has_control_flow():
            raise self.error(eqn, f"{subject} after control flow known only at run time: semcheck "
                             f"{counted} while lowering and cannot follow them along several paths yet",
                             hint="bound loops and conditions by axis_index, program_id or constants")

    def axis_value(self, name, eqn) -> int:
        if self.warp is not None:
            axis, warp = self.warp
            if name == axis:
                return warp
            raise LoadError(
                f"axis_index: axis {name!r} inside a warp-level core_map, where only its warp "
                f"axis {axis!r} can be named (Mosaic GPU lowering raises the same: "
                "jax/_src/pallas/mosaic_gpu/lowering.py, _axis_index_rule)",
                self.loc(eqn),
                hint="read the other axis indices before the core_map and close over them",
            )
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
        if self.warp is not None and name == self.warp[0]:
            return 4  # warps per warpgroup (plgpu.WarpMesh)
        if name in self.coords:
            return self.kernel.mesh.axis_sizes[self.kernel.mesh.axis_names.index(name)]
        if name in self.kernel.grid_sizes:
            return self.kernel.grid_sizes[name]
        if name is not None and name == self.kernel.thread_axis:
            return self.kernel.num_threads
        raise KeyError(name)
