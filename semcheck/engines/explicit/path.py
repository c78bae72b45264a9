"""The explicit search's path while its reduced graph is one path: no state stored.

From the initial state, as long as every state's stubborn set has one action and no thread
can jump backwards, the states reached form one path, and none of them can be reached
again: without a backward jump every step either moves a thread forward or completes a
pending copy (a copy start adds one or two completions and moves its thread one
instruction, so 3 x the sum of the pcs minus the completions pending grows with every
step), or faults (which adds to the faults the state carries for good, and a state with
more faults is never one with fewer). So a state on the path is never looked up again:
the search keeps only the state it is at and the actions taken, one machine integer each
(a thread's action as the thread, a completion as -1 minus its position among the
state's pending completions, sorted). The ring all-gather's reduced graph is one path of
5N^2 states, every one of which a breadth-first search used to store.

The actions themselves (what a finding's path is made of) are replayed from the initial
state when a finding asks for them: once, up to where it was asked, and carried on from
there for a later finding.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

from semcheck.semantics import Action, EventFires, State, System


class OnePath:
    def __init__(self, system: System, initial: State):
        self.system = system
        self.initial = initial
        self._codes = array("q")
        # the replay so far: the actions decoded and the state after the last of them
        self._decoded: list[Action] = []
        self._at = initial
        # where the path ended at a state with more than one action to take: that state,
        # and its threads that can move
        self.end: State | None = None
        self.ready: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self._codes)

    def append(self, state: State, action: Action) -> None:
        """`action`, taken in `state` (the state at the end of the path)."""
        code = -1 - bisect_left(state.events, action.event) if isinstance(action, EventFires) else action.thread
        self._codes.append(code)

    def actions(self) -> list[Action]:
        """Every action from the initial state to the end of the path."""
        system, codes, decoded = self.system, self._codes, self._decoded
        state = self._at
        for k in range(len(decoded), len(codes)):
            code = codes[k]
            action = system.thread_steps[code] if code >= 0 else EventFires(state.events[-1 - code])
            decoded.append(action)
            state = system.step(state, action)  # hazards never change what happens next
        self._at = state
        return list(decoded)
