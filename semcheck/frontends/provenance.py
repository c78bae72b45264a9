"""Where each captured kernel's operand values come from, and on which devices semcheck may
use them as the script's own.

TPU kernels cannot run on a CPU, so the capture replaces every kernel's outputs with zeros
(frontends/capture.py, `_zeros`), except a TPU kernel proved to write every element of
every output from its inputs with exact operations (lower/exact_outputs.py), whose outputs
JAX's HLO interpreter computes (`_computed_outputs`): its outputs are values, not zeros, and
withhold nothing. An operand computed from zeros is not what the script would pass on a
chip, so its value must not decide a verdict. Which operands those are is decided per
(device, operand):

* Within one jitted program, the capture hook sees a kernel's operands as MLIR values of
  the program being lowered. Their backward slice through the program (`trace_operands`,
  run once the program is complete) says whether an operand is computed from an earlier
  kernel's zero outputs (then it is withheld on every device), from the program's own
  arguments or a host callback's result (values from outside the program), or from neither
  (constants, iotas, device ids: always the script's own). The slice follows each value's
  defining op to its operands; a loop or conditional also to what decides which iteration
  or branch produced it (the loop condition, the branch index), and so does the kernel's
  own place inside one; a region's block argument to the operands of the op that holds the
  region (and a loop's yielded value); a block argument of the main function is a program
  argument, one of another function the operands of its `func.call` sites.
* The kernel's own outputs, carried round a loop back into it, cannot reach its first call
  on a device, the call whose values the capture keeps (frontends/operands.py), where no
  call of the kernel on any device comes before it (`earlier_calls`): where what decides,
  inside the outermost loop around the kernel, whether and when it runs (the branch index of
  each conditional around it, the condition of each inner loop) is the same on every device
  and uses no kernel's output, every device calls it first at the same point of the
  program. Such an operand is the script's own at the first call (`own_carried`: a note says
  that later calls receive the kernel's own output, which the check does not cover);
  otherwise (a conditional decided by data or a device id, a loop of data-dependent length
  inside, a function called from several places) it is withheld.
* Across programs: a value from outside the program can be an earlier kernel's zeros that
  the script carried over (through numpy or otherwise) only if some kernel ran before the
  program's run began: frontends/operands.py records that at each kernel's first run on each
  device (`KernelCapture.ran_before`), having made each run of a program with semcheck's
  callbacks run alone. Kernels that ran earlier in the same run cannot have fed its
  arguments.

Where the walk cannot follow a value (a block argument of a function nothing calls with
`func.call`), the operand is withheld: a value wrongly taken as the script's could be an
earlier kernel's zeros, while a withheld one is only checked over more values (a
scalar-prefetch element over its type) or is an error that says so.
"""

from __future__ import annotations

from semcheck.records import record


@record(frozen=True)
class OperandOrigin:
    """What one operand's value is computed from, as far as it can matter: earlier kernels of
    the same program (whose outputs the capture replaced with zeros), values the program
    receives from outside (its arguments, a host callback's result), or something the walk
    could not follow."""

    kernels: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()
    unresolved: str | None = None
    own: bool = False  # the kernel's own outputs, carried round a loop back into it
    per_device: str | None = None  # an op whose value can differ between devices (a device id, a collective)
    # Earlier kernels whose outputs it is computed from, which the capture computed rather
    # than replaced with zeros (KernelCapture.computed): they withhold nothing.
    computed: tuple[str, ...] = ()

    def feeding(self) -> tuple[str, ...]:
        """The kernels whose outputs it is computed from, this one's own earlier call included."""
        return (*self.kernels, *((OWN,) if self.own else ()))


OWN = "this kernel's own earlier call"
ZEROS = "semcheck's capture replaces kernel outputs with zeros"

# Ops whose results can differ between devices although their operands do not.
_PER_DEVICE_OPS = frozenset({"partition_id", "replica_id", "all_gather", "all_reduce", "all_to_all",
                             "collective_permute", "collective_broadcast", "reduce_scatter", "infeed", "recv",
                             "rng"})

