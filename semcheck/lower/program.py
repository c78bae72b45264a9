"""Which captured kernels form one program, and what each hands to the next.

Kernels lowered in one scope (one MLIR module of the script, or one jaxpr of
`semcheck.verify(fn)`) are one program when a semaphore one kernel returns is an operand of
a later one, when they share a `collective_id` (and so its barrier semaphore), or when a
kernel compiled with disable_semaphore_checks=True is followed by one whose scratch
semaphores start with what it leaves (`programs.carried_places`). Within a
program, buffers one kernel returns and a later one takes are handed on too (the
destination of a copy still landing). Kernels that pass only buffers to each other are
still checked one by one: nothing of one kernel's synchronization then reaches the next.
The kernels run in the order JAX lowered them, which is the jaxpr's order (data-flow order
where one feeds the next). A nested `jax.jit` (or closed call) that holds a kernel is
lowered inline while capturing (frontends/capture.py, `_inlined_call`), so its kernels
share the caller's scope and a semaphore followed through the call links them. Kernels in
two shard_maps of one jitted function (a start program and a wait program, each a shard_map)
are linked through the shard_map bodies' boundaries when the value leaves one and enters the
other with the same sharding, so each device takes back its own shard. Separate
top-level calls cannot hand a semaphore on in JAX 0.10.2 (a jitted function cannot return
one: frontends/capture.py, `SEMAPHORE_RESULT`), so there is nothing to link across them.
The composition itself is `semcheck/passes/programs.py`.
"""

from __future__ import annotations

from semcheck import ir
from semcheck.records import record
from semcheck.passes.programs import Handover, carried_places, compose, gpu_program_note


def link_programs(captures: list, lowered: list[list[ir.Protocol]]) -> list[ir.Protocol]:
    """`lowered[k]`: the protocols of `captures[k]` (one per core configuration; empty when
    it failed to lower). The protocols to check, programs in place of their kernels."""
    flows = kernel_flows(captures)
    group = _Groups(len(captures))
    for k, _m, j, i in flows:
        if any(_is_semaphore(p, _port(p.ports.operands, i)) for p in lowered[j]):
            group.join(k, j)
    for j in range(len(captures)):
        for k in range(j):
            if _same_scope(captures[k], captures[j]) and _shared_ids(lowered[k], lowered[j]):
                group.join(k, j)
        before = next((k for k in reversed(range(j)) if _same_scope(captures[k], captures[j])), None)
        if before is not None and _carries_leftovers(lowered[before], lowered[j]):
            group.join(before, j)
    out: list[ir.Protocol] = []
    for members in group.groups():
        if len(members) == 1:
            out.extend(lowered[members[0]])
            continue
        if not all(_tpu(lowered[k]) for k in members):
            out.extend(_alone(members, lowered))
            continue
        out.extend(_programs(members, flows, lowered))
    return out


def _programs(members: list[int], flows, lowered: list[list[ir.Protocol]]) -> list[ir.Protocol]:
    position = {k: n for n, k in enumerate(members)}
    configs = set.intersection(*({p.cores for p in lowered[k]} for k in members))
    out = []
    for cores in sorted(configs):
        kernels = [next(p for p in lowered[k] if p.cores == cores) for k in members]
        handovers = []
        for k, m, j, i in flows:
            if k not in position or j not in position:
                continue
            producer, consumer = kernels[position[k]], kernels[position[j]]
            source, name = _port(producer.ports.results, m), _port(consumer.ports.operands, i)
            if source and name and _is_semaphore(producer, source) == _is_semaphore(consumer, name):
                handovers.append(Handover(position[k], source, position[j], name))
        try:
            out.append(compose(kernels, handovers))
        except ValueError as e:  # kernels of one module on different meshes: each alone
            for p in kernels:
                out.append(_with_note(p, f"not checked as one program with the kernels around it: {e}"))
    return out


def kernel_flows(captures: list) -> list[tuple[int, int, int, int]]:
    """(producer, result, consumer, operand): a result of one kernel that is an operand of a
    later one in the same scope."""
    out = []
    for j, cj in enumerate(captures):
        for k in range(j):
            if not _same_scope(captures[k], cj):
                continue
            results = [_outside_shard_maps(value) for value in captures[k].flow.results]
            for i, node in enumerate(cj.flow.operands):
                outside = _outside_shard_maps(node)
                for m, value in enumerate(captures[k].flow.results):
                    if node is value or _equal(node, value) or _handed_across(outside, results[m]):
                        out.append((k, m, j, i))
    return out


