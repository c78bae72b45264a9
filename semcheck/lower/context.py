"""The state of lowering one kernel (`KernelContext`) and one of its threads (`ThreadLowering`).

A kernel context owns the protocol-wide declarations (semaphores, buffers, inputs) so that
every thread names one allocation the same way, as SPMD code does. A thread lowering owns
what differs per thread: its device and core, the grid step being lowered, its registers
and its instruction emitter.
"""

from __future__ import annotations

import math
import re
from dataclasses import field, replace

import numpy as np

from semcheck import ir
from semcheck.errors import LoadError
from semcheck.ir import Scope, SemKind, SemOrigin
from semcheck.lower.emitter import Emitter
from semcheck.lower.folds import KernelFolds
from semcheck.lower.source import KernelBody, Locator
from semcheck.lower.data import AssumedElements, ThreadMemory, initial_contents, unfollowed_operands
from semcheck.lower.pipeline import HBM_SPACES, Pipeline
from semcheck.lower.produced import Feed, KnownElements, ProducedOutputs, fed_note, unwritten_reason
from semcheck.lower.values import Known, RefValue, Sym, fill_of
from semcheck.jax_compat import jax_internal
from semcheck.records import record


@record(frozen=True)
class MeshShape:
    """The device mesh of the enclosing shard_map: axis names and sizes, row-major."""

    axis_names: tuple[str, ...] = ()
    axis_sizes: tuple[int, ...] = ()
    # The ids of the mesh's devices in row-major order (`Mesh.device_ids`); () where the mesh
    # is abstract. Mosaic GPU refuses a communicating kernel whose mesh does not list the
    # devices in id order (gpu_layout.py).
    device_ids: tuple[int, ...] = ()

    @property
    def size(self) -> int:
        return math.prod(self.axis_sizes)

    @property
    def strides(self) -> tuple[int, ...]:
        strides, acc = [], 1
        for size in reversed(self.axis_sizes):
            strides.append(acc)
            acc *= size
        return tuple(reversed(strides))

    def coords(self, device: int) -> dict[str, int]:
        return {
            name: device // stride % size
            for name, size, stride in zip(self.axis_names, self.axis_sizes, self.strides)
        }

    def __str__(self) -> str:
        return "x".join(f"{n}={s}" for n, s in zip(self.axis_names, self.axis_sizes)) or "1 device"


@record(frozen=True)
class OperandData:
    """The operand values the capture saw, by kernel invar index: `used` (device -> index ->
    the script's array) and `withheld` (device -> index -> (array, why it is not used):
    frontends/provenance.py)."""

    seen: bool = False  # the script ran the kernel, so its operand values were captured
    used: dict = field(default_factory=dict)
    withheld: dict = field(default_factory=dict)
    # Indices whose used values are the first call's, which later calls do not receive: they
    # get the kernel's own output, carried round a loop (KernelCapture.own_carried).
    first_call: tuple[int, ...] = ()
    # Index -> the earlier kernels whose outputs, computed by the capture (KernelCapture.computed),
    # the used values are computed from.
    computed: dict[int, tuple[str, ...]] = field(default_factory=dict)
    # Index -> the earlier kernel's output it is exactly, as semcheck's lowering of that
    # kernel computed it (lower/produced.py): `used` holds its KnownElements on the devices
    # where the lowering knows some element, instead of withholding the zeros.
    fed: dict[int, Feed] = field(default_factory=dict)