# Custom calls that only annotate how a value is laid out across devices: the value passes.
_LAYOUT_TARGETS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
                             "MoveToHost", "MoveToDevice", "annotate_device_placement", "LayoutConstraint"})


def kernel_label(capture) -> str:
    """The kernel as a note names it: its name and the line that called it."""
    from semcheck import ir
    from semcheck.lower.source import kernel_function

    params = capture.params
    jaxpr = params.get("jaxpr") or (params.get("jaxprs") or [None])[0]
    name = params.get("name") or kernel_function(getattr(jaxpr, "debug_info", None))[0] or capture.primitive
    loc = capture.call_loc
    return f"{name} (called at {ir.display_path(loc.file)}:{loc.line})" if loc is not None else name


# --- the walk ---------------------------------------------------------------------------------


def trace_operands(captures: list) -> None:
    """Set each capture's `operand_origins` from the program it was lowered in, and for each
    operand computed from one earlier kernel's outputs, how it is placed from one of them
    (`placed`, frontends/placing.py). A capture whose operands are not MLIR values (one
    found in a jaxpr) keeps none: its values are then all withheld (`decide_withheld`)."""
    import os

    from semcheck.frontends.placing import place_operand

    walks: dict[int, _ModuleWalk] = {}
    for k, capture in enumerate(captures):
        scope = capture.flow.scope if capture.flow is not None else None
        module = getattr(scope, "module", None)
        if module is None:
            continue
        walk = walks.setdefault(id(scope), _ModuleWalk(module))
        for m, value in enumerate(capture.flow.results):
            if capture.computed:
                walk.computed.setdefault(value, kernel_label(capture))
            else:
                walk.add_output(value, k, m, kernel_label(capture))
    for capture in captures:
        found = walks.get(id(capture.flow.scope)) if capture.flow is not None else None
        if found is None:
            continue
        try:
            capture.operand_origins = found.origins(capture.flow.operands, capture.flow.results)
            capture.runs_once = found.runs_once(capture.flow.results)
            if any(origin.own for origin in capture.operand_origins):
                capture.earlier_calls = found.earlier_calls(capture.flow.results)
            capture.placed = {i: place_operand(operand, found.outputs)
                              for i, (operand, origin) in enumerate(zip(capture.flow.operands, capture.operand_origins))
                              if len(origin.kernels) == 1 and not origin.own}
        except Exception:  # a program semcheck cannot walk: every operand is withheld
            if os.environ.get("SEMCHECK_DEBUG"):
                raise
            capture.operand_origins = ()
            capture.placed = {}


class _Slice:
    """One backward slice being gathered."""

    def __init__(self, values: list):
        self.stack = list(values)
        self.kernels: dict[str, None] = {}
        self.arguments: set[int] = set()  # of the main function
        self.outside: dict[str, None] = {}  # other values from outside the program
        self.unresolved: list[str] = []
        self.own = False
        self.per_device: str | None = None
        self.computed: dict[str, None] = {}

    def origin(self, program: str) -> OperandOrigin:
        args = sorted(self.arguments)
        outside = tuple(self.outside)
        if args:
            listed = ", ".join(map(str, args[:-1])) + f" and {args[-1]}" if len(args) > 1 else str(args[0])
            outside = (f"argument{'s' if len(args) > 1 else ''} {listed} of {program}", *outside)
        return OperandOrigin(tuple(self.kernels), outside, self.unresolved[0] if self.unresolved else None,
                             self.own, self.per_device, tuple(self.computed))


