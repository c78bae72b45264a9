"""A program of several kernels: the kernels a script runs one after another on every device,
checked as one protocol.

A kernel that starts a copy and returns its semaphores, followed by kernels that take those
semaphores and wait, is JAX's way to overlap a copy with other work
(tests/pallas/tpu_pallas_async_test.py in jax-ml/jax). Checked alone, the first exits with
copies in flight and every later one waits for a count that never comes. Composed, each
device runs kernel k+1 after kernel k ends on that device (no barrier between devices
unless a kernel has one); what one kernel hands to the next (`Handover`) is one declaration
of the program, so semaphore counts and copies in flight carry across, and what is left on
a semaphore any kernel of the program returns is judged when the program ends
(`ir.SemOrigin.HANDED_ON`): one no later kernel takes is dropped there. Kernels
that share a `collective_id` share its barrier semaphore, so a fast device's signals in
kernel 2 can meet a slow device still in kernel 1: a wait there that passes on them is
reported (`semantics.rules._early_pass`, the barrier ledger).

The composition is an ordinary Protocol: every thread's body is the concatenation of its
kernels' bodies, each between a KernelEntry and a KernelExit naming the kernel, so the
semantics and the engines need nothing new (the lifecycle rules of `--invocations` apply,
kernel by kernel: every kernel runs on every core of the one mesh, so kernel k is invocation k
of every thread). Every other declaration is the
kernel's own, named `kernel.name`.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from semcheck import ir, tpu_facts
from semcheck.passes.invocations import shared_barrier_note
from semcheck.records import record
from semcheck.result import Result, Verdict


@record(frozen=True, slots=True)
class Handover:
    """Kernel `consumer`'s declaration `name` is kernel `producer`'s declaration `source`
    (indices into the program's kernels): a semaphore or buffer one kernel hands to a later
    one."""

    producer: int
    source: str
    consumer: int
    name: str


def handed_in_note(names: Sequence[str]) -> str:
    """The note on a kernel checked alone that takes semaphores from an earlier kernel."""
    return (
        f"semaphores handed to this kernel by an earlier one ({', '.join(names)}) start at 0 "
        "here: semcheck checks each kernel on its own, so signals made before the kernel "
        "started are not counted"
    )


def handed_out_note(names: Sequence[str]) -> str:
    """The note on a kernel checked alone that returns semaphores to whatever runs next."""
    return (
        f"semaphores this kernel returns ({', '.join(names)}) are not judged at its exit: what is "
        "left on them, and copies still counting on them, are for the kernel that takes them "
        "next, which was not captured with this one (kernels of one jitted function are "
        "checked as one program, and then they are judged when the program ends)"
    )


# Why kernels that hand semaphores to each other on GPU are not composed (docs/semantics.md,
# "Programs of several kernels").
GPU_PROGRAM_REASON = (
    "on GPU, JAX 0.10.2 zero-fills a kernel's GMEM semaphores before each launch with an XLA "
    "computation the launch takes as an aliased input (zero_init_gmem_scratch in "
    "jax/_src/pallas/mosaic_gpu/pallas_call_registration.py), which orders the fill after "
    "nothing on the other devices, and gives Mosaic GPU kernels no barrier semaphore "
    "(use_custom_barrier=False there); no source states whether a peer's signal from a later "
    "launch can reach a device before that device's fill, so no verdict on the program could "
    "be justified"
)


def gpu_program_note(names: Sequence[str]) -> str:
    """The note on a GPU kernel that hands semaphores to, or takes them from, the kernels
    `names`: each is checked alone."""
    return (
        f"not checked as one program with {', '.join(names)}, with which it passes semaphores: "
        f"{GPU_PROGRAM_REASON}; each kernel is checked alone, and a wait on a semaphore handed "
        "in from another kernel is inconclusive"
    )


def shared_barrier_name(collective_id: int) -> str:
    return f"barrier_semaphore[collective_id={collective_id}]"


def compose(kernels: Sequence[ir.Protocol], handovers: Sequence[Handover]) -> ir.Protocol:
    """The program that runs `kernels` in this order on every device."""
    if len(kernels) < 2:
        raise ValueError("a program has at least two kernels")
    first = kernels[0]
    for other in kernels[1:]:
        if (other.backend, other.devices, other.cores) != (first.backend, first.devices, first.cores):
            raise ValueError(
                f"kernels {first.name} and {other.name} run on different meshes "
                f"({first.devices}x{first.cores} and {other.devices}x{other.cores}); a program runs on one"
            )
    if first.backend is not ir.Backend.TPU:
        raise ValueError(f"programs of several kernels are modelled for TPU only: {GPU_PROGRAM_REASON}")
    kernels = _in_one_dma_unit(kernels)
    first = kernels[0]
    labels = _labels(kernels)
    names: list[dict[str, str]] = []  # per kernel: its declaration -> the program's
    semaphores: dict[str, ir.SemDecl] = {}
    buffers: dict[str, ir.BufferDecl] = {}
    handed = {(h.consumer, h.name): h for h in handovers}
    aliases: list[ir.SemAlias] = []  # a carried semaphore, as the kernel that takes it calls it
    for k, (kernel, label) in enumerate(zip(kernels, labels)):
        renamed: dict[str, str] = {}
        carried = carried_places(kernels[k - 1], kernel) if k else {}
        for decl in kernel.semaphores:
            h = handed.get((k, decl.name))
            if h is not None:
                renamed[decl.name] = target = _handed_name(names, h, kernels)
                _check_match(semaphores[target], decl, kernels, h)
                semaphores[target] = dataclasses.replace(semaphores[target], origin=ir.SemOrigin.HANDED_ON)
            elif decl.origin is ir.SemOrigin.BARRIER and decl.collective_id is not None:
                renamed[decl.name] = target = shared_barrier_name(decl.collective_id)
                semaphores.setdefault(target, dataclasses.replace(decl, name=target))
            elif decl.name in carried:
                renamed[decl.name] = names[k - 1][carried[decl.name]]
                aliases.append(ir.SemAlias(label, renamed[decl.name], f"{label}.{decl.name}", decl.loc,
                                              decl.checked_at_exit))
            else:
                renamed[decl.name] = target = f"{label}.{decl.name}"
                semaphores[target] = dataclasses.replace(decl, name=target, kernel=label)
        for buf in kernel.buffers:
            h = handed.get((k, buf.name))
            if h is not None:
                renamed[buf.name] = target = _handed_name(names, h, kernels)
                buffers[target] = dataclasses.replace(buffers[target], handed_on=True)
            else:
                renamed[buf.name] = target = f"{label}.{buf.name}"
                buffers[target] = dataclasses.replace(buf, name=target)
        for result in kernel.ports.results:  # outlives the kernel: judged at the program's end
            returned = renamed.get(result)
            if returned is not None and returned in semaphores:
                semaphores[returned] = dataclasses.replace(semaphores[returned], origin=ir.SemOrigin.HANDED_ON)
            elif target in buffers:
                buffers[target] = dataclasses.replace(buffers[target], handed_on=True)
        names.append(renamed)
    threads = _threads(kernels, labels, names)
    inputs = tuple(
        dataclasses.replace(i, name=f"{label}.{i.name}") for kernel, label in zip(kernels, labels) for i in kernel.inputs
    )
    return ir.Protocol(
        name=" + ".join(labels),
        backend=first.backend,
        devices=first.devices,
        cores=first.cores,
        threads=threads,
        semaphores=tuple(semaphores.values()),
        buffers=tuple(buffers.values()),
        inputs=inputs,
        loc=first.loc,
        frontend=first.frontend,
        notes=(_program_note(labels, kernels, handovers),) + _kernel_notes(kernels, labels, handovers),
        data_uses=tuple(u for kernel in kernels for u in kernel.data_uses),
        withheld=tuple(dict.fromkeys(w for kernel in kernels for w in kernel.withheld)),
        fed=tuple(dict.fromkeys(f for kernel in kernels for f in kernel.fed)),
        cores_enter_together=all(k.cores_enter_together for k in kernels),
        kernels=tuple(labels),
        aliases=tuple(aliases),
        findings=tuple(dict.fromkeys(f for kernel in kernels for f in kernel.findings)),
        dma_unit=first.dma_unit,
        calls=tuple(dict.fromkeys(call for kernel in kernels for call in kernel.calls)),
    )


def _in_one_dma_unit(kernels: Sequence[ir.Protocol]) -> list[ir.Protocol]:
    """The kernels with their copies' amounts in the smallest DMA unit any of them counts
    (a kernel that copies sizes of odd bytes counts bytes: lower/tpu_hardware.py), so a
    semaphore carried or handed from one to the next counts the same unit."""
    unit = min(k.dma_unit for k in kernels)

    def scaled(instr: ir.Instr, factor: int) -> ir.Instr:
        if isinstance(instr, (ir.DmaStart, ir.DmaWait)):
            return dataclasses.replace(instr, nbytes=instr.nbytes * factor if isinstance(instr.nbytes, int)
                                       else ir.BinOp("mul", factor, instr.nbytes))
        return instr

    return [k if k.dma_unit == unit else dataclasses.replace(
        k, dma_unit=unit, threads=tuple(dataclasses.replace(t, body=tuple(scaled(i, k.dma_unit // unit) for i in t.body))
                                        for t in k.threads)) for k in kernels]


def carried_places(before: ir.Protocol, after: ir.Protocol) -> dict[str, str]:
    """`after`'s scratch semaphores that start with what `before`, run just before it on the
    same core, leaves in the same place: `before` runs with disable_semaphore_checks=True,
    so the chip neither stops on a leftover at its exit nor zeroes scratch semaphores at the
    next entry (semcheck/tpu_facts.py, `leftover_carries_without_checks`). A place is the
    position among a kernel's scratch semaphores, elements of arrays counted one by one;
    an allocation of `after` carries when one of `before`'s of the same kind and size sits
    at the same place. -> {after's name: before's name}."""
    if all(d.checked_at_exit for d in before.semaphores):
        return {}
    first = {place: d for place, d in _scratch_places(before)}
    return {
        d.name: first[place].name for place, d in _scratch_places(after)
        if place in first and (first[place].kind, first[place].size) == (d.kind, d.size)
    }


def _scratch_places(kernel: ir.Protocol) -> list[tuple[int, ir.SemDecl]]:
    places, place = [], 0
    for decl in kernel.semaphores:
        if decl.origin is ir.SemOrigin.SCRATCH:
            places.append((place, decl))
            place += decl.size
    return places


def _labels(kernels: Sequence[ir.Protocol]) -> list[str]:
    labels: list[str] = []
    for kernel in kernels:
        label, n = kernel.name, 2
        while label in labels:
            label, n = f"{kernel.name}#{n}", n + 1
        labels.append(label)
    return labels


def _handed_name(names: list[dict[str, str]], h: Handover, kernels: Sequence[ir.Protocol]) -> str:
    if not 0 <= h.producer < h.consumer:
        raise ValueError(f"a handover must go to a later kernel: {h}")
    try:
        return names[h.producer][h.source]
    except KeyError:
        raise ValueError(f"kernel {kernels[h.producer].name} has no declaration {h.source!r} to hand on") from None


def _check_match(produced: ir.SemDecl, taken: ir.SemDecl, kernels: Sequence[ir.Protocol], h: Handover) -> None:
    if (produced.kind, produced.size) != (taken.kind, taken.size):
        raise ValueError(
            f"{kernels[h.consumer].name} takes {taken.name} ({taken.kind.value} x{taken.size}) from "
            f"{kernels[h.producer].name}'s {h.source} ({produced.kind.value} x{produced.size})"
        )


def _threads(kernels: Sequence[ir.Protocol], labels: list[str], names: list[dict[str, str]]) -> tuple[ir.Thread, ...]:
    keys = list(dict.fromkeys((t.device, t.core, t.sub) for kernel in kernels for t in kernel.threads))
    out = []
    for device, core, sub in keys:
        body: list[ir.Instr] = []
        for kernel, label, renamed in zip(kernels, labels, names):
            thread = next((t for t in kernel.threads if (t.device, t.core, t.sub) == (device, core, sub)), None)
            if thread is None:
                continue
            part = tuple(_rename(i, renamed, label) for i in thread.body)
            if not any(isinstance(i, ir.KernelEntry) for i in part):
                first = part[0].loc if part else kernel.loc
                last = part[-1].loc if part else kernel.loc
                part = (ir.KernelEntry(first, label),) + _shift(part, 1) + (ir.KernelExit(last, label),)
            else:
                part = tuple(dataclasses.replace(i, kernel=label) if isinstance(i, (ir.KernelEntry, ir.KernelExit)) else i
                             for i in part)
            body.extend(_shift(part, len(body)))
        out.append(ir.Thread(device, core, tuple(body), sub))
    return tuple(out)


def _shift(body: tuple[ir.Instr, ...], offset: int) -> tuple[ir.Instr, ...]:
    """The body placed `offset` instructions later: jump targets move with it."""
    if not offset:
        return body
    return tuple(
        dataclasses.replace(i, target=i.target + offset) if isinstance(i, (ir.Branch, ir.Jump)) else i for i in body
    )


def _rename(value, decls: dict[str, str], label: str):
    """`value` (an instruction or a part of one) with the kernel's declarations and
    registers given their program names."""
    if isinstance(value, ir.SemRef):
        return dataclasses.replace(
            value, alloc=decls[value.alloc], index=_rename(value.index, decls, label),
            device=_rename(value.device, decls, label), core=_rename(value.core, decls, label),
        )
    if isinstance(value, ir.Region):
        return ir.Region(decls[value.buffer], _rename(value.start, decls, label), _rename(value.size, decls, label))
    if isinstance(value, ir.Reg):
        return ir.Reg(f"{label}.{value.name}")
    if isinstance(value, ir.BinOp):
        return ir.BinOp(value.op, _rename(value.a, decls, label), _rename(value.b, decls, label))
    if isinstance(value, tuple):
        return tuple(_rename(v, decls, label) for v in value)
    if isinstance(value, ir.Instr):
        changes = {
            f.name: _rename(getattr(value, f.name), decls, label)
            for f in dataclasses.fields(value)
            if f.name not in ("loc", "kernel", "target", "message", "hint", "side", "decrement")
        }
        if isinstance(value, (ir.Read, ir.Assign)):  # a register's name, not a region
            changes["dst"] = f"{label}.{value.dst}"
        return dataclasses.replace(value, **changes)
    return value


def _program_note(labels: list[str], kernels: Sequence[ir.Protocol], handovers: Sequence[Handover]) -> str:
    passed = "; ".join(
        f"{labels[h.producer]}.{h.source} -> {labels[h.consumer]}.{h.name}" for h in handovers
    )
    shared = sorted({d.collective_id for k in kernels for d in k.semaphores
                     if d.origin is ir.SemOrigin.BARRIER and d.collective_id is not None})
    parts = [
        f"checked as one program of {len(kernels)} kernels ({', '.join(labels)}): each device runs "
        "them in this order, each starting when the one before ended on that device, with no "
        "barrier between devices except the kernels' own; semaphore counts and copies in "
        "flight carry from one kernel to the next, and what is left on a semaphore handed on "
        "is judged when the program ends (JAX 0.10.2 runs the kernels of one jitted function "
        "as XLA custom calls in data-flow order; its async tests wait in later kernels for "
        "copies earlier ones started: tests/pallas/tpu_pallas_async_test.py)"
    ]
    if passed:
        parts.append(f"handed on: {passed}")
    for before, after, label in zip(kernels, kernels[1:], labels[1:]):
        carried = carried_places(before, after)
        if carried:
            parts.append(
                f"{label} starts its scratch semaphores {', '.join(carried)} with what the kernel "
                "before it leaves in the same places: that kernel runs with "
                f"disable_semaphore_checks=True ({tpu_facts.fact('leftover_carries_without_checks').basis})"
            )
    if shared:
        parts.append(
            "kernels with the same collective_id share its barrier semaphore: a later kernel's signal, "
            "from a device that moved on, can be taken by the wait of a device still in an earlier "
            f"kernel; {shared_barrier_note(shared)} (JAX 0.11's "
            "jax_pallas_auto_assign_collective_ids=override gives each kernel a barrier semaphore of its own)"
        )
    return "; ".join(parts)


def _kernel_notes(kernels: Sequence[ir.Protocol], labels: list[str], handovers: Sequence[Handover]) -> tuple[str, ...]:
    out: list[str] = []
    for k, (kernel, label) in enumerate(zip(kernels, labels)):
        handed_in = _handed_in_operands(kernel)
        linked = {h.name for h in handovers if h.consumer == k}
        handed_out = _handed_out_results(kernel)
        for note in kernel.notes:
            if handed_in and note == handed_in_note(handed_in) and set(handed_in) <= linked:
                continue  # the program counts what earlier kernels did
            if handed_out and note == handed_out_note(handed_out):
                continue  # the program judges returned semaphores when it ends
            out.append(f"{label}: {note}")
    return tuple(dict.fromkeys(out))


def _handed_out_results(kernel: ir.Protocol) -> list[str]:
    """The semaphores among the kernel's results, as its lowering's note names them."""
    sems = {d.name for d in kernel.semaphores}
    return [n for n in kernel.ports.results if n in sems]


def _handed_in_operands(kernel: ir.Protocol) -> list[str]:
    """The semaphores among the kernel's operands, as its lowering's note names them."""
    sems = {d.name for d in kernel.semaphores}
    return [n for n in kernel.ports.operands if n in sems]


HANG_KINDS = ("unsatisfied_wait", "deadlock")


def outside_producers(protocol: ir.Protocol, result: Result) -> Result:
    """A kernel checked alone that hangs waiting on a semaphore it was handed from outside
    everything captured (a kernel of another jitted function, or of a nested jax.jit): what
    that semaphore holds at entry is unknown, so the hang is no violation semcheck can
    justify. Those findings are dropped and the verdict is inconclusive, with the reason."""
    sems = {d.name: d for d in protocol.semaphores}
    handed_in = {n for n in protocol.ports.operands if n in sems and sems[n].origin is ir.SemOrigin.ARGUMENT}
    unknown = [v for v in result.errors if v.kind in HANG_KINDS and v.semaphore_name in handed_in]
    if not unknown:
        return result
    names = sorted({v.semaphore_name for v in unknown if v.semaphore_name})
    if protocol.backend is ir.Backend.TPU:
        where = ("handed to the kernel from outside everything captured", "check the kernels that "
                 "produce it in the same jitted function, directly or through nested jax.jit "
                 "calls, so they form one program")
    else:
        where = ("handed to the kernel by another kernel or from outside everything captured",
                 "semcheck does not compose GPU kernels into a program: see the note on programs")
    reason = (
        f"a wait on {', '.join(names)}, {where[0]}, never passes when it starts at 0; what an "
        f"earlier kernel left there is unknown ({where[1]})"
    )
    result.violations = [v for v in result.violations if v not in unknown]
    result.notes.append(reason)
    if not result.errors:
        result.verdict = Verdict.INCONCLUSIVE
        result.unjustified = reason
    return result