def operand_data(capture, operand_of: dict[int, int]) -> OperandData:
    """The values a KernelCapture saw of its operands, by kernel invar index (`operand_of`:
    invar index -> the call's operand index)."""
    used: dict[int, dict[int, object]] = {}
    withheld: dict[int, dict[int, tuple]] = {}
    feeds = {feed.operand: feed for feed in capture.feeds}
    fed = {k: feeds[op] for k, op in operand_of.items() if op in feeds}
    for device, values in capture.operand_values.items():
        why = dict(capture.withheld.get(device, {}))
        used[device] = {k: values[op] for k, op in operand_of.items() if op in values and op not in why}
        for k, feed in fed.items():
            elements = feed.elements.get(device)
            if elements is not None and operand_of[k] in why:
                used[device][k] = elements
                del why[operand_of[k]]
        held = {k: (values[op], why[op]) for k, op in operand_of.items() if op in values and op in why}
        if held:
            withheld[device] = held
    carried = tuple(k for k, op in operand_of.items() if op in capture.own_carried)
    origins = capture.operand_origins
    computed: dict[int, tuple[str, ...]] = {}
    for k, op in operand_of.items():
        origin = origins[op] if op < len(origins) else None
        if origin is None or not any(k in u for u in used.values()):
            continue
        names = (*origin.computed, *(capture.computed_earlier if origin.outside else ()))
        if names:
            computed[k] = tuple(dict.fromkeys(names))
    return OperandData(bool(capture.operand_values), used, withheld, carried, computed, fed)


def semaphore_kind(dtype) -> SemKind | None:
    """The semaphore kind of a ref's dtype, or None for a buffer."""
    dtypes = jax_internal("dtypes")
    pl_core = jax_internal("pallas_core")
    tpu_core = jax_internal("tpu_core")

    try:
        if not dtypes.issubdtype(dtype, pl_core.semaphore_dtype):
            return None
    except TypeError:
        return None
    if dtypes.issubdtype(dtype, tpu_core.dma_semaphore):
        return SemKind.DMA
    if dtypes.issubdtype(dtype, pl_core.barrier_semaphore):
        return SemKind.BARRIER
    return SemKind.REGULAR


def memory_space_name(aval) -> str:
    space = getattr(aval, "memory_space", None)
    if space is None:
        return "any"
    return str(getattr(space, "value", space)).lower()



SHARED_HBM_BASIS = (
    "JAX 0.10.2's TPU interpreter allocates a kernel operand in HBM (memory space ANY or HBM) "
    "once per device and lets every core of it use that one buffer, while VMEM and SMEM "
    "buffers and semaphores exist once per core (_allocate_buffer and _allocate_semaphores in "
    "jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py); its race detector compares "
    "the cores' accesses to it"
)


def buffer_scope(space: str, origin: SemOrigin) -> Scope:
    """Which threads share one instance of a buffer: a kernel operand in HBM is the chip's,
    anything else (VMEM/SMEM blocks and scratch, run_scoped allocations) is a core's."""
    if origin is SemOrigin.ARGUMENT and space in HBM_SPACES:
        return Scope.DEVICE
    return Scope.CORE


