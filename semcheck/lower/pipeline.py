"""The Pallas TPU pipeline's own copies of a pallas_call's blocks at grid-step boundaries.

A BlockSpec'd operand outside HBM (VMEM/SMEM) is a per-core block buffer that the pipeline
fills from, or writes back to, the HBM array around each grid step. JAX 0.10.2's TPU
interpreter (the grid loop of `interpret_pallas_call` in
jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py) does, on each core, for its own
sequence of grid points:

* before step k: copy every input block in, when k is the core's first step or the block's
  start indices differ from step k-1's (a revisited block index is not copied again);
* after step k: copy every output block out, when k is the core's last step or the block's
  start indices differ from step k+1's.

Those copies read and write the block buffer while a kernel DMA may still be in flight on it
(an output block written back while a DMA still lands in it; an input block refilled while a
DMA still reads it), so they are emitted as a Store (copy-in) and a Load (copy-out) of the
whole block at the kernel's call site, flagged as the pipeline's (`ir.PipelineCopy`) so that
a report says what they are. Only blocks some DMA touches get them: nothing else can overlap
a core's own block buffer, and its plain accesses are in program order with the copies. The
HBM side of these copies is not modelled (the HBM arrays of pipelined operands are not
buffers of the protocol; the interpreter rejects a non-consecutive revisit of an output
block, _check_for_revisiting).
"""

from __future__ import annotations

from dataclasses import field

from semcheck import ir
from semcheck.jax_compat import jax_internal
from semcheck.records import record

PIPELINE_BASIS = (
    "JAX 0.10.2's TPU interpreter copies an input block in before a grid step that is the "
    "core's first or whose block start indices changed, and an output block out after a step "
    "that is the core's last or whose next step's indices differ (the grid loop of "
    "interpret_pallas_call in jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py)"
)


# Memory spaces of one chip's HBM: a kernel operand there is one buffer shared by the chip's
# TensorCores. JAX 0.10.2's TPU interpreter allocates an "any"/"hbm" buffer once per device,
# keyed with core 0 and referenced by every core, and every other space (VMEM, SMEM) once
# per core (_allocate_buffer in jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py).
HBM_SPACES = frozenset({"any", "hbm"})


@record(frozen=True)
class BlockDim:
    """One dim of a block: its size, and whether the index map gives its start in elements
    (Squeezed, Element) rather than in blocks (Blocked)."""

    size: int
    index_is_start: bool


@record(frozen=True)
class PipelinedBlock:
    """One BlockSpec'd operand in VMEM/SMEM: its block buffer and its block index per grid
    point (None where the index map needs a value semcheck does not know)."""

    buffer: str
    is_input: bool
    block_index: dict  # grid point -> tuple of block indices | None
    # An output's HBM array when the device's cores share it (more than one core), and how
    # a block index becomes the start of its region there.
    hbm: str | None = None
    block_dims: tuple[BlockDim, ...] = ()
    array_shape: tuple[int, ...] = ()  # the operand's whole array (lower/produced.py compares it with the block)

    def varies(self) -> bool:
        """Whether the buffer holds different parts of its operand at different grid points
        (or may: an index semcheck does not know)."""
        indices = set(self.block_index.values())
        return len(indices) > 1 or None in indices

    def held_at(self, point: tuple[int, ...]) -> str | None:
        """Which part of its operand the buffer holds at grid `point`, as input names say
        it: "block (1,)" (the index map's block index), or "step (1,)" where the index
        needs a value semcheck does not know (then each step is taken to hold its own);
        None when it holds the same block at every point."""
        if not self.varies():
            return None
        index = self.block_index.get(point)
        return f"step {point}" if index is None else f"block {index}"


