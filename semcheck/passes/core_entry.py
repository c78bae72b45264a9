"""How the TensorCores of one chip enter a kernel: the reading semcheck checks under.

The default reading, that the cores of a chip enter and leave each invocation of a kernel
together, rests on JAX 0.10.2 itself (docs/semantics.md, "How the cores of a chip enter a
kernel"): `pltpu.core_barrier` signals the other cores' scratch semaphore with no handshake,
JAX's TPU interpreter allocates every core's semaphores before it starts the cores' threads,
and JAX's own multi-core tests signal another core's run_scoped semaphore with
`collective_id` set. `--no-assume-cores-enter-together` takes the other reading, under which
such a signal can reach a core that has not entered yet (`remote_before_entry`).

The reading lives on the Protocol (`cores_enter_together`) and `semantics.System.enters_with`
applies it: under the default, a signal or copy between two cores of one device is exempt
from the entry check. That is exact for that check (with joint entries and exits no core of
the chip is ever outside the sender's invocation) and keeps every other interleaving, so no
other finding is lost; with `--invocations K` it also keeps schedules in which one core
enters the next invocation before its sibling left, which joint entry would exclude.
"""

from __future__ import annotations

import dataclasses

from semcheck import ir

JAX_BASIS = (
    "JAX 0.10.2: pltpu.core_barrier (jax/_src/pallas/mosaic/helpers.py) signals the other "
    "cores' semaphore with no handshake, and the TPU interpreter allocates every core's "
    "semaphores before it starts the cores' threads "
    "(jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py, thread_map.py)"
)


def relies_on_core_entry(protocol: ir.Protocol) -> bool:
    """A TPU kernel with several cores per chip whose threads enter and exit the kernel."""
    return (
        protocol.backend is ir.Backend.TPU
        and protocol.cores > 1
        and any(isinstance(i, ir.KernelEntry) for t in protocol.threads for i in t.body)
    )


def core_entry_note(together: bool) -> str:
    if together:
        return (
            "the TensorCores of one chip are read as entering and leaving each invocation of the "
            "kernel together, so a signal or copy between two cores of one device is never "
            f"remote_before_entry ({JAX_BASIS}); --no-assume-cores-enter-together checks the "
            "other reading"
        )
    return (
        "the TensorCores of one chip are read as entering the kernel on their own "
        "(--no-assume-cores-enter-together), so a signal or copy between two cores of one device "
        "must find the target core inside the sender's invocation; JAX's own code assumes they "
        f"enter together ({JAX_BASIS})"
    )


def apply(protocol: ir.Protocol, together: bool = True) -> ir.Protocol:
    """The protocol under the given reading of core entry, with the note that says so when
    the kernel relies on it. Under the default reading, a kernel whose cores signal or copy
    to each other, and which no default device barrier already holds back at entry, gets a
    joint entry of the cores of each chip (`_with_joint_entry`)."""
    if not relies_on_core_entry(protocol):
        return dataclasses.replace(protocol, cores_enter_together=together)
    notes = protocol.notes + (core_entry_note(together),)
    protocol = dataclasses.replace(protocol, cores_enter_together=together, notes=notes)
    if together and _talks_across_cores(protocol) and not _has_default_barrier(protocol):
        protocol = _with_joint_entry(protocol)
    return protocol


# The joint entry: after its KernelEntry, every core of a chip arrives on core 0's ARRIVE;
# core 0 waits for all of them and releases each; no core runs its body before every core
# of its chip has entered, so nothing a sibling sends can precede the entry that resets the
# target's scratch and scoped semaphores. Barrier-origin semaphores: they outlive
# invocations and are exempt from the entry check, like the default device barrier's.
ARRIVE, RELEASE = "core_entry.arrive", "core_entry.release"


def _talks_across_cores(protocol: ir.Protocol) -> bool:
    def names_a_core(instr) -> bool:
        if isinstance(instr, ir.Signal):
            return instr.sem.core is not None
        if isinstance(instr, ir.DmaStart):
            return instr.core is not None or instr.recv_sem.core is not None
        return False

    return any(names_a_core(i) for t in protocol.threads for i in t.body)


def _has_default_barrier(protocol: ir.Protocol) -> bool:
    return any(d.name == ir.DEVICE_BARRIER_ARRIVE for d in protocol.semaphores)


def _with_joint_entry(protocol: ir.Protocol) -> ir.Protocol:
    decls = tuple(
        ir.SemDecl(name, ir.SemKind.BARRIER, 1, ir.SemOrigin.BARRIER, ir.Scope.CORE, None, protocol.loc,
                   shown_as=f"the {what} the cores' joint entry into the kernel")
        for name, what in ((ARRIVE, "arrivals at"), (RELEASE, "release from"))
    )
    threads = tuple(
        dataclasses.replace(t, body=_insert_after_entries(t.body, _entry_barrier(t, protocol)))
        for t in protocol.threads
    )
    return dataclasses.replace(protocol, threads=threads, semaphores=protocol.semaphores + decls)


def _entry_barrier(thread: ir.Thread, protocol: ir.Protocol):
    def at(loc: ir.Loc) -> list[ir.Instr]:
        out: list[ir.Instr] = [ir.Signal(loc, ir.SemRef(ARRIVE, 0, None, 0), 1)]
        if thread.core == 0:
            out.append(ir.Wait(loc, ir.SemRef(ARRIVE), protocol.cores))
            out += [ir.Signal(loc, ir.SemRef(RELEASE, 0, None, c), 1) for c in range(protocol.cores)]
        out.append(ir.Wait(loc, ir.SemRef(RELEASE), 1))
        return out

    return at


def _insert_after_entries(body: tuple[ir.Instr, ...], barrier) -> tuple[ir.Instr, ...]:
    """`body` with `barrier(loc)` after each KernelEntry; jump targets follow their instruction
    (a jump to just after an entry lands after its barrier: the body starts there)."""
    new_pc: list[int] = []
    out: list[ir.Instr] = []
    for instr in body:
        new_pc.append(len(out))
        out.append(instr)
        extra = barrier(instr.loc) if isinstance(instr, ir.KernelEntry) else []
        out.extend(extra)
    new_pc.append(len(out))

    def moved(i):
        if isinstance(i, (ir.Branch, ir.Jump)):
            return dataclasses.replace(i, target=new_pc[i.target])
        return i

    return tuple(moved(i) for i in out)
