"""Evaluates a jaxpr for one thread: each eqn goes to its rule in the registry, or is folded.

Folding uses JAX itself: an eqn whose inputs are all known is bound on concrete values
(`primitive.bind` under `ensure_compile_time_eval`), so every integer primitive, dtype and
rounding rule is JAX's own and nothing is reimplemented. Results are cached per
(eqn, inputs), since SPMD threads fold the same arithmetic again and again. Large results
(data arrays) are not folded: they become opaque.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from semcheck.errors import LoadError
from semcheck.lower.context import ThreadLowering
from semcheck.lower.jaxprs import has_subjaxprs, subjaxprs  # noqa: F401 (subjaxprs: for the frontends)
from semcheck.lower.registry import lookup
from semcheck.lower.values import Known, Opaque, RefValue, RunTimeElements, Sym, Value
from semcheck.jax_compat import jax_internal
from semcheck.version import ISSUES_URL

# Results with more elements than this are data, not protocol: they are never folded.
FOLD_LIMIT = 4096

# Primitives that only move their first operand's elements (the others, if any, are indices):
# bound on the elements' positions instead of their values, JAX says which element lands
# where, so an element known only at run time can be picked out of an array
# (`count_ref[...][0]` is `slice` then `squeeze`). Not gather or pad: their fill and padding
# values would pass for positions.
MOVES_ELEMENTS = frozenset(
    "slice squeeze reshape expand_dims broadcast_in_dim transpose rev dynamic_slice copy copy_p".split()
)

# Primitives with effects that cannot affect synchronization or memory (prints, hints,
# PRNG state). Their outputs are opaque data.
HARMLESS_EFFECTFUL = frozenset(
    "debug_callback debug_print delay prng_seed prng_random_bits trace_start trace_stop "
    "trace_value add_dependency".split()
)

# The prints among them, with what a kernel writes to make them: dropped, and said so in the
# result's notes, as a reader of a kernel that prints may wonder whether semcheck saw it.
# (inside a Pallas kernel, jax.debug.print traces to `debug_print` as pl.debug_print does)
PRINTS = {"debug_print": "pl.debug_print or jax.debug.print", "debug_callback": "jax.debug.callback"}


def print_note(name: str) -> str:
    return (f"`{name}` ({PRINTS[name]}) in the kernel is not modelled: semcheck drops it; it has no effect "
            "on synchronization (it takes no semaphore or buffer ref and gives the kernel no value)")


def unwrap(jaxpr_like):
    """(open jaxpr, consts) of a Jaxpr or ClosedJaxpr (0.10.2 keeps them apart)."""
    inner = getattr(jaxpr_like, "jaxpr", None)
    if inner is not None and inner is not jaxpr_like:
        return inner, list(getattr(jaxpr_like, "consts", ()))
    return jaxpr_like, list(getattr(jaxpr_like, "consts", ()) or ())


def const_value(c) -> Value:
    try:
        return Known(np.asarray(c))
    except Exception:  # a ref or another non-array constant
        return Opaque("a constant captured by the kernel")


def read_atom(env: dict, atom) -> Value:
    jax_core = jax_internal("core")

    if isinstance(atom, jax_core.Literal):
        value = atom.val
        dtype = getattr(atom.aval, "dtype", None)
        try:
            return Known(np.asarray(value, dtype=dtype))
        except TypeError:
            return Known(np.asarray(value))
    return env[atom]


def eval_jaxpr(t: ThreadLowering, jaxpr, consts: Sequence[Value], args: Sequence[Value]) -> list[Value]:
    jax_core = jax_internal("core")

    t.kernel.folds.scan(jaxpr)
    env: dict = {}
    for var, value in zip(jaxpr.constvars, consts):
        env[var] = value
    if len(args) != len(jaxpr.invars):
        raise AssertionError(f"jaxpr takes {len(jaxpr.invars)} inputs, got {len(args)}")
    for var, value in zip(jaxpr.invars, args):
        env[var] = value
    for eqn in jaxpr.eqns:
        inputs = [read_atom(env, a) for a in eqn.invars]
        outer = t.context_loc
        t.context_loc = t.loc(eqn)
        try:
            outputs = dispatch(t, eqn, inputs)
        finally:
            t.context_loc = outer
        if len(outputs) != len(eqn.outvars):
            raise AssertionError(f"rule for {eqn.primitive.name} returned {len(outputs)} values")
        for var, value in zip(eqn.outvars, outputs):
            if not isinstance(var, jax_core.DropVar):
                env[var] = value
    return [read_atom(env, a) for a in jaxpr.outvars]


def eval_closed(t: ThreadLowering, closed, args: list[Value]) -> list[Value]:
    jaxpr, consts = unwrap(closed)
    return eval_jaxpr(t, jaxpr, [const_value(c) for c in consts], args)


def dispatch(t: ThreadLowering, eqn, inputs: list[Value]) -> list[Value]:
    rule = lookup(eqn.primitive.name, t.kernel.backend)
    if rule is not None:
        return rule(t, eqn, inputs)
    return generic(t, eqn, inputs)


def effect_names(effects) -> str:
    """JAX's effects by their class names ("MXUEffect"): most effect objects have no repr
    of their own, and `<... object at 0x7f...>` tells a reader nothing."""
    return ", ".join(sorted({type(e).__name__ for e in effects}))


def generic(t: ThreadLowering, eqn, inputs: list[Value]) -> list[Value]:
    """A primitive with no rule: fold it, or treat its results as opaque data."""
    name = eqn.primitive.name
    if any(isinstance(x, RefValue) for x in inputs):
        raise t.error(
            eqn,
            "semcheck has no model of this primitive, and it takes a semaphore or buffer ref",
            hint="semcheck models semaphores, DMAs, loads and stores; please report this "
            f"primitive at {ISSUES_URL} so a rule can be added",
        )
    if has_subjaxprs(eqn.params):
        raise t.error(
            eqn,
            "semcheck has no model of this higher-order primitive (it runs a sub-jaxpr)",
            hint="use pl.when / lax.cond / fori_loop / while_loop / jit, which semcheck "
            f"models, or report this primitive at {ISSUES_URL}",
        )
    if eqn.effects and name not in HARMLESS_EFFECTFUL:
        raise t.error(
            eqn,
            f"semcheck has no model of this effectful primitive (effects: {effect_names(eqn.effects)})",
            hint=f"please report this primitive at {ISSUES_URL} so a rule can be added",
        )
    if any(isinstance(x, RunTimeElements) for x in inputs):
        return [pick(t, eqn, inputs)]
    known = [x for x in inputs if isinstance(x, Known)]
    if len(known) == len(inputs) and name not in HARMLESS_EFFECTFUL:
        folded = fold(t, eqn, known)
        if isinstance(folded, list):
            return folded
        if isinstance(folded, str):
            why = f"the result of `{name}` at {t.loc(eqn)}, which JAX could not evaluate on CPU ({folded})"
            return [Opaque(why) for _ in eqn.outvars]
    if name in PRINTS:
        t.kernel.note(print_note(name))
    why = opaque_reason(t, eqn, inputs)
    return [Opaque(why) for _ in eqn.outvars]


def pick(t: ThreadLowering, eqn, inputs: list[Value]) -> Value:
    """A primitive on an array holding elements known only at run time: one that only moves
    elements is bound on their positions (`MOVES_ELEMENTS`), and the elements it picks are
    its result; anything else loses them, and says so, naming itself and its line."""
    name = eqn.primitive.name
    held = next(x for x in inputs if isinstance(x, RunTimeElements))
    lost = (f"the result of `{name}` at {t.loc(eqn)} on {held.why}: semcheck follows an element known only "
            f"at run time through indexing that picks it out ({', '.join(sorted(MOVES_ELEMENTS))}), "
            f"not through `{name}`")
    data, *indices = inputs
    known_indices = [x for x in indices if isinstance(x, Known)]
    if name not in MOVES_ELEMENTS or len(eqn.outvars) != 1 or data is not held or len(known_indices) != len(indices):
        return Opaque(lost)
    positions = np.arange(held.value.size, dtype=np.int32).reshape(held.value.shape)
    moved = fold(t, eqn, [Known(positions), *known_indices])
    if not isinstance(moved, list) or not isinstance(moved[0], Known):
        return Opaque(lost)
    return held.pick(moved[0].value, lost)


def opaque_reason(t: ThreadLowering, eqn, inputs: list[Value]) -> str:
    for x in inputs:
        if isinstance(x, Opaque):
            return x.why
    if any(isinstance(x, Sym) for x in inputs):
        return (
            f"`{eqn.primitive.name}` at {t.loc(eqn)} of a value known only at run time "
            "(semcheck tracks add, sub, mul, div, rem, min, max, comparisons and select on those)"
        )
    return f"the result of `{eqn.primitive.name}` at {t.loc(eqn)}"


def fold(t: ThreadLowering, eqn, inputs: list[Known]) -> list[Value] | str | None:
    """The eqn's results computed by JAX; why JAX could not (a str); None when they are
    too large to be protocol values."""
    if any(_size(v.aval) > FOLD_LIMIT for v in eqn.outvars):
        return None
    key = (id(eqn), tuple((x.value.dtype.str, x.value.shape, x.value.tobytes()) for x in inputs))
    cache = t.kernel.fold_cache
    if key not in cache:
        batched = t.kernel.folds.evaluate(eqn, inputs)
        cache[key] = _bind(eqn, inputs) if batched is None else batched
    result = cache[key]
    sources = frozenset().union(*(x.sources for x in inputs))
    if isinstance(result, list) and sources:  # the cache holds values; provenance is per use
        result = [Known(r.value, sources) for r in result]
    return result


def _bind(eqn, inputs: list[Known]) -> list[Known] | str:
    """The eqn's primitive bound on concrete inputs: JAX computes it (or says why not)."""
    import jax

    try:
        with jax.ensure_compile_time_eval():
            out = eqn.primitive.bind(*[x.value for x in inputs], **eqn.params)
        outs = out if eqn.primitive.multiple_results else [out]
        return [Known(np.asarray(o)) for o in outs]
    except Exception as e:  # JAX's own refusal, reported where the value is needed
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[0] if text else ''}"


def _size(aval) -> int:
    shape = getattr(aval, "shape", ())
    try:
        return math.prod(int(d) for d in shape)
    except TypeError:
        return FOLD_LIMIT + 1


def operand(t: ThreadLowering, eqn, value: Value, what: str):
    """An IR operand (int or expression over registers) for a scalar that decides part of
    the protocol; an error naming `what` when semcheck cannot know it."""
    if isinstance(value, Known):
        if value.value.size != 1:
            raise t.error(eqn, f"{what} must be a scalar, got shape {value.value.shape}")
        t.used(eqn, value, what)
        return int(value.value.reshape(()))
    if isinstance(value, Sym):
        return value.op
    if isinstance(value, Opaque):
        raise LoadError(
            f"{eqn.primitive.name}: {what} depends on {value.why}, which semcheck cannot know "
            "when it builds the protocol",
            t.loc(eqn),
            hint="semcheck needs semaphore indices, device ids, signal and wait amounts and "
            "DMA sizes to follow from axis_index, program_id, loop counters, semaphore_read "
            "values, or buffer contents it can evaluate (the operands of a kernel the script "
            "runs, and what the kernel stores; see docs/data-evaluation.md)",
        )
    raise t.error(eqn, f"{what} is a ref, not a value")
