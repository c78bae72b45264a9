"""The Protocol IR: what a kernel or a model *does* to semaphores, DMAs and buffers.

One thread per (device, core[, sub-thread]). A thread is a small program over integer
registers; most values are folded to constants by whoever builds the IR, so most threads
are straight-line. Every instruction carries the source location that produced it, so
every message can point at the user's own line.

This module has no behaviour: `semantics/` is the one definition of what each
instruction does. Nothing here imports JAX.
"""

from __future__ import annotations

import enum
import os
from dataclasses import field
from typing import Callable, Union

from semcheck.kinds import Kind
from semcheck.records import record


@record(frozen=True, slots=True)
class Frame:
    """One call on the way from the kernel body to a source line: `line` of `file`, in the
    function `function`."""

    file: str
    line: int
    function: str = ""


@record(frozen=True, slots=True)
class Loc:
    """A source location in the user's file (a kernel or a model). `chain`: when the line
    lies in a helper the kernel body calls (a wrapper around a copy, in the user's own
    files), the calls that led there, the helper's caller first and the kernel body's line
    last; empty for a line of the kernel body itself. Two calls of one helper from
    different lines are different locations."""

    file: str
    line: int
    chain: tuple[Frame, ...] = ()

    def __str__(self) -> str:
        where = f"{display_path(self.file)}:{self.line}"
        return f"{where} ({self.chain_text()})" if self.chain else where

    def chain_text(self) -> str:
        """"called from line 40 in kernel, ..." (a frame in another file names the file)."""
        calls = []
        for frame in self.chain:
            at = self.call_site(frame)
            calls.append(f"{at} in {frame.function}" if frame.function else at)
        return "called from " + ", from ".join(calls)

    def call_site(self, frame: Frame) -> str:
        """"line 40" for a call in this location's file, else "path:40"."""
        if os.path.abspath(frame.file) == os.path.abspath(self.file):
            return f"line {frame.line}"
        return f"{display_path(frame.file)}:{frame.line}"

    def line_text(self) -> str:
        """"line 27", or for a line in a helper "line 27 (called from line 42)", with the
        kernel body's call: two calls of one helper are told apart by it."""
        if not self.chain:
            return f"line {self.line}"
        return f"line {self.line} (called from {self.call_site(self.chain[-1])})"

    def said_in(self, kernel_file: str) -> str:
        """"line 27" in the kernel's own file (with "from 42", the kernel body's call, for a
        line of a helper there), else the whole location."""
        if kernel_file and os.path.abspath(self.file) == os.path.abspath(kernel_file):
            outer = self.chain[-1] if self.chain else None
            return f"line {self.line}" + (f" from {outer.line}" if outer is not None and outer.file == self.file else "")
        return str(self)

    def bare(self) -> "Loc":
        """The line alone, without the calls that led to it."""
        return Loc(self.file, self.line) if self.chain else self


def display_path(path: str) -> str:
    """A path as a person (and SARIF) wants it: relative to the working directory when the
    file lies under it, else absolute."""
    if not path or path.startswith("<"):
        return path
    absolute = os.path.abspath(path)
    cwd = os.getcwd()
    if absolute.startswith(cwd + os.sep):
        return os.path.relpath(absolute, cwd)
    return absolute


UNKNOWN_LOC = Loc("<unknown>", 0)


# --- operands -------------------------------------------------------------------------------
# An operand is an int constant, a register, or a small expression over registers. Registers
# hold what cannot be known at trace time (a semaphore_read, an input value).


@record(frozen=True, slots=True)
class Reg:
    """A per-thread register, or (when it names a declared `Input`) a protocol input."""

    name: str

    def __str__(self) -> str:
        return self.name


@record(frozen=True, slots=True)
class BinOp:
    """`a <op> b` with C-like integer semantics for comparisons (1 or 0).

    `op` is one of: add sub mul floordiv mod min max eq ne lt le gt ge and or.
    """

    op: str
    a: "Operand"
    b: "Operand"

    def __str__(self) -> str:
        return f"({self.a} {self.op} {self.b})"


Operand = Union[int, Reg, BinOp]

