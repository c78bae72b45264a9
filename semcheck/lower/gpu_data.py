"""The values a Mosaic GPU kernel reads, through the data path the TPU frontend uses
(`lower/data.py`, docs/data-evaluation.md): a device id, a semaphore index or a trip count
loaded from an operand is the value the script passed on that device (or what the thread
itself stored), so a kernel that reads its peer from an input (`other_dev_id_ref[0]`, JAX's
Mosaic GPU distributed tests) is checked for the script's values.

A thread follows only its own, synchronous writes. Global memory is shared by every block
of a device and, through `plgpu.remote_ref`, written by peers; shared memory by the Pallas
threads and warps of a block; TMA copies write asynchronously; so a buffer's values are
followed only where the lowering saw no such writer: after lowering every thread, the
buffers some thread read through the data path while another thread, a peer, an atomic or
an asynchronous copy writes them become unknown (with the reason), and the kernel is lowered
again (`unfollowed`, at most once per newly found buffer)."""

from __future__ import annotations

from semcheck import ir
from semcheck.lower.values import Opaque, Value

# Lowerings of a GPU kernel before the set of buffers it cannot follow settles.
MAX_PASSES = 4

ThreadKey = tuple[int, int, int]  # (device, block, sub)


def read(t, eqn, ref, transforms, reg: ir.Region, why: str) -> Value:
    """What a local load of `reg` (through `ref`'s view, `transforms` being all of them)
    sees, by the data path; Opaque where another writer makes it unknown."""
    from semcheck.lower.interpreter import FOLD_LIMIT

    kernel = t.kernel
    kernel.gpu_data_reads.setdefault(reg.buffer, set()).add((t.device, t.core, t.sub))
    reason = kernel.gpu_unfollowed.get(reg.buffer)
    if reason is not None:
        kernel.read_buffers.add(reg.buffer)
        return Opaque(f"{why}, {reason}")
    [out] = eqn.outvars[:1]
    return t.memory.read(ref, transforms, reg, out.aval, why, FOLD_LIMIT)


def unfollowed(threads: list[ir.Thread], reads: dict[str, set[ThreadKey]]) -> dict[str, str]:
    """buffer -> why its values cannot be followed, for the buffers some thread read through
    the data path (`reads`: buffer -> the threads that did) that a writer other than the
    reading thread's own plain stores may change."""
    writers: dict[str, set[ThreadKey]] = {}
    why: dict[str, str] = {}
    for thread in threads:
        key = (thread.device, thread.core, thread.sub)
        for instr in thread.body:
            if isinstance(instr, ir.DmaStart):
                why.setdefault(instr.dst.buffer, "which an asynchronous copy (a TMA load or store) writes")
            elif isinstance(instr, ir.Store):
                writers.setdefault(instr.region.buffer, set()).add(key)
                if instr.device is not None:
                    why.setdefault(instr.region.buffer, "which a peer writes through plgpu.remote_ref")
                elif instr.atomic:
                    why.setdefault(instr.region.buffer, "which atomics update")
    for buffer, readers in reads.items():
        if any(writers.get(buffer, set()) - {reader} for reader in readers):
            why.setdefault(buffer, "which another thread of the kernel writes")
    return {
        buffer: f"{reason}, so its values are not followed (semcheck follows a GPU buffer only where "
                "the reading thread's own stores are its one writer)"
        for buffer, reason in why.items() if buffer in reads
    }
