"""The builder API: describe a semaphore protocol in plain Python, no JAX needed.

    from semcheck.model import ProtocolBuilder, DMA

    def model(devices: int):
        p = ProtocolBuilder("ring", devices=devices)
        barrier = p.barrier_semaphore()
        for d in range(devices):
            t = p.thread(d)
            t.signal(barrier, device=(d + 1) % devices)
            t.wait(barrier)
        return p.build()

Every instruction records the file and line of the call that created it, so reports point
at the model's own source.
"""

from __future__ import annotations

import contextlib
import numbers
import os
import sys
import types
from functools import lru_cache

from semcheck import ir
from semcheck.ir import Backend, BinOp, Loc, Reg, Scope, SemKind, SemOrigin
from semcheck.records import record

REGULAR, DMA, BARRIER, GPU_GLOBAL = SemKind.REGULAR, SemKind.DMA, SemKind.BARRIER, SemKind.GPU_GLOBAL

_THIS_FILE = os.path.normcase(os.path.abspath(__file__))
# `with t.when(...)` enters through contextlib: its frames are not the model's line either.
_SKIPPED = {_THIS_FILE, os.path.normcase(os.path.abspath(contextlib.__file__))}
# code filename -> whether its frames are skipped: resolving a path costs more than the rest
# of recording an instruction, and a model of 256 devices records about 200k of them
_skipped_file: dict[str, bool] = {}
# one Loc per model line, shared by the instructions it records (a loop over devices records
# the same few lines again and again): less memory, and pickled once
_locs: dict[tuple[str, int], Loc] = {}


class ModelError(ValueError):
    """A builder call with a value the protocol cannot hold (a float amount, a negative
    shape, a device named by a string, an id outside the protocol): the model file's line
    that made it is reported (frontends/model_file.py), before any engine sees the model."""


def _operand(value, what: str):
    """`value` as an operand: an int, a register, or an ir.BinOp of them."""
    if isinstance(value, (Reg, BinOp)):
        if isinstance(value, BinOp):
            if value.op not in ir.OPERATORS:
                raise ModelError(f"{what}: unknown operator {value.op!r} (one of {', '.join(ir.OPERATORS)})")
            _operand(value.a, what)
            _operand(value.b, what)
        elif not isinstance(value.name, str) or not value.name:
            raise ModelError(f"{what}: a register is named by a non-empty string, got {value.name!r}")
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    raise ModelError(f"{what} must be an int, a register or an expression of them (ir.BinOp), "
                     f"got {value!r} ({type(value).__name__})")


def _optional_operand(value, what: str):
    return None if value is None else _operand(value, what)


def _whole(value, what: str, least: int | None = None) -> int:
    """A literal whole number, >= `least` if given (a count, a size, a shape's extent)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ModelError(f"{what} must be a whole number, got {value!r} ({type(value).__name__})")
    if least is not None and value < least:
        raise ModelError(f"{what} must be at least {least}, got {value}")
    return int(value)


def _name(value, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ModelError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _instance(value, kind, what: str):
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ModelError(f"{what} must be a {names}, got {value!r} ({type(value).__name__})")
    return value


def _view(region: ir.Region, view, checked: bool, what: str) -> ir.Region | None:
    """The `.at[...]` view a checked access indexes: a region of the access's buffer, or None."""
    if view is None:
        return None
    _instance(view, ir.Region, f"{what}: the view")
    if view.buffer != region.buffer:
        raise ModelError(f"{what}: the view is of {view.buffer!r}, the region of {region.buffer!r}")
    if not checked:
        raise ModelError(f"{what}: a view bounds only a checked access (checked=True)")
    return view


def _member(value, enum_type, what: str):
    try:
        return enum_type(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in enum_type)
        raise ModelError(f"{what} must be one of {choices}, got {value!r}") from None


@lru_cache(maxsize=1 << 16)
def _one_of(value):
    return value


def _shared(value):
    """The first equal SemRef or Region built (of the last 65,536 distinct ones): a model
    crosses from its load's child pickled, and pickle writes an object it has seen once as
    a reference, so a ring of 256 devices pickles in 5 MB instead of 11 and in a fifth
    of the time."""
    try:
        return _one_of(value)
    except TypeError:  # an operand that cannot be hashed: keep the object
        return value