# The operators a BinOp may name, and what each computes: the one table that the semantics,
# the lowering's constant folding and the z3 encoding all use. Division and modulo by zero give
# 0 so that every operator is total (a guarded division never reaches it in a real schedule).
OPERATORS: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b if b else 0,
    "mod": lambda a, b: a % b if b else 0,
    "min": min,
    "max": max,
    "eq": lambda a, b: int(a == b),
    "ne": lambda a, b: int(a != b),
    "lt": lambda a, b: int(a < b),
    "le": lambda a, b: int(a <= b),
    "gt": lambda a, b: int(a > b),
    "ge": lambda a, b: int(a >= b),
    "and": lambda a, b: int(bool(a) and bool(b)),
    "or": lambda a, b: int(bool(a) or bool(b)),
}


def apply_op(op: str, a: int, b: int) -> int:
    return OPERATORS[op](a, b)


def registers_of(op: Operand | None) -> frozenset[str]:
    """Names of the registers an operand reads."""
    if op is None or isinstance(op, int):
        return frozenset()
    if isinstance(op, Reg):
        return frozenset((op.name,))
    return registers_of(op.a) | registers_of(op.b)


def is_constant(op: Operand | None) -> bool:
    return op is None or isinstance(op, int)


# --- declarations ----------------------------------------------------------------------------


class Backend(str, enum.Enum):
    """Whose rules apply: they differ on non-decrementing waits and zero-at-exit."""

    TPU = "tpu"
    GPU = "gpu"


class SemKind(str, enum.Enum):
    REGULAR = "regular"
    DMA = "dma"
    BARRIER = "barrier"
    GPU_GLOBAL = "gpu_global"
    MBARRIER = "mbarrier"  # Mosaic GPU plgpu.Barrier: arrivals counted for good, waits take none


class SemOrigin(str, enum.Enum):
    """Where a semaphore was allocated; the backend's exit and re-entry rules depend on it."""

    SCRATCH = "scratch"  # scratch_shapes / scratch_types: per kernel and per core
    SCOPED = "scoped"  # pl.run_scoped allocation
    BARRIER = "barrier"  # get_barrier_semaphore: global, persistent, keyed by collective_id
    GLOBAL = "global"  # pl.get_global (GPU): one per launch, shared by every block
    ARGUMENT = "argument"  # passed into or out of the kernel: outlives it
    # An output of one kernel of a program that a later kernel of it takes (semcheck/passes/programs.py):
    # outlives each kernel, and must be back to 0, with no copy still landing, when the program ends.
    HANDED_ON = "handed_on"


# The semaphores of the barrier XLA runs before a TPU kernel's body when the kernel sets no
# collective_id (lower/tpu_kernel.py emits it); the core-entry pass and the parametric
# template recognise that barrier by these names.
DEVICE_BARRIER_ARRIVE, DEVICE_BARRIER_RELEASE = "device_barrier.arrive", "device_barrier.release"


# Allocations that outlive one kernel invocation: no entry resets them, and a signal or copy
# reaching them from another invocation is no early arrival.
OUTLIVES_KERNEL = (SemOrigin.BARRIER, SemOrigin.ARGUMENT, SemOrigin.HANDED_ON)


class DmaSide(enum.IntEnum):
    """One of a copy's two completions: SEND (its source has been read; it adds to the
    issuer's send semaphore) or RECV (its destination is written; it adds to the receiving
    semaphore). A `dma_wait` names the side it waits for. An int, so that the semantics'
    pending completions sort and pack by it (SEND first); its text ("send", "recv") is
    what builders take and messages print."""

    SEND = 0
    RECV = 1

    def __str__(self) -> str:
        return self.name.lower()

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    @classmethod
    def named(cls, text: "str | DmaSide") -> "DmaSide":
        """The side a builder names ("send" or "recv"); ValueError for anything else."""
        if isinstance(text, cls):
            return text
        if text not in ("send", "recv"):
            raise ValueError(f"a DMA side is 'send' or 'recv', got {text!r}")
        return cls[text.upper()]


class Scope(str, enum.Enum):
    """Which threads share one instance of an allocation."""

    CORE = "core"  # one instance per (device, core); sub-threads of a core share it
    DEVICE = "device"  # one instance per device, shared by all its cores/blocks


