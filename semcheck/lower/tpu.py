"""Rules for the TPU synchronization primitives (docs/semantics.md): semaphore_signal,
semaphore_wait, semaphore_read, dma_start, dma_wait, get_barrier_semaphore.

Device ids follow `primitives.device_id_to_logical`: a MESH id is one coordinate per mesh
axis, linearized row-major over the whole mesh; a dict fills the axes it leaves out with the
caller's own coordinates, splits joint (tuple) axes, and takes a key that is not a mesh axis
(a TensorCoreMesh axis) as the core index; a LOGICAL id is the linear id itself.
"""

from __future__ import annotations

import math

import numpy as np

from semcheck import ir
from semcheck.lower.context import ThreadLowering
from semcheck.lower.interpreter import operand
from semcheck.lower.memory import copy_data, for_each_selection, nbytes_of_window, region, semaphore_ref
from semcheck.lower.registry import rule
from semcheck.lower.source import library_call
from semcheck.lower.tpu_hardware import dma_amount, nondecrementing_wait, note_by_hand, note_regular_dma
from semcheck.lower.values import Known, Sym, sym_op
from semcheck.version import ISSUES_URL


def _is_logical(device_id_type) -> bool:
    return getattr(device_id_type, "name", str(device_id_type)).upper().endswith("LOGICAL")


def resolve_device(t: ThreadLowering, eqn, device_id, device_id_type, what: str):
    """(linear device operand or None for local, core operand from a dict id or None)."""
    if device_id is None:
        return None, None
    mesh = t.kernel.mesh
    if device_id_type is None:  # JAX newer than 0.11 lets the id's form decide
        device_id_type = _implied_id_type(t, eqn, device_id, what)
    if _is_logical(device_id_type):
        if isinstance(device_id, (tuple, list, dict)):
            raise t.error(eqn, f"{what}: a LOGICAL device id must be a single integer")
        return operand(t, eqn, device_id, f"the {what} device id"), None
    core = None
    if isinstance(device_id, dict):
        device_id, core = _dict_to_coords(t, eqn, device_id, what)
        if not mesh.axis_names:
            return None, core
    coords = list(device_id) if isinstance(device_id, (tuple, list)) else [device_id]
    if len(coords) != len(mesh.axis_names):
        if not mesh.axis_names:
            raise t.error(
                eqn,
                f"{what} names a device, but the kernel does not run inside jax.shard_map",
                hint="call the kernel inside jax.shard_map over a device mesh",
            )
        raise t.error(
            eqn,
            f"{what}: a MESH device id needs one coordinate per mesh axis "
            f"({', '.join(mesh.axis_names)}), got {len(coords)}",
        )
    linear: ir.Operand = 0
    for coord, stride in zip(coords, mesh.strides):
        if not isinstance(coord, (int, ir.Reg, ir.BinOp)):  # dict ids arrive as operands
            coord = operand(t, eqn, coord, f"the {what} device id")
        linear = sym_op("add", linear, sym_op("mul", coord, stride))
    return linear, core


def _implied_id_type(t: ThreadLowering, eqn, device_id, what: str) -> str:
    """`device_id_type=None` (the default of `pl.semaphore_signal` in JAX newer than 0.11): a
    tuple or dict id names mesh coordinates; a single id is the same either way on a mesh of
    one axis; on a mesh of several axes semcheck does not know which JAX means."""
    if isinstance(device_id, (tuple, list, dict)) or len(t.kernel.mesh.axis_names) <= 1:
        return "MESH"
    from semcheck.jax_compat import installed_version

    raise t.error(eqn, f"{what}: a single device id with device_id_type=None on a mesh of several axes "
                  f"({', '.join(t.kernel.mesh.axis_names)}; JAX {installed_version()}): semcheck does not "
                  "know whether it is a logical id or a mesh coordinate",
                  hint="pass device_id_type=pl.DeviceIdType.LOGICAL, or a tuple or dict of mesh coordinates")


