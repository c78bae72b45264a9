"""An int-keyed multimap in two machine arrays: resource -> the threads (or copy starts)
that may touch it.

A ring of N devices has about 2N^2 resources (semaphore instances and memory cells), each
touched by one to three threads: a dict of tuples costs about 150 bytes a resource (300 MB
at 1024 devices), these arrays 8 bytes a resource and 8 per value listed.
"""

from __future__ import annotations

from array import array
from typing import Callable, Iterable, Iterator


class ResourceIndex:
    """`get(r)`: the values listed under resource r, in the order they were given."""

    def __init__(self, size: int, pairs: Callable[[], Iterable[tuple[int, int]]]):
        """`size`: resources are 0 .. size-1; `pairs`: a function giving every (resource,
        value) pair, called twice (once to count, once to place), the same each time."""
        starts = array("q", bytes(8 * (size + 1)))
        for r, _value in pairs():
            starts[r + 1] += 1
        for r in range(size):
            starts[r + 1] += starts[r]
        values = array("q", bytes(8 * starts[size]))
        filled = array("q", starts[:size])
        for r, value in pairs():
            values[filled[r]] = value
            filled[r] += 1
        self._starts, self._values = starts, values
        self.size = size

    @classmethod
    def of_threads(cls, size: int, per_thread: Iterable[Callable[[], Iterator[int]]]) -> "ResourceIndex":
        """From each thread's distinct resources (a function giving them, per thread): the
        threads of each resource, in thread order."""
        sources = list(per_thread)

        def pairs():
            for t, resources in enumerate(sources):
                for r in resources():
                    yield r, t

        return cls(size, pairs)

    def get(self, r: int) -> array | tuple[()]:
        if not 0 <= r < self.size:
            return ()
        return self._values[self._starts[r]:self._starts[r + 1]]

    def __iter__(self) -> Iterator[tuple[int, array]]:
        """(resource, its values) of every resource with some."""
        starts, values = self._starts, self._values
        for r in range(self.size):
            a, b = starts[r], starts[r + 1]
            if a != b:
                yield r, values[a:b]
