"""Semaphore and buffer instances: one per declaration, device (and core, for core-scoped
ones) and index, numbered declaration by declaration, device-major.

A ring of N devices with one receive semaphore per step has N^2 semaphore instances (a
million at 1024 devices); a `SemInstance` object each would cost about 300 MB. So the table
holds only each declaration's block of ids, and `SemInstances[sid]` makes the instance when
asked (a few hundred are kept: the search asks about the same ones again and again).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterator

from semcheck import ir
from semcheck.ir import Scope
from semcheck.records import record


@record(frozen=True)
class SemInstance:
    decl: ir.SemDecl
    index: int
    device: int
    core: int | None  # None for device-scope allocations
    cores: int = 1  # cores per device; names leave the core out when there is one

    @property
    def label(self) -> str:
        """How a finding's message names it: "recv[1] on device 3", or for a counter the
        lowering made, what it stands for, "the fork into warps of a warp-level core_map
        (warp 1) on device 0"."""
        if self.decl.shown_as:
            return f"{self._shown_as_indexed()} on {ir.thread_name(self.device, self.core, 0, self.cores)}"
        return self.label_as(self.decl.name)

    def label_as(self, name: str) -> str:
        """`label`, with the declaration called `name` (as a later kernel of a program calls it)."""
        idx = f"[{self.index}]" if self.decl.size > 1 else ""
        return f"{name}{idx} on {ir.thread_name(self.device, self.core, 0, self.cores)}"

    @property
    def short(self) -> str:
        return self.short_as(self.decl.name)

    def short_as(self, name: str) -> str:
        """`short`, with the declaration called `name` (as a later kernel of a program calls it)."""
        idx = f"[{self.index}]" if self.decl.size > 1 else ""
        core = f"c{self.core}" if self.core is not None and self.cores > 1 else ""
        return f"{name}{idx}@d{self.device}{core}"

    def shown_to(self, device: int | None, core: int | None) -> str:
        """How a trace step of the thread at `device` and `core` names it: `short`, or, for a
        counter the lowering made (`ir.SemDecl.shown_as`), what it stands for, with its index
        where it has several ("(warp 1)") and its device and core where they are not the
        step's own (a signal sent to a peer)."""
        if not self.decl.shown_as:
            return self.short
        own_core = self.core is None or self.cores == 1 or self.core == core
        if self.device == device and own_core:
            return self._shown_as_indexed()
        return self.label

    def _shown_as_indexed(self) -> str:
        decl = self.decl
        return decl.shown_as + (f" ({decl.index_shown_as or 'index'} {self.index})" if decl.size > 1 else "")


@record(frozen=True)
class BufferInstance:
    decl: ir.BufferDecl
    device: int
    core: int | None  # None for device-scope buffers (HBM), shared by every core
    cores: int = 1

    @property
    def label(self) -> str:
        return f"{self.decl.name} on {ir.thread_name(self.device, self.core, 0, self.cores)}"


_KEPT = 512  # instances made and kept: beyond this the cache starts again


class SemInstances:
    """Reads like the list of every semaphore instance (`len`, `[sid]`, iteration), made
    from each declaration's block of ids when asked."""

    def __init__(self, decls: tuple[ir.SemDecl, ...], devices: int, cores: int):
        self.devices, self.cores = devices, cores
        self.decls: list[ir.SemDecl] = []
        self.bases: list[int] = []  # first id of each declaration's block
        self.per_device: list[int] = []  # ids per device in each block
        size = 0
        for decl in decls:
            per_device = decl.size * (cores if decl.scope is Scope.CORE else 1)
            self.decls.append(decl)
            self.bases.append(size)
            self.per_device.append(per_device)
            size += per_device * devices
        self._size = size
        self._kept: dict[int, SemInstance] = {}

    def __len__(self) -> int:
        return self._size

    def block(self, sid: int) -> int:
        """The index of the declaration whose block holds `sid`."""
        if not 0 <= sid < self._size:
            raise IndexError(sid)
        return bisect_right(self.bases, sid) - 1

    def decl(self, sid: int) -> ir.SemDecl:
        return self.decls[self.block(sid)]

    def device_of(self, sid: int) -> int:
        k = self.block(sid)
        return (sid - self.bases[k]) // self.per_device[k]

    def core_of(self, sid: int) -> int | None:
        """The core of a core-scoped instance; None for a device-scoped one."""
        k = self.block(sid)
        decl = self.decls[k]
        if decl.scope is not Scope.CORE:
            return None
        return (sid - self.bases[k]) % self.per_device[k] // decl.size

    def __getitem__(self, sid: int) -> SemInstance:
        found = self._kept.get(sid)
        if found is None:
            k = self.block(sid)
            decl = self.decls[k]
            device, rest = divmod(sid - self.bases[k], self.per_device[k])
            if decl.scope is Scope.CORE:
                core, index = divmod(rest, decl.size)
                found = SemInstance(decl, index, device, core, self.cores)
            else:
                found = SemInstance(decl, rest, device, None, self.cores)
            if len(self._kept) >= _KEPT:
                self._kept.clear()
            self._kept[sid] = found
        return found

    def __iter__(self) -> Iterator[SemInstance]:
        return (self[sid] for sid in range(self._size))

    def of_decl(self, decl: ir.SemDecl) -> range:
        """The ids of one declaration's instances."""
        for k, mine in enumerate(self.decls):
            if mine is decl:
                return range(self.bases[k], self.bases[k] + self.per_device[k] * self.devices)
        return range(0)
