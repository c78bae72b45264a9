"""Which kernels' outputs the capture may compute on the CPU: a proof, from the kernel's
jaxpr, that a chip and JAX's HLO interpreter give the same bits.

The capture cannot run a TPU kernel, so it replaces a kernel's outputs with zeros and
withholds every operand computed from them (frontends/provenance.py). A router's top-k
kernel feeds a MoE kernel's routing tables; with them withheld, every table element is an
input over its type and the check reports windows no routing gives. JAX's HLO interpreter of
a pallas_call (`pallas_call_hlo_interpret`, jax/_src/pallas/hlo_interpreter.py, JAX 0.10.2)
computes the outputs on the CPU, but it fills what the kernel does not write (outputs with
`primitives.uninitialized_value`, INT_MIN or NaN; scratch the same; blocks past an array's
edge padded, `_pad_to_block_dimension`), and it clamps block indices (`_dynamic_slice`),
where a chip holds whatever memory held. Taking those as the script's values called a
kernel gated by such an output safe (tests/test_provenance.py).

So the capture computes a kernel's outputs only where `prove_exact` shows, from the kernel
alone, that every element of every output is written at every grid step from the step's
input blocks, with operations whose result is the same bits on any IEEE backend:

* a TPU pallas_call without a mesh or dynamic grid; every operand blocked in VMEM (the
  default memory space), `Blocked` or squeezed block dimensions, no block transforms;
  scratch only in VMEM;
* scalar-prefetch operands (whole arrays in SMEM) read as inputs only: at static indices
  inside the array (the rule for every ref access below), never stored to, and read by no
  index map. Then no block, and no store's place, depends on their values, so the kernel
  writes the same bits on a chip and in the interpreter for whatever values they hold, and
  the interpreter computes its outputs from the values the program passes it. Those are the
  script's where the program computes them from the script's values: the capture's slice
  (frontends/provenance.py) goes on through a computed kernel to its operands, its scalar
  prefetch included, so an operand computed from an earlier kernel's zeros still withholds
  what it feeds. A store would not last in the interpreter (it drops each step's scalar
  prefetch, `pallas_call_hlo_interpret`, jax/_src/pallas/hlo_interpreter.py) where SMEM
  keeps it on a chip; an index map that reads one names blocks by run-time values;
* every operand's shape a multiple of its block shape (no padded edge block); every index
  map, evaluated at every grid step, inside its array; every output block visited by
  exactly one grid step (so no step's write is overwritten by another's, whatever order or
  core runs the steps);
* every ref access (`get`, `swap`, `addupdate`), at every depth and on inputs too, is at
  static indices inside its block, counted from explicit bounds: the interpreter discharges
  an access to `lax.dynamic_slice` / `dynamic_update_slice`, which wrap a negative start and
  clamp a window to the block, where Mosaic passes the index through and a chip reads or
  writes the memory beside the block;
* the body, walked at its top level in order, writes every element of each output ref by
  stores (`swap`); it reads an output or scratch element only after
  such a store wrote it at this step (a store or read nested in `cond`, `while`, `scan`
  counts nothing and reads only a ref written whole before it), so what a step writes
  depends on its input blocks alone;
* every primitive, at every depth, is on an allow-list with a rule each (`EXACT`):
  comparisons, selects, min and max, integer arithmetic, moves; float arithmetic is not
  (a TPU's default f32 matmul precision and its transcendental approximations are not the
  CPU's), nor `argmax`/`argmin` (`NOT_EXACT`: Mosaic's `tpu.reduce_index` has no tie or NaN
  rule in JAX's source), nor is anything not listed.

Anything else keeps zeros, and `Refusal` says which rule and, for a primitive, which and
where: the kernels fed by it say so in their withheld note. What the proof leaves to the CPU
is stated in the fed kernel's note (`COMPUTED`): floats compared, and NaN and signed zeros
ordered in min and max, as XLA's CPU backend does (it flushes f32 subnormals to zero, as a
TPU is said to; its min and max propagate NaN and order -0 below +0, as Mosaic's
`arith.minimumf`/`maximumf`), neither observed on a chip.
"""