@record
class KernelContext:
    name: str
    mesh: MeshShape
    cores: int
    kernel_loc: ir.Loc
    core_axis: str | None = None  # the TensorCoreMesh axis (core_map / pl.kernel)
    backend: str = "tpu"  # whose lowering rules apply (registry.BACKEND_RULES)
    grid: tuple[int, ...] = ()
    grid_names: tuple = ()
    collective_id: int | None = None
    skip_device_barrier: bool = False
    allow_unused_collective_id: bool = False
    # pltpu.CompilerParams(disable_semaphore_checks=True) turns the chip's check that scratch
    # semaphores are 0 at exit off: a leftover then carries into the next kernel.
    semaphore_checks: bool = True
    # pltpu.CompilerParams(disable_bounds_checks=True): Mosaic checks no copy window, so an
    # empty window past its buffer's end is no fault (ir.DmaStart.bounds_checked).
    bounds_checks: bool = True
    # The first copy whose size is not a whole number of the chip's 32-byte DMA units
    # (lower/tpu_hardware.py: the kernel's DMA semaphores then count bytes).
    partial_unit_copy: ir.Loc | None = None
    dma_by_hand: bool = False  # a DMA semaphore signalled, waited or read by hand
    semaphores: dict[str, ir.SemDecl] = field(default_factory=dict)
    buffers: dict[str, ir.BufferDecl] = field(default_factory=dict)
    inputs: list[ir.Input] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    findings: list[ir.LoweringFinding] = field(default_factory=list)
    # run_scoped allocations by site: a TPU site's list of refs, a GPU site's ref per argument
    scoped: dict[tuple, list[RefValue] | RefValue] = field(default_factory=dict)
    fold_cache: dict = field(default_factory=dict)
    folds: KernelFolds = field(default_factory=KernelFolds)  # exact folds through one JAX program a kernel (folds.py)
    # Scalar-prefetch operands: like any operand they hold the script's values; where the
    # capture saw none, each integer element is a protocol input per device over its type.
    scalar_operands: frozenset[str] = frozenset()
    _scalar_inputs: dict[tuple, str] = field(default_factory=dict)
    # The operand values the script passed: device -> buffer -> array (empty when the
    # capture saw none, e.g. the kernel was traced but never run).
    initial_data: dict[int, dict[str, np.ndarray | KnownElements]] = field(default_factory=dict)
    data_seen: bool = False  # the script ran the kernel, so its operand values were captured
    # Operands whose script values were seen but are not used, because they may be an earlier
    # kernel's zeros (frontends/provenance.py): device -> buffer -> why.
    withheld_data: dict[int, dict[str, str]] = field(default_factory=dict)
    # Operands whose values were seen but are not followed (blocked ones): device -> buffer -> why.
    unfollowed_data: dict[int, dict[str, str]] = field(default_factory=dict)
    # Data moved by remote copies (schedule.py): where each thread reads data, what each
    # remote copy carries, and which payloads the canonical run landed before which read.
    read_points: dict[int, tuple] = field(default_factory=dict)  # id(instr) -> ((device, core), seq)
    payloads: dict[int, object] = field(default_factory=dict)  # id(DmaStart) -> data.Payload
    arrivals: dict[tuple, tuple] = field(default_factory=dict)
    volatile: set[str] = field(default_factory=set)  # buffers a copy to a run-time device may write
    # Shared HBM buffers one core copies into while another core of the chip may read them:
    # never followed (volatile too), since lowering follows each core's data on its own.
    shared_written: set[str] = field(default_factory=set)
    pipeline: Pipeline | None = None  # of a pallas_call with pipelined blocks
    read_buffers: set[str] = field(default_factory=set)  # buffers some thread's data reads touched
    assumed: frozenset[str] = frozenset()  # semcheck.assume names (see KernelCapture.assumed)
    data_uses: list[ir.DataUse] = field(default_factory=list)
    # Inputs standing for data this lowering did not know (`input_for_unknown_data`): a copy
    # the canonical run lands may define that data for the next lowering (tpu_kernel.py).
    unknown_data_inputs: list[str] = field(default_factory=list)
    # Operands that start with an earlier kernel's outputs as semcheck's lowering of it
    # computed them (lower/produced.py): device -> buffer -> why the elements it does not
    # know are unknown.
    fed_data: dict[int, dict[str, str]] = field(default_factory=dict)
    fed_from: dict[str, str] = field(default_factory=dict)  # buffer -> the earlier kernel
    fed_calls: dict[str, int | None] = field(default_factory=dict)  # buffer -> that kernel's call (Feed.producer_call)
    fed_through: dict[str, tuple[ir.ComputedBy, ...]] = field(default_factory=dict)  # buffer -> Feed.placed_by
    # Each thread's memory at its end, (device, core) -> data.ThreadMemory, and what they
    # say of the kernel's outputs (lower/produced.py), for the kernels after it.
    final_memories: dict = field(default_factory=dict)
    produced: ProducedOutputs | None = None

    def __post_init__(self) -> None:
        # A line in a helper the body calls names the calls from the body (ir.Loc.chain).
        self.locate = Locator(KernelBody(self.name.split(" ")[0], self.kernel_loc))
        self._names: set[str] = set()

    # -- names and declarations --

    def unique(self, base: str) -> str:
        name, n = base, 1
        while name in self._names:
            n += 1
            name = f"{base}#{n}"
        self._names.add(name)
        return name

    def declare_ref(self, base: str, aval, origin: SemOrigin, loc: ir.Loc, shown_as: str = "") -> RefValue:
        """A semaphore or buffer allocation for a ref aval (kernel operand, scratch,
        run_scoped allocation). A pallas_call operand's aval carries its BlockSpec's memory
        space ("default", i.e. VMEM, for a pipelined block). `shown_as`: a semaphore's
        `ir.SemDecl.shown_as`."""
        shape = tuple(int(d) for d in aval.shape)
        kind = semaphore_kind(aval.dtype)
        name = self.unique(base)
        if kind is not None:
            checked = self.semaphore_checks or origin not in (SemOrigin.SCRATCH, SemOrigin.SCOPED)
            self.semaphores[name] = ir.SemDecl(
                name, kind, max(1, math.prod(shape)), origin, Scope.CORE, None, loc, checked_at_exit=checked,
                shown_as=shown_as,
            )
            return RefValue(name, True, shape, aval.dtype)
        itemsize = getattr(np.dtype(aval.dtype), "itemsize", 4) if _is_numpy(aval.dtype) else 4
        space = memory_space_name(aval)
        self.buffers[name] = ir.BufferDecl(name, shape, itemsize, space, buffer_scope(space, origin), loc)
        return RefValue(name, False, shape, aval.dtype)

    def barrier_semaphore(self, loc: ir.Loc) -> RefValue:
        name = "barrier_semaphore"
        if name not in self.semaphores:
            self._names.add(name)
            self.semaphores[name] = ir.SemDecl(
                name, SemKind.BARRIER, 1, SemOrigin.BARRIER, Scope.CORE, self.collective_id, loc
            )
        pl_core = jax_internal("pallas_core")

        return RefValue(name, True, (), pl_core.BarrierSemaphore())

    def input_for_unknown_data(self, base: str, lo: int, hi: int, loc: ir.Loc) -> str:
        """A protocol input over `lo..hi` standing for a value taken from data this lowering
        does not know (a branch, a semaphore index or a `pl.select_ref` choice on it)."""
        name = self.unique(base)
        self.inputs.append(ir.Input(name, lo, hi, loc))
        self.unknown_data_inputs.append(name)
        return name

    def scalar_input(self, buffer: str, index: tuple[int, ...], device: int, dtype, loc: ir.Loc,
                     held: str | None = None) -> str:
        """The input holding the initial value of element `index` of `buffer` on `device`:
        an element semcheck.assume names, or one of a scalar-prefetch operand whose script
        value the capture did not see (`prefetch_unseen`). `held`: which block of a blocked
        operand the buffer holds (`ThreadLowering.block_held`), a different array element,
        so a different input, per block."""
        key = (buffer, index, device, held)
        if key not in self._scalar_inputs:
            info = np.iinfo(np.dtype(dtype)) if np.dtype(dtype) != np.bool_ else None
            lo, hi = (0, 1) if info is None else (int(info.min), int(info.max))
            self._scalar_inputs[key] = name = element_input_name(buffer, index, device, held)
            self._names.add(name)
            self.inputs.append(ir.Input(name, lo, hi, loc))
            unseen = None if self.is_assumed(name) else self.prefetch_unseen(buffer, device)
            self.note(_element_input_note(buffer, index, unseen, blocked=held is not None))
        return self._scalar_inputs[key]

    def prefetch_unseen(self, buffer: str, device: int) -> str | None:
        """Why the script's values of scalar-prefetch operand `buffer` on `device` are not
        known (None: they are, or `buffer` is no scalar-prefetch operand). Then its elements
        are protocol inputs over their type, which covers whatever the script passes."""
        if buffer not in self.scalar_operands:
            return None
        if buffer in self.fed_data.get(device, {}):
            return self.fed_data[device][buffer]
        if buffer in self.initial_data.get(device, {}):
            return None
        if not self.data_seen:
            return "the kernel was traced but not run, so the capture saw no operand values"
        why = self.withheld_data.get(device, {}).get(buffer)
        if why is not None:
            return values_not_used(why, device, buffer)
        return "the capture saw no value of it on that device"

    def use_operand_values(self, refs: list[RefValue], operands: OperandData) -> None:
        """The script's operand values as the threads' initial memory: `operands.used`
        (device -> ref index -> the script's array), and `operands.withheld` (device -> ref
        index -> (array, why)) for the values that may be an earlier kernel's zeros (not
        used; a note says which, where the kernel's ref would have held them)."""
        self.data_seen = operands.seen
        data, withheld = operands.used, operands.withheld
        seen = {d: {**{k: a for k, (a, _) in withheld.get(d, {}).items()}, **data.get(d, {})}
                for d in set(data) | set(withheld)}
        self.initial_data = initial_contents(refs, data)
        self.unfollowed_data = unfollowed_operands(refs, seen)
        followed = initial_contents(refs, seen)
        self.withheld_data = {}
        for device, why in withheld.items():
            kept = {refs[k].alloc: reason for k, (_, reason) in why.items() if refs[k].alloc in followed.get(device, {})}
            if kept:
                self.withheld_data[device] = kept
        if self.withheld_data:
            self.note(withheld_note(self.withheld_data, self.mesh.size))
        carried = sorted({refs[k].alloc for k in operands.first_call
                          if any(refs[k].alloc in used for used in self.initial_data.values())})
        if carried:
            self.note(first_call_note(carried))
        computed = {refs[k].alloc: kernels for k, kernels in operands.computed.items()
                    if any(refs[k].alloc in used for used in self.initial_data.values())}
        if computed:
            self.note(computed_note(computed))
        fed: dict[str, tuple[str, int, int, tuple[ir.ComputedBy, ...]]] = {}
        for device, values in sorted(self.initial_data.items()):
            for buffer, array in values.items():
                if isinstance(array, KnownElements):
                    feed = next(f for k, f in operands.fed.items() if refs[k].alloc == buffer)
                    producer = feed.producer
                    self.fed_data.setdefault(device, {})[buffer] = unwritten_reason(producer)
                    self.fed_from[buffer] = producer
                    self.fed_calls[buffer] = feed.producer_call
                    self.fed_through[buffer] = feed.placed_by
                    fed.setdefault(buffer, (producer, array.count(), array.value.size, feed.placed_by))
        if fed:
            self.note(fed_note(fed))

    def fed_operands(self) -> tuple[ir.FedOperand, ...]:
        """The operands that start with an earlier kernel's outputs as its lowering computed them."""
        return tuple(ir.FedOperand(buffer, producer, self.fed_calls.get(buffer), self.fed_through.get(buffer, ()))
                     for buffer, producer in sorted(self.fed_from.items()))

    def withheld_buffers(self) -> tuple[str, ...]:
        """The operands whose script values are not used on some device."""
        return tuple(sorted({buffer for why in self.withheld_data.values() for buffer in why}))

    def is_assumed(self, input_name: str) -> bool:
        from semcheck.passes.assumptions import covers

        return any(covers(a, input_name) for a in self.assumed)

    def assumed_elements(self, buffer: str, shape: tuple[int, ...], device: int,
                         held: str | None = None) -> np.ndarray | None:
        """Which elements of `buffer` semcheck.assume names on `device` (None: none), while
        it holds block `held` of a blocked operand. Read off the names (`NAME`, `NAME[i, j]`,
        `NAME[i, j]@dK`, `NAME[i, j]@dK block (b,)`), each element checked by the name of its
        input as `is_assumed` checks it, rather than by naming every element of a large
        buffer."""
        mask = np.zeros(shape, bool)
        for name in self.assumed:
            if name == buffer:  # covers every element of the operand, on every device
                mask[...] = True
            index = _element_named(name, buffer)
            if index is not None and len(index) == len(shape) and all(0 <= i < n for i, n in zip(index, shape)) \
                    and self.is_assumed(element_input_name(buffer, index, device, held)):
                mask[index] = True
        return mask if mask.any() else None

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def finding(self, kind, loc: ir.Loc, message: str, hint: str | None = None) -> None:
        """A finding of the lowering itself (`ir.LoweringFinding`), once per kind and line."""
        if all((f.kind, f.loc) != (kind, loc) for f in self.findings):
            self.findings.append(ir.LoweringFinding(kind, loc, message, hint))


