"""Memory cells: the partial-order reduction's unit of memory dependency.

One cell per distinct region an instruction names with constant starts, per buffer
instance, numbered in the order instructions first name them; then one "anywhere" cell per
instance for regions whose starts are known only at run time. `near(c)` is every cell whose
region may overlap c's, so accesses to disjoint halves of one slot commute while
overlapping ones do not.

A ring all-gather of N devices names N slots of its output on each of N devices: N^2 cells
(a million at 1024 devices). They are kept as one small array per buffer instance, indexed
by the region's number among its declaration's distinct regions (a slot is the same region
on every device), and which regions overlap is worked out once per declaration, not per
instance; a cell's near set is made when asked.
"""

from __future__ import annotations

from array import array
from typing import Iterable

from semcheck import ir

Key = tuple[tuple[int, ...], tuple[int, ...]]  # a region's constant (starts, sizes), full rank


class MemoryCells:
    """Build with `name` for every (buffer instance, region key) in instruction order, then
    `finish`."""

    def __init__(self, instance_decls: list[int], decls: list[ir.BufferDecl], first_instance: list[int]):
        """`instance_decls[bid]`: the index (into `decls`) of instance bid's declaration;
        `first_instance[k]`: the first instance id of declaration k."""
        self._decl_of = instance_decls
        self._decls = decls
        self._first = first_instance
        self._keys: list[dict[Key, int]] = [{} for _ in decls]  # per declaration: region key -> number
        self._key_list: list[list[Key]] = [[] for _ in decls]
        # per buffer instance: region number -> cell (-1: not named on this instance)
        self._rows: list[array] = [array("i") for _ in instance_decls]
        self._count = 0
        self._cell_instance = array("i")  # cell -> its buffer instance
        self._cell_key = array("i")  # cell -> its region number (-1: the anywhere cell)
        self._overlaps: list[list[tuple[int, ...]]] = []
        self.anywhere_base = 0
        self.lifecycle_base = 0

    # -- building --

    def name(self, bid: int, key: Key | None) -> None:
        """Instance bid's region `key` is named by an instruction (None: its starts are known
        only at run time, which its anywhere cell stands for)."""
        if key is None:
            return
        decl = self._decl_of[bid]
        keys = self._keys[decl]
        number = keys.get(key)
        if number is None:
            number = keys[key] = len(keys)
            self._key_list[decl].append(key)
        row = self._rows[bid]
        if number >= len(row):
            row.extend([-1] * (number + 1 - len(row)))
        if row[number] < 0:
            row[number] = self._count
            self._cell_instance.append(bid)
            self._cell_key.append(number)
            self._count += 1

    def finish(self) -> int:
        """Number the anywhere cells and work out which regions overlap; the first id after
        the buffer cells (where lifecycle cells start)."""
        self.anywhere_base = self._count
        for bid in range(len(self._rows)):
            self._cell_instance.append(bid)
            self._cell_key.append(-1)
        self._count += len(self._rows)
        self._overlaps = [overlapping_keys(keys) for keys in self._key_list]
        self.lifecycle_base = self._count
        return self._count

    # -- questions --

    def cell_of(self, bid: int, key: Key | None) -> int | None:
        if key is None:
            return None
        number = self._keys[self._decl_of[bid]].get(key)
        row = self._rows[bid]
        if number is None or number >= len(row) or row[number] < 0:
            return None
        return row[number]

    def anywhere(self, bid: int) -> int:
        return self.anywhere_base + bid

    def is_anywhere(self, cell: int) -> bool:
        return self.anywhere_base <= cell < self.lifecycle_base

    def near(self, cell: int) -> frozenset[int]:
        """Every cell whose region may overlap `cell`'s, itself included (a lifecycle cell:
        itself)."""
        if cell >= self.lifecycle_base:
            return frozenset((cell,))
        bid, number = self._cell_instance[cell], self._cell_key[cell]
        row = self._rows[bid]
        if number < 0:  # anywhere: every cell of the instance
            return frozenset([c for c in row if c >= 0] + [cell])
        overlapping = self._overlaps[self._decl_of[bid]][number]
        return frozenset([row[k] for k in overlapping if k < len(row) and row[k] >= 0] + [self.anywhere(bid)])

    def near_of(self, cells: Iterable[int]) -> frozenset[int]:
        near: set[int] = set()
        for cell in cells:
            near |= self.near(cell)
        return frozenset(near)

    def instance_of(self, cell: int) -> int:
        return self._cell_instance[cell]


def _keys_overlap(a: Key, b: Key) -> bool:
    """Whether two regions of one buffer share an element (`semantics.overlap`)."""
    (a_starts, a_sizes), (b_starts, b_sizes) = a, b
    if 0 in a_sizes or 0 in b_sizes:
        return False
    if len(a_starts) != len(b_starts):
        return True  # shapes disagree: cannot tell, assume the worst
    return all(sa < sb + zb and sb < sa + za for sa, za, sb, zb in zip(a_starts, a_sizes, b_starts, b_sizes))


def overlapping_keys(keys: list[Key]) -> list[tuple[int, ...]]:
    """For each region of one declaration, the numbers of the regions that overlap it,
    itself included. Regions of one rank are swept along one dimension, comparing only
    those whose extents in it meet, so the disjoint slots of a collective's buffer cost
    n log n, not n^2; two regions of different ranks always may overlap (`_keys_overlap`)
    unless one is empty."""
    found: list[set[int]] = [{k} for k in range(len(keys))]
    by_rank: dict[int, list[int]] = {}
    for k, (starts, _sizes) in enumerate(keys):
        by_rank.setdefault(len(starts), []).append(k)
    for group in by_rank.values():
        _sweep(keys, group, found)
    groups = list(by_rank.values())
    for i, group in enumerate(groups):
        for other_group in groups[i + 1:]:
            for k in group:
                for other in other_group:
                    if _keys_overlap(keys[k], keys[other]):
                        found[k].add(other)
                        found[other].add(k)
    return [tuple(sorted(cells)) for cells in found]


def _sweep(keys: list[Key], group: list[int], found: list[set[int]]) -> None:
    """Record the overlaps among `group`, regions of one rank, sweeping the dimension in
    which they start at the most places: tiles of one output that all span its rows (JAX's
    GPU all-reduce test: 2,048) are told apart by their columns."""
    rank = len(keys[group[0]][0])
    d = max(range(rank), key=lambda d: (len({keys[k][0][d] for k in group}), -d), default=0)
    order = sorted(group, key=lambda k: keys[k][0][d:d + 1])
    for i, k in enumerate(order):
        starts, sizes = keys[k]
        end = starts[d] + sizes[d] if rank else None  # regions of rank 0 (whole ones) all meet
        for other in order[i + 1:]:
            if end is not None and keys[other][0][d] >= end:
                break  # sorted by start in dim d: no later region meets this one there
            if _keys_overlap(keys[k], keys[other]):
                found[k].add(other)
                found[other].add(k)