@record(frozen=True, slots=True)
class SemDecl:
    """A semaphore allocation (possibly an array) that exists once per scope instance."""

    name: str
    kind: SemKind = SemKind.REGULAR
    size: int = 1
    origin: SemOrigin = SemOrigin.SCRATCH
    scope: Scope = Scope.CORE
    collective_id: int | None = None
    loc: Loc = UNKNOWN_LOC
    # MBARRIER: the arrivals that complete one phase. A non-decrementing wait on it is a
    # wait for the phase that ends at `value` arrivals.
    arrivals_per_phase: int = 0
    # TPU: whether the chip checks at kernel exit that a scratch or scoped semaphore is 0 (and
    # halts the core otherwise). False for a kernel compiled with disable_semaphore_checks=True:
    # then nothing stops, and entering the next kernel does not zero it, so a leftover carries
    # (semcheck/tpu_facts.py, `leftover_carries_without_checks`).
    checked_at_exit: bool = True
    # In a program of several kernels (semcheck/passes/programs.py): the kernel that declares
    # it, by its label there; None in one kernel's protocol, and for a barrier semaphore every
    # kernel of the program shares (one per collective id).
    kernel: str | None = None
    # What a report calls it where its name is not one the kernel's author wrote (a counter
    # the lowering adds, as for a thread's TMA stores; a `pl.get_global` whose line binds it
    # to no name): a phrase saying what it stands for ("the reads of the thread's TMA stores").
    # Empty where the name is the author's, shown as written.
    shown_as: str = ""
    # Where it has several and `shown_as` names it: what one index of it stands for ("warp"),
    # so that a trace step says "(warp 1)"; empty: "(index 1)".
    index_shown_as: str = ""


@record(frozen=True, slots=True)
class BufferDecl:
    """A buffer (HBM/VMEM/SMEM/GMEM ref) that loads, stores and DMAs touch."""

    name: str
    shape: tuple[int, ...] = ()
    itemsize: int = 4
    space: str = "any"
    scope: Scope = Scope.CORE
    loc: Loc = UNKNOWN_LOC
    # An output of one kernel of a program that a later kernel takes (semcheck/passes/programs.py):
    # a copy into it may land after the kernel that started the copy ended on the target.
    handed_on: bool = False
    # The HBM array the Pallas pipeline writes a pipelined output's blocks back to (a chip's
    # cores share it): a race on it is two cores writing back one block.
    written_back: bool = False


@record(frozen=True, slots=True)
class Input:
    """A value unknown at trace time (scalar prefetch, data-dependent size): every value in
    `lo..hi` (inclusive) is checked."""

    name: str
    lo: int
    hi: int
    loc: Loc = UNKNOWN_LOC
    # The range is one semcheck.assume or --assume gave (assumptions.apply), not the
    # producer's own (often no more than "an int32").
    assumed: bool = False

    def __post_init__(self):
        # An empty range has no value to check: every engine would say "safe" after 0 states.
        if self.lo > self.hi:
            raise ValueError(f"input {self.name}: the range {self.lo}..{self.hi} is empty (lo > hi)")


# --- references ---------------------------------------------------------------------------------


@record(frozen=True, slots=True)
class SemRef:
    """One semaphore of an allocation, possibly on another device or core.

    `device`/`core` of None mean the issuing thread's own device/core.
    """

    alloc: str
    index: Operand = 0
    device: Operand | None = None
    core: Operand | None = None


@record(frozen=True, slots=True)
class Region:
    """A rectangular region of a buffer: `start[i] : start[i] + size[i]` per dim.

    Starts and sizes are operands: a size may be known only at run time (a DMA window
    sized from a scalar-prefetch element). An empty `start` means the whole buffer. `device`/`core` of None mean the accessing
    thread's own (for a DMA destination: the DMA's target).
    """

    buffer: str
    start: tuple[Operand, ...] = ()
    size: tuple[Operand, ...] = ()
    # Why the region is larger than what one run touches, when it is: the lowering could not
    # follow an index or size and kept the whole dim. A race on such a region may be one no
    # run reaches (`uncertain.py`). Not part of the region's identity.
    widened: str | None = field(default=None, compare=False)


@record(frozen=True, slots=True)
class Fill:
    """What a store or a copy writes when it is one value in every element, the same whatever
    the kernel's inputs (a zero fill): two writes of equal fills leave the same bytes in
    whatever order they land. `dtype` and `bits` (numpy's dtype string and the element's
    bytes in hex) decide equality; `text` is how a report shows the value."""

    dtype: str
    bits: str
    text: str = field(default="", compare=False)


# --- instructions --------------------------------------------------------------------------------


@record(frozen=True, slots=True)
class Instr:
    loc: Loc


@record(frozen=True, slots=True)
class Signal(Instr):
    """Atomically add `inc` to `sem` (local or remote); never blocks."""

    sem: SemRef
    inc: Operand = 1