def caller_loc() -> Loc:
    """The first frame outside this module (and contextlib): the model's own line."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        skipped = _skipped_file.get(filename)
        if skipped is None:
            skipped = _skipped_file[filename] = os.path.normcase(os.path.abspath(filename)) in _SKIPPED
        if not skipped:
            key = (filename, frame.f_lineno)
            loc = _locs.get(key)
            if loc is None:
                loc = _locs[key] = Loc(filename, frame.f_lineno)
            return loc
        frame = frame.f_back
    return ir.UNKNOWN_LOC


@record(frozen=True)
class Sem:
    """A handle on a semaphore allocation; `sem[i]` picks one element of an array."""

    name: str
    size: int = 1
    index: ir.Operand = 0

    def __getitem__(self, index: ir.Operand) -> "Sem":
        return Sem(self.name, self.size, _operand(index, f"the index of semaphore {self.name!r}"))

    def ref(self, device=None, core=None) -> ir.SemRef:
        device = _optional_operand(device, f"the device of semaphore {self.name!r}")
        core = _optional_operand(core, f"the core of semaphore {self.name!r}")
        return _shared(ir.SemRef(self.name, self.index, device, core))


@record(frozen=True)
class Buffer:
    name: str
    shape: tuple[int, ...]
    itemsize: int

    def region(self, *start: ir.Operand, size: tuple[int, ...] | None = None) -> ir.Region:
        """The block at `start` (leading dims); `size` defaults to one element per given
        leading index and the whole extent of the rest."""
        start = tuple(_operand(i, f"a start index of buffer {self.name!r}") for i in start)
        if size is None:
            size = (1,) * len(start) + self.shape[len(start):]
        size = tuple(_operand(n, f"a size of a region of buffer {self.name!r}") for n in size)
        for n in size:
            if isinstance(n, int) and n < 0:
                raise ModelError(f"a size of a region of buffer {self.name!r} must be at least 0, got {n}")
        if len(start) > len(size):
            raise ModelError(f"a region of buffer {self.name!r} has {len(start)} start indices for {len(size)} dims")
        return _shared(ir.Region(self.name, tuple(start) + (0,) * (len(size) - len(start)), tuple(size)))

    @property
    def whole(self) -> ir.Region:
        return _shared(ir.Region(self.name, (0,) * len(self.shape), self.shape))

    def nbytes(self, region: ir.Region) -> int:
        n = self.itemsize
        for extent in region.size or self.shape:
            assert isinstance(extent, int), "a built model's regions have known sizes"
            n *= extent
        return n


class Label:
    def __init__(self) -> None:
        self.position: int | None = None


class Copy:
    """A started DMA, so a model can write `copy.wait_send()` / `copy.wait_recv()` like
    JAX's AsyncCopyDescriptor."""

    def __init__(self, thread: "ThreadBuilder", recv_sem: Sem, send_sem: Sem | None, nbytes):
        self._thread, self._recv, self._send, self._nbytes = thread, recv_sem, send_sem, nbytes

    def wait_send(self) -> None:
        if self._send is None:
            raise ValueError("wait_send on a local copy: it has no send semaphore")
        self._thread._emit(ir.DmaWait, sem=self._send.ref(), nbytes=self._nbytes, side=ir.DmaSide.SEND)

    def wait_recv(self) -> None:
        self._thread._emit(ir.DmaWait, sem=self._recv.ref(), nbytes=self._nbytes, side=ir.DmaSide.RECV)

    def wait(self) -> None:
        if self._send is not None:
            self.wait_send()
        self.wait_recv()