def _dict_to_coords(t: ThreadLowering, eqn, ids: dict, what: str):
    mesh = t.kernel.mesh
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    coords: dict = {}
    core = None
    for key, value in ids.items():
        names = key if isinstance(key, tuple) else (key,)
        if all(n in sizes for n in names):
            index = operand(t, eqn, value, f"the {what} device id along {key!r}")
            # A joint axis: its index is split over the component axes, major to minor.
            for k, name in enumerate(names):
                inner = math.prod(sizes[n] for n in names[k + 1:])
                coords[name] = sym_op("mod", sym_op("floordiv", index, inner), sizes[name])
        elif any(n in sizes for n in names):
            raise t.error(eqn, f"{what}: device id key {key!r} mixes mesh axes and other axes")
        else:
            if core is not None:
                raise t.error(eqn, f"{what}: a device id may name at most one core axis")
            core = operand(t, eqn, value, f"the {what} core index along {key!r}")
    filled = tuple(coords.get(name, t.coords[name]) for name in mesh.axis_names)
    return filled, core


@rule("semaphore_signal")
def semaphore_signal(t: ThreadLowering, eqn, inputs):
    if "memory_scope" in eqn.params:
        raise t.error(eqn, "this is Mosaic GPU's semaphore_signal; the TPU frontend cannot check it",
                      hint="Mosaic GPU kernels are not supported yet")
    sem, transforms, inc, device_id, core_index = eqn.params["args_tree"].unflatten(inputs)
    device, dict_core = resolve_device(t, eqn, device_id, eqn.params["device_id_type"], "signal")
    if dict_core is not None and core_index is not None:
        raise t.error(eqn, "the signal gives a core both in its device id dict and as core_index")
    core = dict_core if core_index is None else operand(t, eqn, core_index, "the signal's core_index")
    ref = semaphore_ref(t, eqn, sem, "the signalled semaphore", transforms, device=device, core=core)
    note_by_hand(t, ref.alloc)
    t.emitter.emit(ir.Signal(t.loc(eqn), ref, operand(t, eqn, inc, "the signal increment")))
    return []


@rule("semaphore_wait")
def semaphore_wait(t: ThreadLowering, eqn, inputs):
    if "memory_scope" in eqn.params:
        raise t.error(eqn, "this is Mosaic GPU's semaphore_wait; the TPU frontend cannot check it",
                      hint="Mosaic GPU kernels are not supported yet")
    sem, transforms, value, decrement = eqn.params["args_tree"].unflatten(inputs)
    # `decrement` is a Python bool leaf, so it is a Literal among the eqn's inputs (the
    # 0.10.2 pretty-printer prints "[dec]" either way; never trust the printed text).
    if not isinstance(decrement, Known):
        raise t.error(eqn, "the decrement flag is not a constant")
    ref = semaphore_ref(t, eqn, sem, "the waited semaphore", transforms)
    note_by_hand(t, ref.alloc)
    # A non-decrementing wait is checked as JAX lowers it for TPU (lower/tpu_hardware.py).
    decrements = bool(decrement.value) or nondecrementing_wait(t, eqn)
    t.emitter.emit(ir.Wait(t.loc(eqn), ref, operand(t, eqn, value, "the wait value"), decrements))
    return []


@rule("semaphore_read")
def semaphore_read(t: ThreadLowering, eqn, inputs):
    sem, transforms = eqn.params["args_tree"].unflatten(inputs)
    ref = semaphore_ref(t, eqn, sem, "the read semaphore", transforms)
    note_by_hand(t, ref.alloc)
    register = t.fresh_reg("read")
    t.emitter.emit(ir.Read(t.loc(eqn), ref, register))
    return [Sym(ir.Reg(register), np.dtype(np.int32))]


@rule("dma_start")
def dma_start(t: ThreadLowering, eqn, inputs):
    tree = eqn.params["tree"]
    src, dst, recv_sem, send_sem, device_id = tree.unflatten(inputs)
    avals = tree.unflatten([v.aval for v in eqn.invars])
    if eqn.params.get("add"):
        called = library_call(eqn.source_info.traceback) or "async_copy"
        raise t.error(
            eqn,
            f"{called}(add=True) is not lowerable on a TensorCore (Mosaic raises "
            "NotImplementedError); semcheck has no model of it",
            hint="copy, then add in the kernel",
        )
    device, core = resolve_device(t, eqn, device_id, eqn.params["device_id_type"], "DMA")

    def start(operands) -> None:
        src, dst, recv_sem, send_sem = operands
        instr = ir.DmaStart(
            t.loc(eqn),
            src=region(t, eqn, src, "the DMA source"),
            dst=region(t, eqn, dst, "the DMA destination"),
            recv_sem=semaphore_ref(t, eqn, recv_sem, "the DMA's receive semaphore"),
            send_sem=None if send_sem is None else semaphore_ref(t, eqn, send_sem, "the DMA's send semaphore"),
            # Mosaic counts the bytes of the destination memref, turned into the chip's
            # 32-byte units for the whole kernel by `in_dma_units` (docs/semantics.md, "DMAs"
            # and "What the hardware does").
            nbytes=dma_amount(t, eqn, nbytes_of_window(t, eqn, dst, avals[1], "the DMA destination")),
            device=device,
            core=core,
            bounds_checked=t.kernel.bounds_checks,
        )
        for sem_ref in (instr.recv_sem, instr.send_sem):
            if sem_ref is not None:
                note_regular_dma(t, sem_ref.alloc)
        value = copy_data(t, eqn, instr, src, dst)  # the data it moves (lower/data.py)
        t.emitter.emit(t.filled(instr, value))

    for_each_selection(t, eqn, [src, dst, recv_sem, send_sem], start)
    return []