def element_input_name(buffer: str, index: tuple[int, ...], device: int, held: str | None = None) -> str:
    """`counts_ref[0]@d1`, or `counts_ref[0]@d1 block (2,)` for the element of a blocked
    operand while the buffer holds block (2,) (see `scalar_input`)."""
    name = f"{buffer}[{', '.join(map(str, index))}]@d{device}"
    return name if held is None else f"{name} {held}"


def _element_named(name: str, buffer: str) -> tuple[int, ...] | None:
    """The index of the element of `buffer` that an assumption's `name` starts with
    (`counts_ref[1, 2]@d0` -> (1, 2)), or None."""
    match = re.match(rf"{re.escape(buffer)}\[([^\]]*)\]", name)
    if match is None:
        return None
    try:
        return tuple(int(part) for part in match[1].split(",") if part.strip())
    except ValueError:
        return None


def values_not_used(why: str, device: int, operand: str | None = None) -> str:
    """How every lowering's message and note says that the values the capture saw of an
    operand on `device` are not used, `why` being frontends/provenance.py's reason."""
    of = f" of {operand}" if operand else ""
    return f"the values the capture saw{of} on device {device} are not used: {why}"


def withheld_note(withheld: dict[int, dict[str, str]], devices: int) -> str:
    """Which operands' script values are not used, on which devices, and why."""
    where: dict[tuple[str, str], list[int]] = {}
    for device, why in sorted(withheld.items()):
        for buffer, reason in why.items():
            where.setdefault((buffer, reason), []).append(device)
    parts = []
    for (buffer, reason), on in where.items():
        place = ("every device" if len(on) == devices and devices > 1 else
                 f"device {on[0]}" if len(on) == 1 else f"devices {', '.join(map(str, on))}")
        parts.append(f"{buffer} on {place} ({reason})")
    return ("the values the script passed are not used for " + "; ".join(parts)
            + ": such an operand holds what the kernel's own stores define, and a scalar-prefetch element "
            "it reads is an input over its type (docs/data-evaluation.md)")