from __future__ import annotations

import enum
import itertools
import math
from typing import TYPE_CHECKING, Callable

from semcheck.jax_compat import JaxInternalMissing, jax_internal
from semcheck.records import record

if TYPE_CHECKING:
    import numpy as np
    from jax.extend.core import Var

# The elements of a ref an access reaches: an int or a slice per dimension, every bound
# explicit and inside the ref's shape (a numpy index of its written-mask).
Region = tuple[int | slice, ...]

# Bounds that keep the script's run short: the interpreter unrolls nothing, but the proof
# walks every grid step's index maps and keeps a mask of each output block.
MAX_STEPS = 4096
MAX_BYTES = 16 << 20
MAX_BLOCK_ELEMENTS = 1 << 20


class Rule(enum.Enum):
    """The rule of the proof a kernel fails (docs/data-evaluation.md, "Operands computed from other kernels")."""

    NOT_TPU = "a TPU pallas_call without a mesh"
    TOO_LARGE = "small (16 MiB of operands and outputs, 4,096 grid steps, 2^20 elements a block)"
    GRID = "a static grid"
    PREFETCH_INDEX_MAP = "no index map reading scalar prefetch"
    MEMORY_SPACE = "every operand blocked in VMEM"
    BLOCK_SHAPE = "Blocked or squeezed block dimensions without transforms"
    PADDED_EDGE = "every shape a multiple of its block"
    INDEX_OUT_OF_RANGE = "every block index inside its array"
    UNVISITED_BLOCK = "every output block visited"
    REVISITED_BLOCK = "every output block visited once"
    INEXACT = "only operations exact on any backend"
    UNLISTED = "only operations on semcheck's list of exact ones"
    DYNAMIC_INDEX = "every ref access at static indices"
    OUTSIDE_BLOCK = "every static index inside its block"
    READ_UNWRITTEN = "no output or scratch read before it is written"
    NOT_WRITTEN_WHOLE = "every output written whole at the top level of the body"
    WRITES_INPUT = "no store to an input block or scalar-prefetch operand"
    ALIASED = "no input aliased to an output"
    NO_INTERPRETER = "JAX's HLO interpreter of pallas_call"


@record(frozen=True)
class Refusal:
    """Why a kernel's outputs are not computed: the rule it fails, and what fails it."""

    rule: Rule
    detail: str  # a clause: "`reduce_sum` on float32 at kernel.py:12 may round differently on a TPU"

    def sentence(self) -> str:
        return f"semcheck computes a kernel's outputs only where it proves them exact, and {self.detail}"


# --- the operands -------------------------------------------------------------------------------


def prove_exact(params: dict, primitive: str) -> Refusal | None:
    """Why the capture may not take JAX's HLO interpreter's outputs of this kernel as a
    chip's; None where it may (the module's docstring lists the rules)."""
    tpu_core = jax_internal("tpu_core")
    compiler_params = params.get("compiler_params")
    if primitive != "pallas_call" or params.get("mesh") is not None \
            or not (compiler_params is None or isinstance(compiler_params, tpu_core.CompilerParams)):
        return Refusal(Rule.NOT_TPU, "it is not a TPU pallas_call without a mesh")
    grid_mapping = params["grid_mapping"]
    grid = grid_mapping.grid
    if grid_mapping.vmapped_dims:
        return Refusal(Rule.GRID, f"its grid {grid} has vmapped dimensions {tuple(grid_mapping.vmapped_dims)} "
                                  "(a vmapped pallas_call)")
    if not all(isinstance(n, int) for n in grid) or grid_mapping.num_dynamic_grid_bounds:
        return Refusal(Rule.GRID, f"its grid {grid} has bounds computed at run time")
    if math.prod(grid) > MAX_STEPS:
        return Refusal(Rule.TOO_LARGE, f"its grid has {math.prod(grid):,} steps (more than {MAX_STEPS:,})")
    if params.get("input_output_aliases"):
        return Refusal(Rule.ALIASED, "it aliases an input to an output (a step may read what another wrote)")
    mappings = grid_mapping.block_mappings
    num_inputs = grid_mapping.num_inputs
    for k, mapping in enumerate(mappings):
        role = _role(k, num_inputs)
        refused = _block_refusal(mapping, role, tpu_core)
        if refused is not None:
            return refused
    prefetch = _prefetch_avals(params["jaxpr"], grid_mapping)
    size = sum(math.prod(a.shape) * a.dtype.itemsize
               for a in (*(m.array_aval for m in mappings), *prefetch))
    if size > MAX_BYTES:
        return Refusal(Rule.TOO_LARGE, f"its operands and outputs hold {size:,} bytes (more than {MAX_BYTES:,})")
    refused = _grid_refusal(grid, mappings, num_inputs)
    if refused is not None:
        return refused
    for aval in grid_mapping.scratch_avals:
        if not _in_vmem(getattr(aval, "memory_space", None), tpu_core):
            return Refusal(Rule.MEMORY_SPACE, f"it has scratch {aval} outside VMEM")
    return _BodyWalk(params["jaxpr"], grid_mapping).prove()