def pipelined_blocks(grid_mapping, refs, n_index: int, buffers: dict, points, scalar_values,
                     shared_hbm: bool = False) -> list[PipelinedBlock]:
    """The pallas_call's operands the pipeline copies per grid step. `refs` are the kernel's
    refs (index operands first), `scalar_values` the script's scalar-prefetch operands
    (index operand position -> array) where known. With `shared_hbm` (several cores per
    device) each output names its HBM array, `hbm_name(buffer)`."""
    blocks = []
    every_point = sorted({p for core_points in points for p in core_points})
    for j, bm in enumerate(grid_mapping.block_mappings[:grid_mapping.num_inputs + grid_mapping.num_outputs]):
        ref = refs[n_index + j]
        decl = buffers.get(ref.alloc)
        if ref.is_semaphore or decl is None or decl.space in HBM_SPACES:
            continue
        index = {p: _block_index(bm, p, scalar_values) for p in every_point}
        is_input = j < grid_mapping.num_inputs
        shared = shared_hbm and not is_input
        blocks.append(PipelinedBlock(
            ref.alloc, is_input, index,
            hbm=hbm_name(ref.alloc) if shared else None,
            block_dims=_block_dims(bm) if shared else (),
            array_shape=tuple(bm.array_aval.shape),
        ))
    return blocks


def hbm_name(buffer: str) -> str:
    """The protocol's name for the HBM array a pipelined output's block is written back to."""
    return f"{buffer} (HBM array)"


def _block_dims(bm) -> tuple[BlockDim, ...]:
    pallas_core = jax_internal("pallas_core")

    return tuple(
        BlockDim(pallas_core.get_block_size(dim), not isinstance(dim, pallas_core.Blocked))
        for dim in bm.block_shape
    )


def hbm_region(block: PipelinedBlock, point: tuple[int, ...]) -> ir.Region:
    """The region of its HBM array that `block` is written back to after grid `point`: the
    whole array, widened, when the block index needs a value semcheck does not know."""
    assert block.hbm is not None
    index = block.block_index.get(point)
    if index is None or len(index) != len(block.block_dims):
        return ir.Region(block.hbm, widened="the output's block index needs a value semcheck does not know")
    starts = [i if dim.index_is_start else i * dim.size for i, dim in zip(index, block.block_dims)]
    sizes = [max(0, min(dim.size, extent - start))
             for start, dim, extent in zip(starts, block.block_dims, block.array_shape)]
    return ir.Region(block.hbm, tuple(starts), tuple(sizes))


def uses_scalar_prefetch(grid_mapping, grid_rank: int) -> bool:
    """Whether some block's index map reads a scalar-prefetch operand (then block indices
    are computed per device, from that device's operand values)."""
    return any(_prefetch_used(bm.index_map_jaxpr.jaxpr, grid_rank) for bm in grid_mapping.block_mappings)


def _prefetch_used(jaxpr, grid_rank: int) -> bool:
    jax_core = jax_internal("core")

    used = {v for eqn in jaxpr.eqns for v in eqn.invars if isinstance(v, jax_core.Var)}
    used |= {v for v in jaxpr.outvars if isinstance(v, jax_core.Var)}
    return any(v in used for v in jaxpr.invars[grid_rank:])


def _block_index(bm, point: tuple[int, ...], scalar_values) -> tuple | None:
    import numpy as np
    jax_core = jax_internal("core")

    closed = bm.index_map_jaxpr
    jaxpr = closed.jaxpr
    prefetch = jaxpr.invars[len(point):]
    if _prefetch_used(jaxpr, len(point)) and not all(k in scalar_values for k in range(len(prefetch))):
        return None  # the block index depends on a scalar-prefetch value not known
    args = [np.int32(i) for i in point] + [
        scalar_values.get(k, np.zeros(var.aval.shape, var.aval.dtype)) for k, var in enumerate(prefetch)
    ]
    try:
        out = jax_core.eval_jaxpr(jaxpr, closed.consts, *args)
    except Exception:  # noqa: BLE001 - an index map JAX cannot evaluate on concrete values
        return None
    return tuple(int(x) for x in out)


