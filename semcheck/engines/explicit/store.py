"""The explicit search's visited states, kept packed.

A state's program counters and registers are one Python int per thread (a pointer each, 8
bytes, in a tuple built anew by every step); here they are kept as machine arrays: 2 bytes
per program counter, 8 per register value. Counts and pending completions are already
sparse and stay as they are. Packing is exact, not hash compaction: a packed state unpacks
to an equal state, and two states share a position only if they are equal, so nothing is
omitted (no collision argument is needed). A value that does not fit its array (a
register past 64 bits, a program longer than 32,000 instructions) keeps its tuple.
"""

from __future__ import annotations

from array import array
from itertools import chain

from semcheck.semantics import State, System


class StateStore:
    """Positions of visited states, looked up by a key state (the state itself, or its
    orbit's representative under a symmetry), each holding the state reached."""

    def __init__(self, system: System):
        longest = max((len(body) for body in system.bodies), default=0)
        self._pc_code = "h" if longest < 32_000 else "q"
        self._sizes = tuple(len(r) for r in system.registers)
        self._no_registers = tuple(() for _ in self._sizes)
        self._index: dict[tuple, int] = {}
        self._packed: list[tuple] = []

    def pack(self, state: State) -> tuple:
        pcs = _ints(self._pc_code, state.pcs)
        regs = _ints("q", chain.from_iterable(state.regs)) if any(self._sizes) else b""
        return (pcs, regs, *state[2:])

    def unpack(self, packed: tuple) -> State:
        pcs, regs = packed[0], packed[1]
        if isinstance(pcs, bytes):
            values = array(self._pc_code)
            values.frombytes(pcs)
            pcs = tuple(values)
        if not regs:
            regs = self._no_registers
        elif isinstance(regs, bytes):
            values = array("q")
            values.frombytes(regs)
            flat, regs, at = values.tolist(), [], 0
            for size in self._sizes:
                regs.append(tuple(flat[at:at + size]))
                at += size
            regs = tuple(regs)
        else:
            flat, rebuilt, at = list(regs), [], 0
            for size in self._sizes:
                rebuilt.append(tuple(flat[at:at + size]))
                at += size
            regs = tuple(rebuilt)
        return State(pcs, regs, *packed[2:])

    def find(self, key: tuple) -> int | None:
        """The position of a packed key, if stored."""
        return self._index.get(key)

    def add(self, key: tuple, state: State, key_state: State) -> int:
        """Store `state` under the packed `key` (of `key_state`); its position."""
        position = len(self._packed)
        self._index[key] = position
        self._packed.append(key if state is key_state else self.pack(state))
        return position

    def holds(self, position: int, state: State | tuple) -> bool:
        """Whether the state stored at `position` is `state` (or its packed form)."""
        packed = state if isinstance(state, tuple) and not isinstance(state, State) else self.pack(state)
        return self._packed[position] == packed

    def __getitem__(self, position: int) -> State:
        return self.unpack(self._packed[position])

    def __len__(self) -> int:
        return len(self._packed)


def _ints(code: str, values) -> bytes | tuple:
    values = tuple(values)
    try:
        return array(code, values).tobytes()
    except OverflowError:
        return values