@record(frozen=True, slots=True)
class Wait(Instr):
    """Block until `sem >= value`; then subtract `value` if `decrement`."""

    sem: SemRef
    value: Operand = 1
    decrement: bool = True


@record(frozen=True, slots=True)
class Read(Instr):
    """`dst := sem` (semaphore_read)."""

    sem: SemRef
    dst: str


@record(frozen=True, slots=True)
class Assign(Instr):
    """`dst := value` (register arithmetic that could not be folded)."""

    dst: str
    value: Operand


@record(frozen=True, slots=True)
class DmaStart(Instr):
    """Start a copy `src` (local, unless `src_device`) -> `dst` on (`device`, `core`).

    Completion is not an instruction: the semantics schedules a send-side event (adds to
    `send_sem` on the issuer, when there is one: a remote copy, or a GPU TMA store whose
    source read completes apart from its write) and a receive-side event (adds to
    `recv_sem` on the target) in any order, at any later point.
    """

    src: Region
    dst: Region
    recv_sem: SemRef
    send_sem: SemRef | None = None
    nbytes: Operand = 0  # what it adds to a DMA semaphore, in the protocol's `dma_unit`
    device: Operand | None = None
    core: Operand | None = None
    # The device whose memory `dst` is, when not the one whose semaphore counts the landing:
    # a Mosaic GPU TMA store into a peer's GMEM (plgpu.remote_ref) is awaited by the
    # issuer's bulk group. None: `dst` is on the copy's target (`device`, `core`).
    dst_device: Operand | None = None
    # The device whose memory `src` is, when not the issuer's: a Mosaic GPU TMA load from a
    # peer's GMEM (plgpu.remote_ref), read until the copy lands. None: the issuer's own.
    src_device: Operand | None = None
    # False for a TPU kernel compiled with disable_bounds_checks=True: nothing checks the
    # windows, so an empty one (a 0 in its sizes) moves nothing wherever it starts; a
    # non-empty window outside its buffer still touches memory that is not the buffer.
    bounds_checked: bool = True
    # What it writes, where the lowering knows its source holds one value throughout, the same
    # for every input (a zero fill); not part of the copy's identity.
    fill: Fill | None = field(default=None, compare=False)

    def dst_place(self) -> tuple[Operand | None, Operand | None]:
        """(device, core) whose memory `dst` is (None: the issuing thread's own)."""
        return (self.dst_device, None) if self.dst_device is not None else (self.device, self.core)

    def src_place(self) -> tuple[Operand | None, Operand | None]:
        """(device, core) whose memory `src` is (None: the issuing thread's own)."""
        return self.src_device, None


@record(frozen=True, slots=True)
class DmaWait(Instr):
    """Wait for `nbytes` (in the protocol's `dma_unit`) on a local DMA semaphore, for the
    completions of one `side` of the copies that add to it."""

    sem: SemRef
    nbytes: Operand
    side: DmaSide = DmaSide.RECV


class PipelineCopy(str, enum.Enum):
    """A plain access that is the Pallas TPU pipeline's own copy of a BlockSpec'd block at a
    grid-step boundary (lower/pipeline.py), not a line of the kernel: reports say what it is,
    as its location is only the pallas_call's."""

    COPY_IN = "copy_in"  # before a step: the input block filled from its HBM array
    COPY_OUT = "copy_out"  # after a step: the output block read to be written back
    WRITE_BACK = "write_back"  # after a step: that block written into the output's HBM array


@record(frozen=True, slots=True)
class Load(Instr):
    """A plain read of `region` on `device` (None: the thread's own; a device id reaches the
    same block of a peer, as a Mosaic GPU `plgpu.remote_ref` access does).

    `checked`: the region must lie inside its buffer, or the access faults with
    invalid_region (a TPU vector load: JAX's TPU interpreter raises on an out-of-bounds
    read, and Mosaic passes the index through to `vector.load`, so a chip reads whatever
    lies there). False where nothing says what an access outside does (a GPU access, a
    masked load, a pipeline's block access): its region is taken as given.

    `view`: for a checked access through `.at[...]` views (`ref.at[rows][k]`), the box of
    the buffer those views cover (where there are several, the part all of them cover);
    the window must lie inside it too, or the access faults with invalid_region though it
    stays inside the buffer (Mosaic indexes the view's memref, and its bounds checks assert
    against it; docs/kinds/invalid_region.md). None: no view, or none the window can leave."""

    region: Region
    device: Operand | None = None
    checked: bool = False
    view: Region | None = None
    pipeline: PipelineCopy | None = None  # the pipeline's copy of a block it is, if one