def _prefetch_avals(closed, grid_mapping) -> list:
    """The scalar-prefetch operands' avals: the body's first invars (JAX 0.10.2 orders a TPU
    kernel's refs scalar prefetch, inputs, outputs, scratch)."""
    from semcheck.lower.interpreter import unwrap

    jaxpr, _ = unwrap(closed)
    return [v.aval for v in jaxpr.invars[:grid_mapping.num_index_operands]]


def _role(k: int, num_inputs: int) -> str:
    return f"input {k}" if k < num_inputs else f"output {k - num_inputs}"


def _in_vmem(space, tpu_core) -> bool:
    """The default memory space of a TPU pallas_call's blocks is VMEM."""
    pallas_core = jax_internal("pallas_core")
    return space is None or space in (tpu_core.MemorySpace.VMEM, pallas_core.MemorySpace.DEFAULT)


def _block_refusal(mapping, role: str, tpu_core) -> Refusal | None:
    pallas_core = jax_internal("pallas_core")
    space = getattr(mapping.transformed_block_aval, "memory_space", None)
    if not _in_vmem(space, tpu_core):
        return Refusal(Rule.MEMORY_SPACE, f"its {role} is in {space}, not blocked in VMEM")
    if mapping.transforms or not all(isinstance(d, (pallas_core.Blocked, pallas_core.Squeezed))
                                     for d in mapping.block_shape):
        return Refusal(Rule.BLOCK_SHAPE, f"its {role}'s block {mapping.block_shape} is not plain")
    shape, block = mapping.array_aval.shape, _block_sizes(mapping)
    if any(n % b for n, b in zip(shape, block)):
        return Refusal(Rule.PADDED_EDGE, f"its {role}'s shape {tuple(shape)} is not a multiple of its block "
                                         f"{block} (the edge block is padded)")
    return None


def _block_sizes(mapping) -> tuple[int, ...]:
    return tuple(getattr(d, "block_size", 1) for d in mapping.block_shape)