class _ModuleWalk:
    """Backward slices through one MLIR module; `outputs` maps each kernel's zero outputs to
    the kernel's place in the capture order and the output's index (`labels`: each place's
    kernel as said), `computed` the outputs the capture computed (the slice goes on through
    the interpreter's ops to the kernel's operands)."""

    def __init__(self, module):
        self.module = module
        self.outputs: dict = {}  # a kernel's zero output -> (its place in the capture order, output index)
        self.labels: dict[int, str] = {}
        self.computed: dict = {}
        self._calls: dict[str, list] | None = None
        self._functions: dict[str, object] | None = None
        self.name = _symbol(module.operation) or "the jitted program"

    def add_output(self, value, place: int, output: int, label: str) -> None:
        """`value` is output `output` of the kernel at `place` in the capture order (the first
        call that returns it, where one program calls a kernel twice)."""
        self.outputs.setdefault(value, (place, output))
        self.labels.setdefault(place, label)

    def origins(self, operands, results) -> tuple[OperandOrigin, ...]:
        control = self._control(results)
        own = set(results)
        return tuple(self._origin([node, *control], own) for node in operands)

    def _origin(self, values: list, own: set) -> OperandOrigin:
        found = _Slice(values)
        seen: set = set()
        expanded: set = set()
        while found.stack:
            value = found.stack.pop()
            if value in seen:
                continue
            seen.add(value)
            if value in own:  # the kernel's own outputs, carried round a loop back into it
                found.own = True
                continue
            source = self.outputs.get(value)
            if source is not None:
                label = self.labels[source[0]]
                found.kernels.setdefault(label, None)
                continue
            computed = self.computed.get(value)
            if computed is not None:
                found.computed.setdefault(computed, None)
            owner = value.owner
            if _is_block(owner):
                self._block_argument(value, owner.owner.operation, found)
            else:
                self._result(value, owner.operation, found, expanded)
        return found.origin(self.name)

    def _block_argument(self, value, op, found: _Slice) -> None:
        index = value.arg_number
        if op.name == "func.func":
            name = _symbol(op)
            if name == "main":
                found.arguments.add(index)
                return
            calls = self._call_sites().get(name or "", [])
            if not calls:
                found.unresolved.append(f"an argument of the function @{name}, which no func.call in {self.name} calls")
            found.stack.extend(call.operands[index] for call in calls)
            return
        if op.name == "stablehlo.while":  # the value entering the loop, or the one the body yields
            found.stack.append(op.operands[index])
            _yielded(op.regions[1], index, found)
            return
        if op.name == "sdy.manual_computation":
            found.stack.append(op.operands[index])
            return
        # Another op with regions (reduce, sort, scatter, ...): its region's arguments are
        # elements of its operands.
        found.stack.extend(op.operands)

    def _result(self, value, op, found: _Slice, expanded: set) -> None:
        name, index = op.name, value.result_number
        if name == "func.call":
            callee = self._function(_callee(op))
            if callee is None:
                found.unresolved.append(f"the result of a call of @{_callee(op)}, a function not in {self.name}")
                return
            for ret in _returns(callee):
                found.stack.append(ret.operands[index])
            return
        if name == "stablehlo.while":
            found.stack.append(op.operands[index])
            _yielded(op.regions[1], index, found)
            found.stack.extend(_nested_operands(op.regions[0]))  # the condition decides which iteration's value
            return
        if name in ("stablehlo.case", "stablehlo.if"):
            found.stack.extend(op.operands)  # the branch index (or predicate) decides which branch's value
            for region in op.regions:
                _yielded(region, index, found)
            return
        if name == "sdy.manual_computation":
            _yielded(op.regions[0], index, found)
            return
        if name == "stablehlo.custom_call" and _target(op) not in _LAYOUT_TARGETS:
            found.outside.setdefault(f"the result of the custom call {_target(op)!r} (a host callback's, for one)", None)
        if found.per_device is None and name.rpartition(".")[2] in _PER_DEVICE_OPS:
            found.per_device = name
        found.stack.extend(op.operands)
        if op.regions and op not in expanded:  # reduce, sort, scatter, ...: their bodies too
            expanded.add(op)
            for region in op.regions:
                found.stack.extend(_nested_operands(region))

    def _control(self, results) -> list:
        """What decides whether, and in which iteration, the kernel whose outputs are
        `results` runs: the conditions of the loops and the indices of the branches around
        it (up to the main function, through the call sites of a function it is in)."""
        if not results:
            return []
        out: list = []
        pending = [results[0].owner.operation]
        seen: set = set()
        while pending:
            parent = pending.pop().parent
            if parent is None or parent in seen:
                continue
            seen.add(parent)
            if parent.name == "stablehlo.while":
                out.extend(_nested_operands(parent.regions[0]))
            elif parent.name in ("stablehlo.case", "stablehlo.if"):
                out.extend(parent.operands)
            elif parent.name == "func.func":
                name = _symbol(parent)
                if name != "main":
                    pending.extend(self._call_sites().get(name or "", []))
                continue
            pending.append(parent)
        return out

    def earlier_calls(self, results) -> str | None:
        """Why a device's first call of the kernel whose outputs are `results` may come after
        a call of it (on that device or another) whose outputs can reach it; None where none
        can. A kernel is called again only by the loops around it. Where whatever decides,
        inside the outermost of them, whether and when the kernel runs (the branch index of
        each conditional and the condition of each inner loop around it) uses no kernel's
        output and is the same on every device, every device reaches the kernel's first call
        at the same point of the program, before which no call of it ran anywhere. The
        outermost loop's own condition may be anything: it only decides whether the loop
        goes on. A kernel in a function with several `func.call` sites is called from each,
        in an order the walk does not know."""
        if not results:
            return None
        around: list = []  # the loops and conditionals around the kernel, innermost first
        op = results[0].owner.operation
        while (parent := op.parent) is not None:
            if parent.name == "func.func":
                name = _symbol(parent)
                if name == "main":
                    break
                sites = self._call_sites().get(name or "", [])
                if len(sites) != 1:
                    return f"it is in the function @{name}, which {len(sites)} func.call sites in {self.name} call"
                op = sites[0]
                continue
            if parent.name in ("stablehlo.while", "stablehlo.case", "stablehlo.if"):
                around.append(parent)
            op = parent
        loops = [k for k, construct in enumerate(around) if construct.name == "stablehlo.while"]
        for construct in around[:loops[-1]] if loops else ():
            loop = construct.name == "stablehlo.while"
            varies = _varies(self._origin(_nested_operands(construct.regions[0]) if loop else list(construct.operands),
                                          set(results)))
            if varies is not None:
                what = "the condition of a loop around it" if loop else "the branch index of a conditional around it"
                return f"{what}, inside the outermost loop, depends on {varies}"
        return None

    def runs_once(self, results) -> str | None:
        """Why the kernel whose outputs are `results` may not run exactly once in each run
        of the program (None: it runs once): a loop or conditional around it, or a function
        holding it that is called from more or fewer than one place. Then what a later
        kernel receives from it need not be what its first call wrote
        (lower/produced.py)."""
        if not results:
            return "it has no results to follow"
        op = results[0].owner.operation
        while (parent := op.parent) is not None:
            if parent.name == "func.func":
                name = _symbol(parent)
                if name == "main":
                    return None
                sites = self._call_sites().get(name or "", [])
                if len(sites) != 1:
                    return f"it is in the function @{name}, which {len(sites)} func.call sites in {self.name} call"
                op = sites[0]
                continue
            if parent.name in ("stablehlo.while", "stablehlo.case", "stablehlo.if"):
                return f"it is inside a {parent.name.split('.')[-1]} of the program"
            op = parent
        return "semcheck could not follow the program up to its main function"

    def _call_sites(self) -> dict[str, list]:
        if self._calls is None:
            self._calls = {}
            for op in _all_ops(self.module.body):
                if op.name == "func.call":
                    self._calls.setdefault(_callee(op), []).append(op)
        return self._calls

    def _function(self, name: str):
        if self._functions is None:
            self._functions = {}
            for op in self.module.body.operations:
                op = op.operation
                if op.name == "func.func":
                    self._functions[_symbol(op) or ""] = op
        return self._functions.get(name)