COMPUTED = ("semcheck computed its outputs while capturing, with JAX's HLO interpreter of the kernel on the CPU "
            "(jax/_src/pallas/hlo_interpreter.py), having proved from its body that each grid step writes all of "
            "its output blocks, each block once, from its input blocks alone (a scalar-prefetch operand read at static "
            "indices, never stored to and read by no index map, is one of its inputs: the outputs are those of the "
            "values the program passed it, which are the script's where the operands above are), with operations "
            "exact on any IEEE backend (lower/exact_outputs.py); floats compare as on XLA's CPU, which flushes f32 subnormals to "
            "zero (JAX 0.10.2: jax.jit(lambda x: x > 0)(1e-40) is False), and min and max return NaN for a NaN "
            "operand and order -0 below +0, as Mosaic's arith.minimumf and arith.maximumf are defined; neither "
            "is observed on a chip")


def computed_note(computed: dict[str, tuple[str, ...]]) -> str:
    """The operands whose script values come from earlier kernels that the capture ran with
    JAX's HLO interpreter (frontends/capture.py, `_computed_outputs`)."""
    kernels = sorted({k for names in computed.values() for k in names})
    buffers = sorted(computed)
    names = " and ".join(buffers) if len(buffers) <= 2 else f"{', '.join(buffers[:-1])} and {buffers[-1]}"
    return (f"the values of {names} may be computed from the outputs of {' and '.join(kernels)}, which ran "
            f"before: {COMPUTED}, and the check takes them as the script's (docs/data-evaluation.md)")