def copy_in(t, blocks: list[PipelinedBlock], points: list, k: int, loc: ir.Loc) -> None:
    """Before step k of this core's grid points: refill the input blocks that need it."""
    for block in blocks:
        if block.is_input and _changes(block, points, k, k - 1):
            t.emitter.emit(ir.Store(loc, ir.Region(block.buffer), pipeline=ir.PipelineCopy.COPY_IN))


def drop_moved(t, blocks: list[PipelinedBlock], points: list, k: int) -> None:
    """Before step k (after the first): the thread's memory forgets every block buffer that
    now holds another block. An input block is refilled from the array, and an output
    block's previous contents were written back, so a store into the previous block says
    nothing about this one (all blocks, not only those DMAs touch: this is data, not race
    checking)."""
    for block in blocks:
        if k > 0 and _changes(block, points, k, k - 1):
            t.memory.drop(block.buffer)


def copy_out(t, blocks: list[PipelinedBlock], points: list, k: int, loc: ir.Loc) -> None:
    """After step k: write back the output blocks whose next step moves on (or at the end)."""
    for block in blocks:
        if not block.is_input and _changes(block, points, k, k + 1):
            t.emitter.emit(ir.Load(loc, ir.Region(block.buffer), pipeline=ir.PipelineCopy.COPY_OUT))


def write_back(t, blocks: list[PipelinedBlock], points: list, k: int, loc: ir.Loc) -> None:
    """After step k, on a chip whose cores share the outputs' HBM arrays: the copy-out's
    write of each output block that moves on (or at the end) into its HBM array."""
    for block in blocks:
        if block.hbm is not None and _changes(block, points, k, k + 1):
            t.emitter.emit(ir.Store(loc, hbm_region(block, points[k]), pipeline=ir.PipelineCopy.WRITE_BACK))


def _changes(block: PipelinedBlock, points: list, k: int, other: int) -> bool:
    if not 0 <= other < len(points):
        return True
    here, there = block.block_index[points[k]], block.block_index[points[other]]
    return here is None or there is None or here != there


def dma_touched(threads: list[ir.Thread]) -> set[str]:
    """Every buffer some DMA of the protocol reads or writes."""
    return {
        region.buffer
        for thread in threads for instr in thread.body if isinstance(instr, ir.DmaStart)
        for region in (instr.src, instr.dst)
    }


@record
class Pipeline:
    """A pallas_call's pipelined blocks per device, and which of them some DMA touches (only
    those get copies: found by lowering once, then again with them)."""

    blocks: dict  # device -> list[PipelinedBlock]
    loc: ir.Loc  # where the copies are reported: the pallas_call
    touched: set = field(default_factory=set)

    def held_at(self, device: int, buffer: str, point: tuple[int, ...]) -> str | None:
        """Which part of its operand `buffer` holds at grid `point` on `device`, when that
        differs between grid points (`PipelinedBlock.held_at`); None for any other buffer."""
        block = next((b for b in self.blocks.get(device, []) if b.buffer == buffer), None)
        return None if block is None else block.held_at(point)

    def every(self, device: int) -> list[PipelinedBlock]:
        return self.blocks.get(device, [])

    def copied(self, device: int) -> list[PipelinedBlock]:
        return [b for b in self.blocks.get(device, []) if b.buffer in self.touched]

    def unknown_indices(self) -> list[str]:
        """Copied blocks whose index map needs a value semcheck does not know somewhere."""
        return sorted({
            b.buffer for blocks in self.blocks.values() for b in blocks
            if b.buffer in self.touched and None in b.block_index.values()
        })

    def newly_touched(self, threads: list[ir.Thread]) -> bool:
        """Record the blocks the threads' DMAs touch; whether that added any."""
        names = {b.buffer for blocks in self.blocks.values() for b in blocks}
        found = dma_touched(threads) & names
        if found <= self.touched:
            return False
        self.touched |= found
        return True