def _grid_refusal(grid: tuple[int, ...], mappings, num_inputs: int) -> Refusal | None:
    """Every block index inside its array; each output block visited by exactly one step."""
    visits: list[dict[tuple[int, ...], tuple[int, ...]]] = [{} for _ in mappings[num_inputs:]]
    index_maps = [_IndexMap(m.index_map_jaxpr, len(grid)) for m in mappings]
    for k, index_map in enumerate(index_maps):
        if index_map.reads_prefetch:
            return Refusal(Rule.PREFETCH_INDEX_MAP, f"its {_role(k, num_inputs)}'s index map reads a scalar-prefetch "
                                                    "operand (which block a step holds depends on run-time values)")
        # Evaluated on the CPU: exact operations only.
        refused = _jaxpr_refusal(index_map.closed.jaxpr, f" in its {_role(k, num_inputs)}'s index map")
        if refused is not None:
            return refused
    for step in itertools.product(*(range(n) for n in grid)):
        for k, (mapping, index_map) in enumerate(zip(mappings, index_maps)):
            index = index_map(step)
            blocks = tuple(n // b for n, b in zip(mapping.array_aval.shape, _block_sizes(mapping)))
            if not all(0 <= i < n for i, n in zip(index, blocks)):
                return Refusal(Rule.INDEX_OUT_OF_RANGE, f"its {_role(k, num_inputs)}'s index map gives block "
                                                        f"{index} at grid step {step}, outside {blocks} blocks")
            if k >= num_inputs:
                earlier = visits[k - num_inputs].setdefault(index, step)
                if earlier != step:
                    return Refusal(Rule.REVISITED_BLOCK, f"its {_role(k, num_inputs)}'s block {index} is visited by "
                                                         f"grid steps {earlier} and {step}")
    for k, (mapping, seen) in enumerate(zip(mappings[num_inputs:], visits)):
        blocks = tuple(n // b for n, b in zip(mapping.array_aval.shape, _block_sizes(mapping)))
        for index in itertools.product(*(range(n) for n in blocks)):
            if index not in seen:
                return Refusal(Rule.UNVISITED_BLOCK, f"its output {k}'s block {index} is visited by no grid step")
    return None


class _IndexMap:
    """A block's index map at a grid step, as integers."""

    def __init__(self, closed, grid_rank: int) -> None:
        self.closed = closed
        jaxpr = closed.jaxpr
        jax_core = jax_internal("core")
        self.grid_rank = grid_rank
        # Its invars after the grid indices are the scalar-prefetch refs.
        self.reads_prefetch = bool(set(jaxpr.invars[grid_rank:]) & _used_vars(jaxpr))
        # Most index maps return grid indices and literals: read those without evaluating.
        self.direct = not jaxpr.eqns and all(isinstance(v, jax_core.Literal) or v in jaxpr.invars
                                             for v in jaxpr.outvars)

    def __call__(self, step: tuple[int, ...]) -> tuple[int, ...]:
        import numpy as np

        jax_core = jax_internal("core")
        jaxpr = self.closed.jaxpr
        if self.direct:
            where = {v: i for v, i in zip(jaxpr.invars, step)}
            return tuple(int(v.val) if isinstance(v, jax_core.Literal) else where[v] for v in jaxpr.outvars)
        # The scalar-prefetch refs are unused (`reads_prefetch` is refused before): no value.
        unused = (None,) * (len(jaxpr.invars) - self.grid_rank)
        outs = jax_core.eval_jaxpr(jaxpr, self.closed.consts, *(np.int32(i) for i in step), *unused)
        return tuple(int(o) for o in outs)


def _jaxpr_refusal(jaxpr, where: str) -> Refusal | None:
    """The first primitive of an index map, at any depth, that is not exact."""
    from semcheck.lower.jaxprs import subjaxprs

    for eqn in jaxpr.eqns:
        refused = _value_refusal(eqn, where)
        if refused is not None:
            return refused
        for sub in subjaxprs(eqn.params):
            refused = _jaxpr_refusal(sub, where)
            if refused is not None:
                return refused
    return None


def _value_refusal(eqn, where: str) -> Refusal | None:
    """Why a primitive's result may not be the same bits on a TPU as on the CPU; None where
    it is (`EXACT`). `where`: " at kernel.py:12", or which index map."""
    name = eqn.primitive.name
    why_not = NOT_EXACT.get(name)
    if why_not is not None:
        return Refusal(Rule.INEXACT, f"it has `{name}`{where}, {why_not}")
    rule = EXACT.get(name)
    if rule is None:
        return Refusal(Rule.UNLISTED, f"it has `{name}`{where}, which is not on semcheck's list of "
                                      "operations exact on any backend")
    why = rule(eqn)
    if why is not None:
        return Refusal(Rule.INEXACT, f"it has `{name}` on {why}{where}, which may round differently on a TPU")
    return None


# --- the body -----------------------------------------------------------------------------------


class _BodyWalk:
    """The kernel body's equations in order, with a written-mask per output and scratch ref."""

    def __init__(self, closed, grid_mapping) -> None:
        from semcheck.lower.interpreter import unwrap

        self.jaxpr, _ = unwrap(closed)
        num_prefetch = grid_mapping.num_index_operands
        prefetch, invars = self.jaxpr.invars[:num_prefetch], self.jaxpr.invars[num_prefetch:]
        num_in, num_out = grid_mapping.num_inputs, grid_mapping.num_outputs
        self.outputs = list(invars[num_in:num_in + num_out])
        # Every ref of the body, by its invar: what a message calls it. A scalar-prefetch
        # ref is an input: read at static indices, never stored to.
        self.roles: dict[Var, str] = {v: f"scalar prefetch {k}" for k, v in enumerate(prefetch)}
        self.roles.update({v: f"input {k}" for k, v in enumerate(invars[:num_in])})
        self.roles.update({v: f"output {k}" for k, v in enumerate(self.outputs)})
        self.roles.update({v: f"scratch {k}" for k, v in enumerate(invars[num_in + num_out:])})
        self.stored = [*self.outputs, *invars[num_in + num_out:]]  # the refs a step may store to
        # The written-mask of each output and scratch ref (an input ref has none).
        self.masks: dict[Var, np.ndarray] = {}

    def prove(self) -> Refusal | None:
        import numpy as np

        for ref in self.stored:
            role, shape = self.roles[ref], _ref_shape(ref)
            if math.prod(shape) > MAX_BLOCK_ELEMENTS:
                return Refusal(Rule.TOO_LARGE, f"its {role}'s block has {math.prod(shape):,} elements")
            self.masks[ref] = np.zeros(shape, dtype=bool)
        refused = self.walk(self.jaxpr, {v: v for v in self.roles}, nested=False)
        if refused is not None:
            return refused
        for ref in self.outputs:
            mask = self.masks[ref]
            if not mask.all():
                return Refusal(Rule.NOT_WRITTEN_WHOLE, f"its body writes {int(mask.sum()):,} of the {mask.size:,} "
                                                       f"elements of its {self.roles[ref]} block by stores at its top "
                                                       "level (a store under a condition or in a loop counts none)")
        return None

    def walk(self, jaxpr, tracked: dict[Var, Var], *, nested: bool) -> Refusal | None:
        """`tracked`: this jaxpr's vars that are the body's refs -> the body's ref.
        `nested`: inside a cond, loop or call, where stores count nothing."""
        scope = _Scope(tracked, nested, _used_vars(jaxpr))
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            access = REF_ACCESS.get(name)
            if access is not None:
                refused = access(self, eqn, scope)
            elif name in NESTED:
                refused = self.nested(eqn, tracked)
            else:
                refused = self.value(eqn, tracked)
            if refused is not None:
                return refused
        return None

    def value(self, eqn, tracked: dict[Var, Var]) -> Refusal | None:
        refused = _value_refusal(eqn, _at(eqn))
        if refused is not None:
            return refused
        if any(not _is_literal(v) and v in tracked for v in eqn.invars):
            return Refusal(Rule.UNLISTED, f"it passes a ref to `{eqn.primitive.name}`{_at(eqn)}")
        return None

    def nested(self, eqn, tracked: dict[Var, Var]) -> Refusal | None:
        """A cond, loop or call: its stores count nothing, and it reads an output or scratch
        ref only where that ref is written whole before it."""
        for sub, outer in NESTED[eqn.primitive.name](eqn):
            inner = {v: tracked[o] for v, o in zip(sub.invars, outer) if not _is_literal(o) and o in tracked}
            refused = self.walk(sub, inner, nested=True)
            if refused is not None:
                return refused
        return None

    def read(self, eqn, ref: Var, region: Region, scope: _Scope) -> Refusal | None:
        """A read of `region` of an output or scratch `ref`: a nested read needs the whole ref
        written (what a nested store wrote is not counted)."""
        mask = self.masks[ref]
        if mask.all() if scope.nested else mask[region].all():
            return None
        where = " in a condition or loop" if scope.nested else ""
        return Refusal(Rule.READ_UNWRITTEN, f"it reads its {self.roles[ref]}{where}{_at(eqn)} before "
                                            "writing all it reads at this grid step")

    def write(self, ref: Var, region: Region, scope: _Scope) -> None:
        if not scope.nested:
            self.masks[ref][region] = True

    def access(self, eqn, first_index: int, scope: _Scope) -> tuple[Var, Region] | Refusal:
        """The body's ref a get, swap or addupdate reaches and the elements it reaches, every
        index static and inside the ref: JAX's HLO interpreter discharges the access to
        `lax.dynamic_slice` / `dynamic_update_slice`, which wrap a negative start and clamp a
        window to the block, where Mosaic passes the index through unchanged
        (`_index_to_start_size_stride`, jax/_src/pallas/mosaic/lowering.py, JAX 0.10.2) and
        a chip reads or writes the memory beside the block."""
        ref = scope.tracked.get(eqn.invars[0])
        role = self.roles[ref] if ref is not None else "ref"
        region = _static_region(eqn, first_index)
        name = eqn.primitive.name
        if region is None:
            return Refusal(Rule.DYNAMIC_INDEX, f"it has `{name}` on its {role} at an index computed at run "
                                               f"time{_at(eqn)} (JAX's interpreter wraps or clamps it to the block, a "
                                               "chip does not)")
        if isinstance(region, str):
            return Refusal(Rule.OUTSIDE_BLOCK, f"it has `{name}` on its {role} at {region}, outside its block of "
                                               f"shape {_ref_shape(eqn.invars[0])}{_at(eqn)} (JAX's interpreter "
                                               "wraps or clips it to the block, a chip does not)")
        if ref is None:
            return Refusal(Rule.UNLISTED, f"it has `{name}` on a ref that is not one of its operands, outputs or "
                                          f"scratch{_at(eqn)}")
        return ref, region


@record(frozen=True)
class _Scope:
    """One jaxpr being walked: its output and scratch refs, whether it is nested, its used vars."""

    tracked: dict[Var, Var]
    nested: bool
    used: frozenset[Var]


def _ref_shape(ref) -> tuple[int, ...]:
    return tuple(ref.aval.shape)


def _at(eqn) -> str:
    from semcheck import ir
    from semcheck.lower.source import loc_of_traceback

    loc = loc_of_traceback(getattr(eqn.source_info, "traceback", None))
    return f" at {ir.display_path(loc.file)}:{loc.line}" if loc is not None else ""


def _is_literal(v) -> bool:
    return isinstance(v, jax_internal("core").Literal)


def _used_vars(jaxpr) -> frozenset:
    used = {v for eqn in jaxpr.eqns for v in eqn.invars if not _is_literal(v)}
    return frozenset(used | {v for v in jaxpr.outvars if not _is_literal(v)})


def _static_region(eqn, first_index: int) -> Region | str | None:
    """The elements of its ref a get's, swap's or addupdate's indexer reaches, from explicit
    bounds (numpy's slicing would wrap a negative index and clip a window); a str says which
    index lies outside the ref's shape; None: an index computed at run time, or a transform
    that is not one static NDIndexer."""
    import jax

    indexing = jax_internal("state_indexing")
    shape = _ref_shape(eqn.invars[0])
    transforms = jax.tree_util.tree_unflatten(eqn.params["tree"], eqn.invars[first_index:])
    if not transforms:
        return tuple(slice(0, n) for n in shape)  # the whole ref
    if len(transforms) != 1 or not isinstance(transforms[0], indexing.NDIndexer):
        return None
    indices = tuple(transforms[0].indices)
    if len(indices) > len(shape):
        return None
    region: list[int | slice] = []
    for dim, (index, n) in enumerate(zip(indices, shape)):
        if isinstance(index, indexing.Slice):
            start, size, stride = (_static_int(x) for x in (index.start, index.size, index.stride))
            if start is None or size is None or stride is None or stride < 1:
                return None
            if size == 0:
                region.append(slice(0, 0))
                continue
            last = start + (size - 1) * stride
            if start < 0 or last >= n:
                return f"pl.ds({start}, {size}, stride={stride}) in dimension {dim} (elements {start} to {last})"
            region.append(slice(start, last + 1, stride))
        else:
            at = _static_int(index)
            if at is None:
                return None
            if not 0 <= at < n:
                return f"index {at} in dimension {dim}"
            region.append(at)
    region.extend(slice(0, n) for n in shape[len(indices):])
    return tuple(region)


def _static_int(x) -> int | None:
    """A Python or literal integer scalar; None for a var or an array."""
    jax_core = jax_internal("core")
    if isinstance(x, jax_core.Literal):
        x = x.val
    if isinstance(x, jax_core.Var) or getattr(x, "shape", ()) != ():
        return None
    try:
        return int(x)
    except (TypeError, ValueError):
        return None


# --- ref accesses: one rule each ----------------------------------------------------------------


def _get(walk: _BodyWalk, eqn, scope: _Scope) -> Refusal | None:
    access = walk.access(eqn, 1, scope)
    if isinstance(access, Refusal):
        return access
    ref, region = access
    if ref not in walk.masks:
        return None  # an input block: the step's input values
    return walk.read(eqn, ref, region, scope)


def _stored(walk: _BodyWalk, eqn, scope: _Scope) -> tuple[Var, Region] | Refusal:
    """The output or scratch ref a swap or addupdate stores to, and where; an input block
    or scalar-prefetch operand may not be stored to."""
    access = walk.access(eqn, 2, scope)
    if isinstance(access, Refusal):
        return access
    if access[0] not in walk.masks:
        return Refusal(Rule.WRITES_INPUT, f"it stores to its {walk.roles[access[0]]}{_at(eqn)}")
    return access


def _swap(walk: _BodyWalk, eqn, scope: _Scope) -> Refusal | None:
    """A store; where its result is used, also a read of the old value."""
    access = _stored(walk, eqn, scope)
    if isinstance(access, Refusal):
        return access
    ref, region = access
    if eqn.outvars[0] in scope.used:
        refused = walk.read(eqn, ref, region, scope)
        if refused is not None:
            return refused
    walk.write(ref, region, scope)
    return None


def _addupdate(walk: _BodyWalk, eqn, scope: _Scope) -> Refusal | None:
    """`ref[...] += x`: a read of the old value, then a store."""
    access = _stored(walk, eqn, scope)
    if isinstance(access, Refusal):
        return access
    ref, region = access
    why = _integers_only(eqn)
    if why is not None:
        return Refusal(Rule.INEXACT, f"it has `addupdate` on {why}{_at(eqn)}, which may round differently on a TPU")
    return walk.read(eqn, ref, region, scope)


REF_ACCESS: dict[str, Callable[[_BodyWalk, object, _Scope], Refusal | None]] = {
    "get": _get,
    "swap": _swap,
    "addupdate": _addupdate,
}


# --- nested jaxprs: each one's jaxprs and the outer vars its invars receive -----------------------


def _cond_jaxprs(eqn) -> list:
    return [(branch.jaxpr, eqn.invars[1:]) for branch in eqn.params["branches"]]


def _call_jaxprs(eqn) -> list:
    from semcheck.lower.interpreter import unwrap

    jaxpr = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
    return [(unwrap(jaxpr)[0], eqn.invars)]


def _while_jaxprs(eqn) -> list:
    n_cond, n_body = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    carry = eqn.invars[n_cond + n_body:]
    return [(eqn.params["cond_jaxpr"].jaxpr, [*eqn.invars[:n_cond], *carry]),
            (eqn.params["body_jaxpr"].jaxpr, eqn.invars[n_cond:])]


NESTED: dict[str, Callable[[object], list]] = {
    "cond": _cond_jaxprs,
    "while": _while_jaxprs,
    "scan": _call_jaxprs,
    "pjit": _call_jaxprs,
    "jit": _call_jaxprs,
    "closed_call": _call_jaxprs,
    "core_call": _call_jaxprs,
    "custom_jvp_call": _call_jaxprs,
}


# --- values: which primitives give the same bits on any backend, one rule each ---------------------


def _is_float(dtype) -> bool:
    import numpy as np

    return dtype is not None and bool(jax_internal("dtypes").issubdtype(dtype, np.inexact))


def _any_dtype(eqn) -> str | None:
    """Exact for every dtype: a comparison, a selection, a move of bits, an order statistic."""
    return None


def _integers_only(eqn) -> str | None:
    """Exact for integers and booleans (wrapping arithmetic); floats round."""
    for v in (*eqn.invars, *eqn.outvars):
        dtype = getattr(v.aval, "dtype", None)
        if dtype is not None and _is_float(dtype):
            return str(dtype)
    return None


def _boolean_selector(eqn) -> str | None:
    """`jnp.where`: exact; an integer case index out of range is not defined alike everywhere."""
    import numpy as np

    which = eqn.invars[0].aval.dtype
    return None if which == np.dtype(bool) else f"a {which} case index"


def _convert(eqn) -> str | None:
    """Exact between integers and booleans (wrapping), from a boolean, from a float to the same
    float or a wider one (bfloat16 or float16 to float32); not float16 to bfloat16, nor to or
    from an integer (rounding, saturation and NaN differ)."""
    import numpy as np

    source, target = eqn.invars[0].aval.dtype, np.dtype(eqn.params["new_dtype"])
    if not _is_float(source) and not _is_float(target):
        return None
    if _is_float(source) and _is_float(target) \
            and (source == target or np.dtype(target).itemsize > np.dtype(source).itemsize):
        return None
    if source == np.dtype(bool):
        return None
    return f"{source} to {np.dtype(target)}"


EXACT: dict[str, Callable[[object], str | None]] = {
    **dict.fromkeys(("eq", "ne", "lt", "le", "gt", "ge", "max", "min", "reduce_max", "reduce_min", "clamp"),
                    _any_dtype),
    "select_n": _boolean_selector,
    **dict.fromkeys(("iota", "broadcast_in_dim", "reshape", "slice", "concatenate", "transpose", "squeeze",
                     "expand_dims", "rev", "copy", "copy_p", "program_id", "num_programs", "pad"), _any_dtype),
    # Not shifts (Mosaic's `arith.shli` by the width or more is poison, XLA's is defined), nor
    # abs, sign, div, rem (edge cases at INT_MIN and 0 that backends need not share).
    **dict.fromkeys(("add", "sub", "mul", "neg", "and", "or", "xor", "not", "population_count", "clz",
                     "reduce_sum", "reduce_and", "reduce_or", "reduce_xor", "integer_pow", "square"), _integers_only),
    "convert_element_type": _convert,
}


# Primitives whose TPU result no JAX source defines alike with the CPU's, whatever the dtype:
# why, completing "it has `argmax` at kernel.py:12, ...".
_REDUCE_INDEX = ("which Mosaic lowers to `tpu.reduce_index` (`_reduce_index_helper`, "
                 "jax/_src/pallas/mosaic/lowering.py, JAX 0.10.2), implemented in the TPU runtime: no JAX source "
                 "gives its rule for ties or NaN, where XLA's CPU backend takes the first of ties and NaN as the ")
NOT_EXACT: dict[str, str] = {
    "argmax": _REDUCE_INDEX + "largest",
    "argmin": _REDUCE_INDEX + "smallest",
}


def interpreter():
    """JAX's HLO interpreter of pallas_call, or a Refusal where this JAX has none."""
    try:
        return jax_internal("pallas_hlo_interpreter")
    except JaxInternalMissing:
        return Refusal(Rule.NO_INTERPRETER, "this JAX has no HLO interpreter of pallas_call "
                                            "(jax._src.pallas.hlo_interpreter)")