def first_call_note(buffers: list[str]) -> str:
    """The operands checked with the values of the kernel's first call, which later calls do
    not receive (frontends/provenance.py, `earlier_calls`)."""
    names = " and ".join(buffers) if len(buffers) <= 2 else f"{', '.join(buffers[:-1])} and {buffers[-1]}"
    return (f"the values the script passed of {names} are checked as the kernel's first call on each device "
            "received them, which no call of the kernel can have fed (every device calls it first at the same "
            "point of the program); later calls may receive values computed from its own earlier output, "
            "carried round the loop around it, which semcheck's capture replaces with zeros: the check covers "
            "the first call (docs/data-evaluation.md)")


def _element_input_note(buffer: str, index: tuple[int, ...], unseen: str | None, blocked: bool) -> str:
    element = f"{buffer}[{', '.join(map(str, index))}]"
    if unseen is not None:
        return (
            f"{element} is a scalar-prefetch operand whose script value is not known ({unseen}): one input per "
            f"device ({element}@d0, ...), every value of its type checked unless bounded with "
            f"semcheck.assume({element!r}, lo, hi)"
        )
    if not blocked:
        return (
            f"{element} is named by semcheck.assume or --assume: its initial value is one input per device "
            f"({element}@d0, ...), checked over the assumed range instead of the script's data"
        )
    return (
        f"{element} is named by semcheck.assume or --assume, and {buffer} is a blocked operand (at each grid "
        f"step it holds the block of the array that its index map gives, so {element} is a different array "
        f"element in each block): its initial value is one input per device and block ({element}@d<device> "
        "block <block index>, or step <grid point> where semcheck does not know the block index), each "
        "checked over the assumed range instead of the script's data"
    )