# A shard_map's body, as JAX 0.10.2 lowers it with Shardy (the default partitioner):
# jax/_src/shard_map.py, `_shard_map_lowering_shardy`. Its block arguments are its operands
# (one each, in order) and its sdy.return's operands are its results, each with its sharding
# in `in_shardings` / `out_shardings`.
MANUAL_COMPUTATION = "sdy.manual_computation"


@record(frozen=True)
class _Outside:
    """An MLIR value followed out of the shard_map bodies around it: the value outside them,
    and the sharding it had at each body's boundary, innermost first."""

    values: tuple
    shardings: tuple


def _outside_shard_maps(value) -> _Outside:
    """Where `value` (a kernel's operand or result) is outside the shard_maps around it: an
    operand that is a body's block argument is that body's operand; a result that the body
    returns is the body's result (every one, when it is returned more than once)."""
    from semcheck.jax_compat import jax_internal

    shardings: list = []
    while isinstance(value, jax_internal("mlir_ir").BlockArgument):
        argument = value
        body = argument.owner.owner
        if body.name != MANUAL_COMPUTATION:
            break
        shardings.append(_sharding(body, "in_shardings", argument.arg_number))
        value = body.operands[argument.arg_number]
    if shardings:
        return _Outside((value,), tuple(shardings))
    returned = [use for use in getattr(value, "uses", ()) if use.owner.name == "sdy.return"
                and use.owner.parent.name == MANUAL_COMPUTATION]
    if len(returned) != 1:  # a value no body returns, or returns twice: not followed
        return _Outside((value,), ())
    body, index = returned[0].owner.parent, returned[0].operand_number
    return _Outside((body.results[index],), (_sharding(body, "out_shardings", index),))


def _sharding(body, attribute: str, index: int):
    from semcheck.jax_compat import jax_internal

    return jax_internal("sdy").TensorShardingPerValueAttr(body.attributes[attribute]).shardings[index]


def _handed_across(operand: _Outside, result: _Outside) -> bool:
    """One shard_map returns the value another takes, each device's shard being the one it
    returned: the same value outside, the same sharding at both boundaries. (A different
    sharding would give a device another device's shard, or all of them.)"""
    return (bool(operand.shardings) and bool(result.shardings)
            and _equal(operand.values[0], result.values[0]) and operand.shardings == result.shardings)


def _port(names: tuple[str, ...], index: int) -> str:
    return names[index] if index < len(names) else ""


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # values of different kinds that refuse to compare are not one value
        return False


def _same_scope(a, b) -> bool:
    return a.flow is not None and b.flow is not None and _program(a.flow.scope) is _program(b.flow.scope)


def _program(scope):
    """What a scope's kernels run in: the MLIR module, which every shard_map's body is lowered
    into with a module context of its own (its axis context replaced,
    jax/_src/shard_map.py); a jaxpr (semcheck.verify(fn)) is its own."""
    return getattr(scope, "module", scope)


def _is_semaphore(protocol: ir.Protocol, name: str) -> bool:
    return any(d.name == name for d in protocol.semaphores)


def _shared_ids(a: list[ir.Protocol], b: list[ir.Protocol]) -> bool:
    def ids(ps):
        return {d.collective_id for p in ps for d in p.semaphores
                if d.origin is ir.SemOrigin.BARRIER and d.collective_id is not None}
    return bool(ids(a) & ids(b))


def _carries_leftovers(before: list[ir.Protocol], after: list[ir.Protocol]) -> bool:
    """`after` runs next on every core and starts some scratch semaphore with what `before`
    leaves there (it runs with disable_semaphore_checks=True: programs.carried_places)."""
    return any(p.cores == q.cores and carried_places(p, q) for p in before for q in after)


def _tpu(protocols: list[ir.Protocol]) -> bool:
    return bool(protocols) and all(p.backend is ir.Backend.TPU for p in protocols)


def _alone(members: list[int], lowered: list[list[ir.Protocol]]) -> list[ir.Protocol]:
    """Kernels that pass semaphores to each other but are not all TPU kernels: each alone,
    the GPU ones saying why (programs.GPU_PROGRAM_REASON)."""
    out = []
    for k in members:
        others = list(dict.fromkeys(p.name for j in members if j != k for p in lowered[j]))
        for p in lowered[k]:
            out.append(_with_note(p, gpu_program_note(others)) if p.backend is ir.Backend.GPU else p)
    return out


def _with_note(p: ir.Protocol, note: str) -> ir.Protocol:
    import dataclasses

    return dataclasses.replace(p, notes=p.notes + (note,))


class _Groups:
    """Union-find over kernel indices; groups come out in capture order."""

    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, k: int) -> int:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def join(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> list[list[int]]:
        by_root: dict[int, list[int]] = {}
        for k in range(len(self.parent)):
            by_root.setdefault(self.find(k), []).append(k)
        return list(by_root.values())