_TERMINATORS = frozenset({"stablehlo.return", "sdy.return", "func.return"})


def _varies(origin: OperandOrigin) -> str | None:
    """What in `origin` may differ between devices or be a kernel's output (None: nothing)."""
    if origin.feeding():
        return f"the outputs of {_names(origin.feeding())}"
    if origin.outside:
        return origin.outside[0]
    if origin.per_device is not None:
        return f"{origin.per_device}, whose value differs between devices"
    return origin.unresolved and f"a value semcheck could not follow ({origin.unresolved})"


def _yielded(region, index: int, found: _Slice) -> None:
    """The value a region yields at `index` (onto the slice), or why it cannot be known."""
    ops = region.blocks[0].operations if len(region.blocks) else []
    last = ops[len(ops) - 1].operation if len(ops) else None
    if last is None or last.name not in _TERMINATORS or index >= len(last.operands):
        found.unresolved.append("a region that is not complete (a program whose lowering did not finish)")
        return
    found.stack.append(last.operands[index])


def _is_block(owner) -> bool:
    from semcheck.jax_compat import jax_internal

    return isinstance(owner, jax_internal("mlir_ir").Block)


def _symbol(op) -> str | None:
    try:
        return op.attributes["sym_name"].value
    except (KeyError, AttributeError):
        return None