def _is_numpy(dtype) -> bool:
    try:
        np.dtype(dtype)
        return True
    except TypeError:
        return False


class ThreadLowering:
    """Lowers the kernel body for one (device, core)."""

    def __init__(self, kernel: KernelContext, device: int, core: int):
        self.kernel = kernel
        self.device, self.core = device, core
        self.coords = kernel.mesh.coords(device)
        self.emitter = Emitter()
        self.program_ids: tuple[int, ...] = ()
        self.memory = ThreadMemory(dict(kernel.initial_data.get(device, {})), volatile=kernel.volatile,
                                   read_buffers=kernel.read_buffers, shared_written=kernel.shared_written,
                                   unfollowed={**kernel.unfollowed_data.get(device, {}), **{
                                       buffer: values_not_used(why, device, buffer)
                                       for buffer, why in kernel.withheld_data.get(device, {}).items()},
                                       **kernel.fed_data.get(device, {})},
                                   assumed=_ThreadsAssumedElements(self))
        self._reads = 0
        if not kernel.data_seen:
            self.memory.undefined = (
                "which this thread has not stored, and the capture saw no operand values (the "
                "kernel was traced but not run: check the script that runs it)"
            )
        self._next_reg = 0
        # The location of the innermost enclosing eqn that has one (see source.Locator).
        self.context_loc: ir.Loc = kernel.kernel_loc

    def loc(self, eqn) -> ir.Loc:
        return self.kernel.locate(eqn) or self.context_loc

    def fresh_reg(self, hint: str = "r") -> str:
        self._next_reg += 1
        return f"{hint}{self._next_reg}"

    def block_held(self, buffer: str) -> str | None:
        """Which block of its operand `buffer` holds at the grid step being lowered, when it
        holds different blocks at different steps (pipeline.PipelinedBlock.held_at)."""
        pipeline = self.kernel.pipeline
        return None if pipeline is None else pipeline.held_at(self.device, buffer, self.program_ids)

    def axis_value(self, name, eqn) -> int:
        """`lax.axis_index(name)` on this thread: a mesh coordinate, the core id, or a
        named grid axis."""
        if name in self.coords:
            return self.coords[name]
        if self.kernel.core_axis is not None and name == self.kernel.core_axis:
            return self.core
        if name in self.kernel.grid_names:
            return self.program_ids[self.kernel.grid_names.index(name)]
        raise LoadError(
            f"axis_index: axis {name!r} is neither a mesh axis of the enclosing shard_map "
            f"({', '.join(map(repr, self.coords)) or 'none'}) nor a core or grid axis of the kernel",
            self.loc(eqn),
            hint="call the kernel inside jax.shard_map over a mesh that has this axis",
        )

    def axis_size(self, name) -> int:
        if name in self.coords:
            return self.kernel.mesh.axis_sizes[self.kernel.mesh.axis_names.index(name)]
        if self.kernel.core_axis is not None and name == self.kernel.core_axis:
            return self.kernel.cores
        raise KeyError(name)

    def filled(self, start: ir.DmaStart, value) -> ir.DmaStart:
        """`start` with the fill its source `value` makes (`values.fill_of`), moved under its
        data tables' keys (`read_points`, `payloads` know an instruction by its identity):
        a copy's source is read at its read point, after the instruction is made."""
        fill = fill_of(value)
        if fill is None:
            return start
        filled = replace(start, fill=fill)
        kernel = self.kernel
        if id(start) in kernel.read_points:
            kernel.read_points[id(filled)] = kernel.read_points.pop(id(start))
        if id(start) in kernel.payloads:
            kernel.payloads[id(filled)] = kernel.payloads.pop(id(start))
        return filled

    def read_point(self, instr: ir.Instr) -> None:
        """`instr` reads data: first, the remote copies the canonical run landed on this
        thread since its previous read point arrive (schedule.py)."""
        from semcheck.lower.data import receive

        point = ((self.device, self.core), self._reads)
        self._reads += 1
        self.kernel.read_points[id(instr)] = point
        for payload in self.kernel.arrivals.get(point, ()):
            receive(self.memory, payload)

    def used(self, eqn, value, what: str) -> None:
        """Record that `value`, which decides `what`, was computed from buffer contents."""
        if not isinstance(value, Known) or not value.sources:
            return
        self.kernel.data_uses.append(
            ir.DataUse(
                what,
                self.loc(eqn),
                self.device,
                self.core,
                int(value.value.reshape(())),
                tuple(sorted({s.buffer for s in value.sources if s.from_script})),
                tuple(sorted({s.buffer for s in value.sources})),
            )
        )

    def error(self, eqn, message: str, hint: str | None = None) -> LoadError:
        return LoadError(f"{eqn.primitive.name}: {message}", self.loc(eqn), hint)