class ThreadBuilder:
    def __init__(self, builder: "ProtocolBuilder", device: int, core: int, sub: int):
        self.builder = builder
        self.device, self.core, self.sub = device, core, sub
        self.body: list = []  # instructions, or (Branch/Jump factory, Label) awaiting a position
        self._next_reg = 0

    # -- emission --

    def _emit(self, cls, **fields):
        self.body.append(cls(loc=caller_loc(), **fields))

    def signal(self, sem: Sem, inc: ir.Operand = 1, *, device=None, core=None) -> None:
        _instance(sem, Sem, "signal: the semaphore")
        device, core = _optional_operand(device, "signal: the device"), _optional_operand(core, "signal: the core")
        self._emit(ir.Signal, sem=sem.ref(device, core), inc=_operand(inc, "signal: the amount"))

    def wait(self, sem: Sem, value: ir.Operand = 1, *, decrement: bool = True) -> None:
        _instance(sem, Sem, "wait: the semaphore")
        _instance(decrement, bool, "wait: decrement")
        self._emit(ir.Wait, sem=sem.ref(), value=_operand(value, "wait: the amount"), decrement=decrement)

    def read(self, sem: Sem, into: str | None = None) -> Reg:
        _instance(sem, Sem, "read: the semaphore")
        name = self._register(into)
        self._emit(ir.Read, sem=sem.ref(), dst=name)
        return Reg(name)

    def assign(self, value: ir.Operand, into: str | None = None) -> Reg:
        value = _operand(value, "assign: the value")
        name = self._register(into)
        self._emit(ir.Assign, dst=name, value=value)
        return Reg(name)

    def _register(self, into: str | None) -> str:
        return self._fresh() if into is None else _name(into, "the register's name")

    def dma_start(
        self,
        src: ir.Region,
        dst: ir.Region,
        *,
        recv_sem: Sem,
        send_sem: Sem | None = None,
        nbytes: ir.Operand | None = None,
        device=None,
        core=None,
        dst_device=None,
        src_device=None,
    ) -> Copy:
        """With `dst_device`, `dst` is that device's buffer while both completions count on
        this thread's semaphores (a GPU TMA store into a peer's memory); with `src_device`,
        `src` is that device's buffer (a GPU TMA load from a peer's memory)."""
        _instance(src, ir.Region, "dma_start: the source")
        _instance(dst, ir.Region, "dma_start: the destination")
        _instance(recv_sem, Sem, "dma_start: the receive semaphore")
        if send_sem is not None:
            _instance(send_sem, Sem, "dma_start: the send semaphore")
        device = _optional_operand(device, "dma_start: the device")
        core = _optional_operand(core, "dma_start: the core")
        dst_device = _optional_operand(dst_device, "dma_start: the destination's device")
        src_device = _optional_operand(src_device, "dma_start: the source's device")
        nbytes = self.builder.nbytes(src) if nbytes is None else _operand(nbytes, "dma_start: the byte count")
        if (device is None) != (send_sem is None) and core is None and dst_device is None:
            raise ValueError(
                "a remote copy (device=...) needs a send semaphore and a local one has none, "
                "as in pltpu.make_async_remote_copy / make_async_copy"
            )
        self._emit(
            ir.DmaStart, src=src, dst=dst, recv_sem=recv_sem.ref(), send_sem=None if send_sem is None else send_sem.ref(),
            nbytes=nbytes, device=device, core=core, dst_device=dst_device, src_device=src_device,
        )
        return Copy(self, recv_sem, send_sem, nbytes)

    def dma_wait(self, sem: Sem, nbytes: ir.Operand, side: str | ir.DmaSide = "recv") -> None:
        _instance(sem, Sem, "dma_wait: the semaphore")
        try:
            which = ir.DmaSide.named(side)
        except ValueError:
            raise ModelError(f"dma_wait: side must be 'send' or 'recv', got {side!r}") from None
        self._emit(ir.DmaWait, sem=sem.ref(), nbytes=_operand(nbytes, "dma_wait: the byte count"), side=which)

    def load(self, region: ir.Region, device: ir.Operand | None = None, *, checked: bool = False,
             view: ir.Region | None = None) -> None:
        """A plain read; with `device`, of that device's instance of the buffer. `checked`:
        a region outside the buffer faults with invalid_region (a TPU vector load), and so
        does one outside `view` (a region of the same buffer: the `.at[...]` view it indexes)."""
        _instance(region, ir.Region, "load: the region")
        self._emit(ir.Load, region=region, device=_optional_operand(device, "load: the device"),
                   checked=_instance(checked, bool, "load: checked"), view=_view(region, view, checked, "load"))

    def store(self, region: ir.Region, device: ir.Operand | None = None, *, atomic: bool = False,
              checked: bool = False, view: ir.Region | None = None) -> None:
        """A plain write; with `device`, of that device's instance of the buffer. `atomic`:
        an atomic read-modify-write (an atomic add), which races with plain accesses only.
        `checked`, `view`: as for `load` (a TPU vector store)."""
        _instance(region, ir.Region, "store: the region")
        self._emit(ir.Store, region=region, device=_optional_operand(device, "store: the device"),
                   atomic=_instance(atomic, bool, "store: atomic"), checked=_instance(checked, bool, "store: checked"),
                   view=_view(region, view, checked, "store"))

    def entry(self, kernel: str = "") -> None:
        self._emit(ir.KernelEntry, kernel=_instance(kernel, str, "entry: the kernel's name"))

    def exit(self, kernel: str = "") -> None:
        self._emit(ir.KernelExit, kernel=_instance(kernel, str, "exit: the kernel's name"))

    # -- control flow --

    def label(self) -> Label:
        label = Label()
        label.position = len(self.body)
        return label

    def new_label(self) -> Label:
        return Label()

    def place(self, label: Label) -> None:
        label.position = len(self.body)

    def branch(self, cond: ir.Operand, label: Label) -> None:
        cond = _operand(cond, "branch: the condition")
        self.body.append((ir.Branch, caller_loc(), cond, _instance(label, Label, "branch: the target")))

    def jump(self, label: Label) -> None:
        self.body.append((ir.Jump, caller_loc(), None, _instance(label, Label, "jump: the target")))

    @contextlib.contextmanager
    def when(self, cond: ir.Operand):
        """Instructions inside run only when `cond` is non-zero (like pl.when)."""
        cond = _operand(cond, "when: the condition")
        skip = Label()
        self.body.append((ir.Branch, caller_loc(), BinOp("eq", cond, 0), skip))
        yield
        self.place(skip)

    def _fresh(self) -> str:
        self._next_reg += 1
        return f"r{self._next_reg}"

    def build(self) -> ir.Thread:
        body: list[ir.Instr] = []
        for item in self.body:
            if isinstance(item, tuple):
                cls, loc, cond, label = item
                if label.position is None:
                    raise ValueError(f"{loc}: jump to a label that was never placed")
                if cls is ir.Branch:
                    body.append(ir.Branch(loc=loc, cond=cond, target=label.position))
                else:
                    body.append(ir.Jump(loc=loc, target=label.position))
            else:
                body.append(item)
        return ir.Thread(self.device, self.core, tuple(body), self.sub)