def _callee(op) -> str:
    return op.attributes["callee"].value


def _target(op) -> str:
    try:
        return op.attributes["call_target_name"].value
    except (KeyError, AttributeError):
        return ""


def _returns(function) -> list:
    return [op for op in _all_ops(function.regions[0]) if op.name == "func.return"]


def _nested_operands(region) -> list:
    return [value for op in _all_ops(region) for value in op.operands]


def _all_ops(container) -> list:
    """Every operation in a region or block, nested ones included."""
    blocks = list(container.blocks) if hasattr(container, "blocks") else [container]
    out = []
    while blocks:
        block = blocks.pop()
        for op in block.operations:
            op = op.operation
            out.append(op)
            for region in op.regions:
                blocks.extend(region.blocks)
    return out


# --- the decision -----------------------------------------------------------------------------


def decide_withheld(captures: list) -> None:
    """Set each capture's `withheld` (device -> operand index -> why its value there is not
    the script's own), from its operands' origins (`trace_operands`) and what ran before it on
    each device (frontends/operands.py), and its `own_carried`: the operands whose value is
    the script's only at the first call (later calls receive the kernel's own output). Called
    once the script's runs are over and every program it lowered is complete."""
    trace_operands(captures)
    not_computed = {kernel_label(c): c.not_computed for c in captures if c.not_computed is not None}
    for capture in captures:
        capture.withheld = {}
        for device, values in capture.operand_values.items():
            why = {k: reason for k in values
                   if (reason := withheld_reason(capture, k, capture.ran_before.get(device), not_computed)) is not None}
            if why:
                capture.withheld[device] = why
        capture.own_carried = tuple(k for k, origin in enumerate(capture.operand_origins)
                                    if origin.own and any(k in values and k not in capture.withheld.get(d, {})
                                                          for d, values in capture.operand_values.items()))


def withheld_reason(capture, index: int, before: str | None, not_computed: dict | None = None) -> str | None:
    """Why operand `index` of `capture` on a device is not used (None: it is the script's own
    value there, at the kernel's first call on the device). `before`: what ran before the
    program's run began on that device; `not_computed`: kernel label -> why the capture did
    not compute its outputs (lower/exact_outputs.py)."""
    origins = capture.operand_origins
    if index >= len(origins):  # never walked: it may be anything, an earlier kernel's zeros included
        return f"semcheck did not follow where it comes from in the program, so it may be an earlier kernel's output, and {ZEROS}"
    origin = origins[index]
    if origin.kernels:
        why = [f"; for {label}, {refusal.sentence()}" for label in origin.kernels
               if (refusal := (not_computed or {}).get(label)) is not None]
        return f"it is computed from the outputs of {_names(origin.feeding())}, and {ZEROS}{''.join(why[:2])}"
    if origin.own and capture.earlier_calls is not None:
        return (f"it is computed from the outputs of {OWN}, and {ZEROS}; its first call on a device may come after "
                f"another call of it, since {capture.earlier_calls}")
    if origin.unresolved is not None:
        return (f"semcheck could not follow where it comes from ({origin.unresolved}), so it may be an "
                f"earlier kernel's output, and {ZEROS}")
    if origin.outside and before is not None:
        return f"it comes from {_names(origin.outside)}, and {before}"
    return None


def _names(items: tuple[str, ...]) -> str:
    if len(items) <= 2:
        return " and ".join(items)
    return f"{', '.join(items[:2])} and {len(items) - 2} more"