class _ThreadsAssumedElements(AssumedElements):
    """The elements whose initial value is a protocol input on one thread's device: those
    semcheck.assume names, and those of a scalar-prefetch operand whose script values the
    capture did not see. One input per device, and per block of a blocked operand."""

    def __init__(self, t: ThreadLowering):
        self.t = t

    def mask(self, buffer: str, shape: tuple[int, ...]) -> np.ndarray | None:
        t = self.t
        start = t.kernel.initial_data.get(t.device, {}).get(buffer)
        if isinstance(start, KnownElements) and buffer in t.kernel.scalar_operands:
            # What the earlier kernel's lowering does not know (lower/produced.py) is an input.
            assumed = t.kernel.assumed_elements(buffer, shape, t.device) if t.kernel.assumed else None
            return ~start.known if assumed is None else ~start.known | assumed
        if t.kernel.prefetch_unseen(buffer, t.device) is not None:
            return np.ones(shape, bool)
        return t.kernel.assumed_elements(buffer, shape, t.device, t.block_held(buffer)) if t.kernel.assumed else None

    def input(self, buffer: str, index: tuple[int, ...], dtype) -> Sym:
        t = self.t
        # Made where it is first read: the eqn being lowered is at t.context_loc.
        name = t.kernel.scalar_input(buffer, index, t.device, dtype, t.context_loc, t.block_held(buffer))
        return Sym(ir.Reg(name), np.dtype(dtype))