# A model states its own semantics, so its non-decrementing waits are checked as written; a
# TPU kernel written the same way would not run that way (semcheck/tpu_facts.py).
MODEL_NONDECREMENTING_NOTE = (
    "the model's waits with decrement=False are checked as non-decrementing, as the model "
    "states; a TPU kernel written with semaphore_wait(decrement=False) decrements instead (JAX's "
    "Pallas TPU lowering emits an ordinary tpu.sem_wait for it; observed on TPU v5e, JAX 0.10.2), "
    "and semcheck checks such a kernel that way"
)


class ProtocolBuilder:
    def __init__(self, name: str, *, devices: int, cores: int = 1, backend: str | Backend = "tpu"):
        self.name = _name(name, "the protocol's name")
        self.devices = _whole(devices, "the number of devices", 1)
        self.cores = _whole(cores, "the number of cores", 1)
        self.backend = _member(backend, Backend, "the backend")
        self.loc = caller_loc()
        self._sems: list[ir.SemDecl] = []
        self._buffers: dict[str, ir.BufferDecl] = {}
        self._inputs: list[ir.Input] = []
        self._threads: dict[tuple[int, int, int], ThreadBuilder] = {}
        self._notes: list[str] = []

    def semaphore(
        self,
        name: str,
        kind: SemKind = REGULAR,
        size: int = 1,
        *,
        origin: SemOrigin = SemOrigin.SCRATCH,
        scope: Scope = Scope.CORE,
        collective_id: int | None = None,
        checked_at_exit: bool = True,
    ) -> Sem:
        """`checked_at_exit=False`: a scratch semaphore of a TPU kernel compiled with
        disable_semaphore_checks=True, whose leftover carries into the next invocation."""
        name, size = _name(name, "a semaphore's name"), _whole(size, f"the size of semaphore {name!r}", 1)
        kind = _member(kind, SemKind, f"the kind of semaphore {name!r}")
        origin = _member(origin, SemOrigin, f"the origin of semaphore {name!r}")
        scope = _member(scope, Scope, f"the scope of semaphore {name!r}")
        if collective_id is not None:
            collective_id = _whole(collective_id, f"the collective_id of semaphore {name!r}", 0)
        self._sems.append(ir.SemDecl(name, kind, size, origin, scope, collective_id, caller_loc(),
                                     checked_at_exit=_instance(checked_at_exit, bool, f"checked_at_exit of semaphore {name!r}")))
        return Sem(name, size)

    def barrier_semaphore(self, name: str = "barrier", collective_id: int = 0) -> Sem:
        """pltpu.get_barrier_semaphore(): global, persistent, keyed by collective_id."""
        _name(name, "a semaphore's name")
        collective_id = _whole(collective_id, f"the collective_id of semaphore {name!r}", 0)
        self._sems.append(
            ir.SemDecl(name, BARRIER, 1, SemOrigin.BARRIER, Scope.CORE, collective_id, caller_loc())
        )
        return Sem(name, 1)

    def global_semaphore(self, name: str, size: int = 1) -> Sem:
        """pl.get_global (Mosaic GPU): one per launch, shared by every block of a device."""
        name, size = _name(name, "a semaphore's name"), _whole(size, f"the size of semaphore {name!r}", 1)
        self._sems.append(
            ir.SemDecl(name, GPU_GLOBAL, size, SemOrigin.GLOBAL, Scope.DEVICE, None, caller_loc())
        )
        return Sem(name, size)

    def buffer(self, name: str, shape: tuple[int, ...], itemsize: int = 4, space: str = "any",
               scope: Scope = Scope.CORE) -> Buffer:
        """A buffer; `scope=Scope.DEVICE` makes one instance per device, shared by its cores
        or blocks (HBM of a TPU chip, GMEM of a GPU)."""
        name = _name(name, "a buffer's name")
        if not isinstance(shape, (tuple, list)):
            raise ModelError(f"the shape of buffer {name!r} must be a tuple of whole numbers, got {shape!r}")
        shape = tuple(_whole(n, f"an extent of the shape of buffer {name!r}", 0) for n in shape)
        itemsize = _whole(itemsize, f"the itemsize of buffer {name!r}", 1)
        scope = _member(scope, Scope, f"the scope of buffer {name!r}")
        self._buffers[name] = ir.BufferDecl(name, shape, itemsize, _instance(space, str, "a buffer's space"), scope,
                                            caller_loc())
        return Buffer(name, shape, itemsize)

    def nbytes(self, region: ir.Region) -> int:
        decl = self._buffers[region.buffer]
        return Buffer(decl.name, decl.shape, decl.itemsize).nbytes(region)

    def input(self, name: str, lo: int, hi: int) -> Reg:
        """A value unknown at trace time; every value in lo..hi is checked."""
        name = _name(name, "an input's name")
        lo, hi = _whole(lo, f"input {name}: lo"), _whole(hi, f"input {name}: hi")
        self._inputs.append(ir.Input(name, lo, hi, caller_loc()))
        return Reg(name)

    def note(self, text: str) -> None:
        self._notes.append(text)

    def thread(self, device: int, core: int = 0, sub: int = 0) -> ThreadBuilder:
        device = _whole(device, "a thread's device", 0)
        core, sub = _whole(core, "a thread's core", 0), _whole(sub, "a thread's sub-thread", 0)
        if device >= self.devices or core >= self.cores:
            raise ModelError(f"thread (device {device}, core {core}) lies outside the protocol's "
                             f"{self.devices} device(s) x {self.cores} core(s)")
        key = (device, core, sub)
        if key not in self._threads:
            self._threads[key] = ThreadBuilder(self, device, core, sub)
        return self._threads[key]

    def build(self) -> ir.Protocol:
        threads = tuple(self._threads[k].build() for k in sorted(self._threads))
        nondecrementing = any(isinstance(i, ir.Wait) and not i.decrement for th in threads for i in th.body)
        if self.backend is Backend.TPU and nondecrementing and MODEL_NONDECREMENTING_NOTE not in self._notes:
            self.note(MODEL_NONDECREMENTING_NOTE)
        return ir.Protocol(
            name=self.name,
            backend=self.backend,
            devices=self.devices,
            cores=self.cores,
            threads=threads,
            semaphores=tuple(self._sems),
            buffers=tuple(self._buffers.values()),
            inputs=tuple(self._inputs),
            loc=self.loc,
            frontend="model",
            notes=tuple(self._notes),
        )