@record(frozen=True, slots=True)
class Store(Instr):
    """A plain write of `region` on `device` (as for `Load`). `atomic`: an atomic
    read-modify-write of each element (a Mosaic GPU `plgpu.atomic_add`), which never races
    with another atomic one and races with plain reads and writes like any write.
    `checked`, `view`: as for `Load` (a TPU vector store outside its ref, or outside the
    `.at[...]` view it indexes, faults with invalid_region)."""

    region: Region
    device: Operand | None = None
    atomic: bool = False
    checked: bool = False
    view: Region | None = None
    pipeline: PipelineCopy | None = None  # as for `Load`
    fill: Fill | None = field(default=None, compare=False)  # as for `DmaStart`


def window_checked(instr: Load | Store) -> bool:
    """Whether a plain access's window is checked against its buffer (`Load.checked`), and
    against its view where it has one (`Load.view`): not
    where its region is widened (`Region.widened`), which is larger than what one run
    touches, or taken from a branch a run may not take, so its being outside proves nothing.
    The lowering says so in a note where it widens a checked access."""
    return instr.checked and instr.region.widened is None


@record(frozen=True, slots=True)
class Branch(Instr):
    """Jump to instruction index `target` when `cond` is non-zero."""

    cond: Operand
    target: int


@record(frozen=True, slots=True)
class Jump(Instr):
    target: int


@record(frozen=True, slots=True)
class KernelEntry(Instr):
    """The thread enters the kernel (scratch semaphores exist from here)."""

    kernel: str = ""


@record(frozen=True, slots=True)
class KernelExit(Instr):
    """The thread leaves the kernel."""

    kernel: str = ""


@record(frozen=True, slots=True)
class Cut(Instr):
    """Where lowering stopped: the frontend could not follow the kernel past this point
    (`message`, `hint`: the error it raised). The thread never moves past it, and what it
    would have done afterwards is unknown, so only what the prefix before it decides is
    judged (races, faults, early arrivals), never a hang or a leftover at the end."""

    message: str = ""
    hint: str | None = None


def cuts(protocol: "Protocol") -> list[tuple["Thread", Cut]]:
    """Every thread's cut, if it has one."""
    return [(t, i) for t in protocol.threads for i in t.body if isinstance(i, Cut)]


def thread_name(device: int, core: int | None, sub: int = 0, cores: int = 2, unit: str = "core") -> str:
    """How reports name a thread; the core (`unit`: a TPU core, a GPU block) is left out
    where every device has one."""
    base = f"device {device}" + (f" {unit} {core}" if cores > 1 and core is not None else "")
    return f"{base} thread {sub}" if sub else base


def core_unit(semantics: str) -> str:
    """What a thread's `core` index counts under a backend's rules ("tpu" or "gpu"): a
    TensorCore, or a block of the launch."""
    return "block" if semantics == "gpu" else "core"


# --- the protocol ----------------------------------------------------------------------------------


@record(frozen=True, slots=True)
class Thread:
    device: int
    core: int
    body: tuple[Instr, ...]
    sub: int = 0

    @property
    def name(self) -> str:
        return thread_name(self.device, self.core, self.sub)


@record(frozen=True, slots=True)
class ComputedBy:
    """One op of the script's program between an earlier kernel's output and a kernel's
    operand (frontends/placing.py): its StableHLO name (`stablehlo.reduce_window in @cumsum`
    inside a function JAX calls) and the user's line that made it."""

    op: str
    loc: Loc | None

    def __str__(self) -> str:
        return f"{self.op} at {self.loc}" if self.loc is not None else self.op


@record(frozen=True, slots=True)
class FedOperand:
    """An operand that starts with an earlier kernel's output as semcheck's lowering of that
    kernel computed it (lower/produced.py): the elements it stored with values the lowering
    knows, the rest unknown."""

    buffer: str
    producer: str  # the earlier kernel, as the notes name it
    # that kernel's call, as its place in the load's capture order (`Protocol.calls`): the
    # consumer's verdict rests on the check of the protocol holding it finding no data race
    # (run/checks.py)
    producer_call: int | None = None
    # the ops between that output and this operand, the output's side first; none: the
    # operand is the output itself
    through: tuple[ComputedBy, ...] = ()