@rule("dma_wait")
def dma_wait(t: ThreadLowering, eqn, inputs):
    tree = eqn.params["tree"]
    _src, dst, sem, _other_sem, _device_id = tree.unflatten(inputs)
    avals = tree.unflatten([v.aval for v in eqn.invars])
    # wait_send binds the descriptor with src/dst and the two semaphores swapped, so slot 2
    # is always the local semaphore to wait on. Newer JAX marks a send-wait with
    # `is_wait_send`; 0.10.2 only with `insert_dummy_device`.
    params = eqn.params
    send_side = params["is_wait_send"] if "is_wait_send" in params else params.get("insert_dummy_device", False)
    side = ir.DmaSide.SEND if send_side else ir.DmaSide.RECV

    def wait(operands) -> None:
        dst, sem = operands
        t.emitter.emit(
            ir.DmaWait(
                t.loc(eqn),
                semaphore_ref(t, eqn, sem, f"the DMA {side} semaphore waited on"),
                dma_amount(t, eqn, nbytes_of_window(t, eqn, dst, avals[1], "the waited DMA's destination")),
                side,
            )
        )

    for_each_selection(t, eqn, [dst, sem], wait)
    return []


BARRIER_TAG_NOTE = (
    "pltpu.get_barrier_semaphore(tag=...) (JAX newer than 0.11: kernels that pass the same tag "
    "get the same barrier semaphore from XLA) is checked as the kernel's barrier semaphore of "
    "its collective_id; semcheck has read the API's documentation, not its lowering"
)


@rule("get_barrier_semaphore")
def get_barrier_semaphore(t: ThreadLowering, eqn, inputs):
    if eqn.params.get("tag") is not None:
        if t.kernel.collective_id is None:
            from semcheck.jax_compat import installed_version

            raise t.error(
                eqn,
                f"get_barrier_semaphore(tag={eqn.params['tag']!r}) in a kernel without a collective_id "
                f"(JAX {installed_version()}): semcheck does not know whether XLA runs the default "
                "device barrier before such a kernel, which decides whether a peer's signal can "
                "arrive before this device entered",
                hint=f"set pltpu.CompilerParams(collective_id=...) as well, or report this kernel at {ISSUES_URL}",
            )
        t.kernel.note(BARRIER_TAG_NOTE)
    if t.kernel.collective_id is None:
        raise t.error(
            eqn,
            "the kernel uses the barrier semaphore but sets no collective_id; Pallas TPU "
            "lowering rejects it ('collective_id has to be specified when using a custom barrier')",
            hint="pass compiler_params=pltpu.CompilerParams(collective_id=<id>)",
        )
    return [t.kernel.barrier_semaphore(t.loc(eqn))]


def _gpu_only(t: ThreadLowering, eqn, inputs):
    raise t.error(
        eqn,
        "this primitive exists only on Mosaic GPU and has no TPU lowering",
        hint="the TPU frontend checks TPU kernels; this kernel is a GPU kernel",
    )


for _name in ("get_global", "semaphore_signal_multicast", "semaphore_signal_parallel"):
    rule(_name)(_gpu_only)


def _no_effect(t: ThreadLowering, eqn, inputs):
    """Hints and scheduling aids with no synchronization meaning."""
    from semcheck.lower.values import Opaque

    return [Opaque(f"the result of {eqn.primitive.name} at {t.loc(eqn)}") for _ in eqn.outvars]


for _name in ("delay", "add_dependency", "trace_value"):
    rule(_name)(_no_effect)
