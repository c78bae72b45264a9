"""The one definition of behaviour: states, enabled actions and successors of a Protocol.

Shaped like a stateright model: `initial_states()`, `enabled(state)`, `step(state, action)`
(the `Model` protocol in system.py). Engines explore it; `properties.py` judges its states;
nothing else decides what an instruction does. Every rule is stated, with its sources, in docs/semantics.md:

* signal: atomically add `inc` to the target semaphore; never blocks. Without a core
  index the target core is the signaller's own (JAX's TPU interpreter uses core 0 instead;
  see docs/semantics.md, "Choices worth knowing").
* wait: enabled iff `count >= value`; a decrementing wait then subtracts `value`.
* dma_start: schedules a receive-side completion on the target's receive semaphore and,
  for a remote copy, a send-side completion on the issuer's send semaphore. Completions are
  environment events that happen in any order, at any later point, so two copies in flight
  on one semaphore may finish either way round. DMA semaphores count bytes; a REGULAR
  semaphore given to a DMA gains 1 (TPU v6+).
* dma_wait: a decrementing wait for `nbytes` on a local DMA semaphore.
* memory: a copy reads its source from its start until its send side completes (its
  receive side, for a copy without a send semaphore) and writes its destination until its receive side
  completes. A load, store or copy start that overlaps a pending copy's access, one of the
  two a write, is a data race (the two are unordered in some execution). A load or store
  with a device touches that device's instance of the buffer (a GPU `remote_ref` access).
* kernel entry and exit: entering resets the core's scratch and scoped semaphores (a fresh
  allocation per invocation); from the second invocation on, entering first requires them
  to be 0 with no copy of an earlier invocation still landing on them (TPU). A signal or
  copy that reaches a (device, core) before it entered the sender's invocation, or after it
  moved on to a later one, is `remote_before_entry`; barrier and argument semaphores
  outlive kernels and are exempt. A wait on a barrier semaphore that several invocations
  share, passing in invocation i on units added from a later invocation (the barrier
  ledger, `State.ledger`), is `remote_before_entry` at the wait (`rules._early_pass`).
  Something that arrives after the target exited adds to a
  count nobody will wait for again: the end state (or the next entry) reports it as a
  leftover, which is why exit itself needs no check and commutes with everything.
* cut (`ir.Cut`, where lowering stopped): never enabled; the thread stays there for good.
  A state with a thread at its cut is not an end of the program (the rest of that thread is
  unknown), so properties judge no hang or leftover in it; hazards and faults recorded
  before are real, since the thread may simply be slow to go on.

Transitions that detect a hazard (race, early arrival, leftover at exit) record it in the
state, permanently, and never block. Every such check reads only state that the footprints
below declare, so the reduction, which keeps every terminal state, keeps every hazard.

A state is a tuple of immutable parts, so it hashes and compares by value.

The package, a question a file:

* state.py: a state and its parts (counts, completions in flight, accesses, hazards, faults).
* instructions.py: what an instruction names (semaphores, operands, regions, registers).
* tables.py: the protocol's static tables per thread (allocations, instances, registers,
  memory cells, invocations) and the reading of operands and references in a state.
* races.py: which accesses may race, and the race hazards a step records.
* rules.py: one function per instruction kind: execution, waiting, footprint.
* system.py: the `System` and its contract to the engines (`Model`).
* footprints.py, ordering.py, cells.py, instances.py, resource_index.py: the tables the
  partial-order reduction reads; properties.py: the violations judged on states;
  trace.py: a path of the semantics as the report's steps.
"""

from semcheck.ir import apply_op
from semcheck.semantics.footprints import bits
from semcheck.semantics.instances import SemInstance
from semcheck.semantics.rules import event_footprint
from semcheck.semantics.state import (
    BARRIER_PHASE_OVERRUN, DATA_RACE, FAULTED, INVALID_CORE, INVALID_DEVICE, INVALID_REGION, INVALID_SEM_INDEX,
    LEFTOVER_AT_EXIT, PLAIN_RACE, RECV, REMOTE_BEFORE_ENTRY, SEND, Access, Action, Counts, Event, EventFires, Fault,
    Hazard, State, ThreadStep, conflict, dma_increment, must_be_zero_at_exit, overlap,
)
from semcheck.semantics.system import Model, System
from semcheck.semantics.tables import without_gc

__all__ = [
    "BARRIER_PHASE_OVERRUN", "DATA_RACE", "FAULTED", "INVALID_CORE", "INVALID_DEVICE", "INVALID_REGION",
    "INVALID_SEM_INDEX", "LEFTOVER_AT_EXIT", "PLAIN_RACE", "RECV", "REMOTE_BEFORE_ENTRY", "SEND", "Access",
    "Action", "Counts", "Event", "EventFires", "Fault", "Hazard", "Model", "SemInstance", "State", "System",
    "ThreadStep", "apply_op", "bits",
    "conflict", "dma_increment", "event_footprint", "must_be_zero_at_exit", "overlap", "without_gc",
]