@record(frozen=True, slots=True)
class DataUse:
    """A value that decides the protocol (a device id, a semaphore index, an amount, a
    branch) and was computed from buffer contents while the kernel was lowered.

    `script_inputs` are the operands whose values, as the script passed them, it depends
    on (empty: only on what the kernel itself stored, which is the same for every input);
    `buffers` every buffer it was read back from.
    """

    what: str
    loc: Loc
    device: int
    core: int
    value: int
    script_inputs: tuple[str, ...]
    buffers: tuple[str, ...]


@record(frozen=True, slots=True)
class Ports:
    """How a kernel meets the kernels around it, for linking kernels into a program: the
    declaration (semaphore or buffer) behind each operand of the call and each result, in
    call order ("" for an operand that is no ref of the kernel, such as a dynamic grid bound)."""

    operands: tuple[str, ...] = ()
    results: tuple[str, ...] = ()


@record(frozen=True, slots=True)
class SemAlias:
    """In a program of several kernels, kernel `kernel` calls the program's semaphore `decl`
    `name`: a scratch semaphore whose count it takes over from the kernel before it (run with
    disable_semaphore_checks=True), one semaphore on the chip under each kernel's own name.
    Only what a trace step says uses it; the model has the one declaration."""

    kernel: str
    decl: str
    name: str
    loc: Loc | None = None  # where kernel `kernel` declares it
    checked_at_exit: bool = True  # whether kernel `kernel` runs with semaphore checks at exit


@record(frozen=True, slots=True)
class LoweringFinding:
    """A finding the frontend makes while lowering, with no exploration: the backend's own
    lowering rejects the kernel (`Kind.NOT_LOWERABLE`), or lowers a construct otherwise than
    it reads (`Kind.LOWERED_AS_DECREMENTING`)."""

    kind: Kind
    loc: Loc
    message: str
    hint: str | None = None  # a fix more specific than the kind's


@record(frozen=True)
class Protocol:
    """A closed system of threads, semaphores and buffers, ready to be checked."""

    name: str
    backend: Backend
    devices: int
    cores: int
    threads: tuple[Thread, ...]
    semaphores: tuple[SemDecl, ...] = ()
    buffers: tuple[BufferDecl, ...] = ()
    inputs: tuple[Input, ...] = ()
    loc: Loc = UNKNOWN_LOC
    frontend: str = "model"  # "model", "tpu" or "gpu": who produced it
    notes: tuple[str, ...] = field(default=())
    data_uses: tuple[DataUse, ...] = field(default=())  # values taken from data (lower/data.py)
    # Operands whose script values were not used because an earlier kernel's output (zeros in
    # the capture) may reach them (frontends/provenance.py); the notes say where and why.
    withheld: tuple[str, ...] = field(default=())
    # Operands that start with an earlier kernel's output as semcheck's lowering of it
    # computed it (lower/produced.py), in part; the notes say what that rests on.
    fed: tuple[FedOperand, ...] = field(default=())
    # Whether the cores of one chip enter (and leave) each invocation of the kernel together,
    # so that a signal or copy between two cores of one device never meets a core outside
    # the sender's invocation (docs/semantics.md, "How the cores of a chip enter a kernel";
    # --no-assume-cores-enter-together takes the other reading).
    cores_enter_together: bool = True
    ports: Ports = field(default=Ports())
    # A program of several kernels (semcheck/passes/programs.py): the kernel each thread's n-th
    # KernelEntry enters, in program order. Empty for one kernel.
    kernels: tuple[str, ...] = field(default=())
    aliases: tuple[SemAlias, ...] = field(default=())  # a program's semaphores as a later kernel calls them
    findings: tuple[LoweringFinding, ...] = field(default=())  # reported as they are, at their line
    # The bytes one count of a DMA semaphore stands for: what a copy of N bytes adds is
    # N / dma_unit, and `DmaStart.nbytes` / `DmaWait.nbytes` are already in those units (the
    # TPU frontend: 32 when every size is whole units, else 1, lower/tpu_hardware.py; a
    # model and the GPU: 1, bytes).
    dma_unit: int = 1
    # The kernel calls it checks, as places in the capture order of the load that gave it
    # (frontends/capture.py, `lower_captures`; a program: each of its kernels'). What links a
    # kernel fed another's outputs to that kernel's check (`FedOperand.producer_call`). Not
    # compared: the same kernel captured twice is one protocol, checked once.
    calls: tuple[int, ...] = field(default=(), compare=False)

    def semaphore(self, name: str) -> SemDecl:
        for decl in self.semaphores:
            if decl.name == name:
                return decl
        raise KeyError(name)
