"""The names reports give a kernel's refs: the ones its author wrote.

JAX names a traced function's arguments by its signature, so a kernel written
`def kernel(*args)` has its refs named `args[0]`, `args[1]`, ... (and one called through a
wrapper's `*refs`, as `plgpu.kernel` calls its body, `refs[0]`, ...). A kernel author cannot map
`args[13]` back to their code; the kernel usually says which ref it is, though, by unpacking
its arguments into locals at its top (`x_ref, o_ref, sem = args`, `q_ref = args[3]`,
`(a, b), rest = args[:2], args[2:]`) or by passing them on to a function with named
parameters (`body(seq_idx, *args)`). This module reads that from the kernel's source with
`ast` and gives each such ref the local's name; a ref the source does not name keeps JAX's,
with its group of the call where the caller knows it (`args[13] (scratch)`).
"""

from __future__ import annotations

import ast
import linecache
import re
import sys

from semcheck.parsing import parse_python
from semcheck import ir
from semcheck.lower.source import is_user_file, kernel_function, library_api

# How JAX names an argument that came in through a `*name` parameter.
_FLATTENED = re.compile(r"^(?P<vararg>\w+)\[(?P<index>\d+)\]$")
# How many calls that pass the arguments on (`body(*args)`) are followed.
_MAX_FORWARDS = 4


def ref_names(jaxpr, default: str, at: ir.Loc | None = None, bound: int | None = None,
              groups: list[str] | None = None) -> list[str]:
    """One name per invar of `jaxpr` (a kernel body or a run_scoped body): JAX's name, with
    a flattened one (`args[3]`) replaced by the local the kernel's source binds it to;
    `f"{default}{k}"` where JAX has none. The source is the function defined at `at`, or the
    one the jaxpr says it traced. JAX may have traced a `functools.partial` of it: `bound`
    says how many positional arguments that bound (None: not known), as JAX's names count
    only those left. A flattened name the source does not replace says its invar's group
    (`args[13] (scratch)`), where `groups` gives one per invar."""
    count = len(jaxpr.invars)
    names = list(getattr(jaxpr.debug_info, "arg_names", None) or ())
    if len(names) != count:
        names = [""] * count
    if any(_FLATTENED.match(n) for n in names):
        source_names = _distinct(_source_names(jaxpr, names, at, bound), names)
        names = [source_names.get(k) or (f"{n} ({groups[k]})" if groups and _FLATTENED.match(n) else n)
                 for k, n in enumerate(names)]
    return [n or f"{default}{k}" for k, n in enumerate(names)]


def helpers_allocations_shown_as(eqn, jaxpr, names: list[str], said: list[str | None], loc: ir.Loc) -> list[str]:
    """What a report calls each semaphore or barrier (`ir.SemDecl.shown_as`) that the
    run_scoped `eqn` (of body `jaxpr`) allocates where a helper of JAX's binds it on the
    kernel's behalf for a body of its own (the DMA semaphore of `pltpu.sync_copy`, the barrier
    of `plgpu.emit_pipeline`), given JAX's `names` of the allocations and what each is in
    words (`said`: "DMA semaphore", "barriers"; None for memory): JAX names them after the
    helper's parameters (`sem`), which the kernel has nowhere, so they go by the call the
    author wrote, at the author's line. Empty for memory, for the author's own run_scoped,
    and for one whose body is the author's (`plgpu.kernel` allocates the kernel's scratch so,
    which the kernel's parameters name)."""
    api = library_api(eqn.source_info.traceback)
    _name, body = kernel_function(getattr(jaxpr, "debug_info", None))
    if api is None or body is None or is_user_file(body.file):
        return [""] * len(names)
    where = f"`{api}` at {loc.line_text()}"
    if sum(what is not None for what in said) == 1:  # the helper's one semaphore
        return ["" if what is None else f"the {what} of {where}" for what in said]
    return ["" if what is None else f"`{name}` of {where}" for name, what in zip(names, said)]


def assigned_name(at: ir.Loc, call: str, column: int | None = None) -> str | None:
    """The local that the statement at `at` binds the result of a call of `call` to: `sem`
    for `sem = pl.get_global(...)`, and, given the call's `column`, `b` for the second call of
    `a, b = pl.get_global(...), pl.get_global(...)`. A ref a primitive makes inside the kernel
    (no argument of it) has no name in the jaxpr; its line says what the author calls it.
    None where the line is not one such assignment to one plain name."""
    module = _module(at.file)
    if module is None:
        return None
    for node in ast.walk(module):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.lineno <= at.line <= (node.end_lineno or node.lineno):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) != 1 or node.value is None:
                continue
            for target, value in _pairs(targets[0], node.value):
                if (isinstance(target, ast.Name) and target.id != "_" and isinstance(value, ast.Call)
                        and _called_name(value.func) == call
                        and (value is node.value or _starts_at(value, at.line, column))):
                    return target.id
    return None


def call_on_line(at: ir.Loc, call: str, column: int | None) -> tuple[int, int] | None:
    """Which of the calls of `call` on line `at.line` the one starting at `column` is, from
    1, and how many there are; None where that is not known."""
    module = _module(at.file)
    if module is None or column is None:
        return None
    starts = sorted(node.col_offset for node in ast.walk(module) if isinstance(node, ast.Call)
                    and node.lineno == at.line and _called_name(node.func) == call)
    return (starts.index(column) + 1, len(starts)) if column in starts else None


def _pairs(target: ast.expr, value: ast.expr) -> list[tuple[ast.expr, ast.expr]]:
    """(target, value) of an assignment, and of each element where a tuple of as many
    values is unpacked (`a, b = x, y`)."""
    pairs = [(target, value)]
    if (isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List)
            and len(target.elts) == len(value.elts) and not any(isinstance(e, ast.Starred) for e in target.elts)):
        for t, v in zip(target.elts, value.elts):
            pairs.extend(_pairs(t, v))
    return pairs


def _starts_at(node: ast.expr, line: int, column: int | None) -> bool:
    return column is not None and (node.lineno, node.col_offset) == (line, column)


def _called_name(func: ast.expr) -> str | None:
    """`get_global` for `pl.get_global` or `get_global`."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _distinct(source_names: dict[int, str], names: list[str]) -> dict[int, str]:
    """`source_names` without a name the source gives two refs (a local rebound: `ref =
    args[0]` ... `ref = args[2]`) or one that another ref already has: refs are told apart
    by name, so two refs under one name would be one buffer or one semaphore to the
    check. Those keep JAX's names."""
    taken = [source_names.get(k, n) for k, n in enumerate(names)]
    return {k: name for k, name in source_names.items() if taken.count(name) == 1}


def _source_names(jaxpr, names: list[str], at: ir.Loc | None, bound: int | None) -> dict[int, str]:
    """invar index -> the name the source gives it, for the flattened names."""
    _name, traced = kernel_function(getattr(jaxpr, "debug_info", None))
    at = at or traced
    module = _module(at.file) if at is not None else None
    fn = _function_at(module, at.line) if module is not None and at is not None else None
    if fn is None or module is None or at is None:
        return {}
    positional = _positional(fn)
    flattened = [_FLATTENED.match(n) for n in names]
    if traced is not None and (traced.file, traced.line) != (at.file, at.line):
        # JAX traced a wrapper that calls the function as `fn(*V)` (plgpu.kernel): every
        # name is `V[i]`, the function's i-th argument.
        if not all(flattened) or (fn.args.vararg is None and len(positional) < len(names)):
            return {}
        first = 0
    else:
        # JAX traced the function (or a partial of it): its named parameters left, then
        # `V[i]` of its own `*V`, the element after those the partial bound.
        left = [n for n, m in zip(names, flattened) if not m]
        if bound is None and (left or not positional):
            # Named parameters left say how many the partial bound. With none named at all,
            # a `def kernel(*args)` is taken as traced itself (a partial binding refs into
            # `*args` would shift them; Pallas kernels bind their options by keyword).
            bound = len(positional) - len(left)
        if fn.args.vararg is None or bound is None or left != positional[bound:]:
            return {}  # not the function JAX traced, or how many a partial bound is not known
        first = max(bound, len(positional))
    source = _Source(module)
    found = {}
    for k, match in enumerate(flattened):
        if match:
            local = source.argument_name(fn, first + int(match.group("index")))
            if local is not None:
                found[k] = local
    return found


def _module(file: str) -> ast.Module | None:
    text = "".join(linecache.getlines(file))
    return _parse(file, text) if text else None


_PARSED: dict[tuple[str, str], ast.Module | None] = {}


def _parse(file: str, text: str) -> ast.Module | None:
    key = (file, text)
    if key not in _PARSED:
        try:
            _PARSED[key] = parse_python(text, file)
        except (SyntaxError, ValueError):
            _PARSED[key] = None
    return _PARSED[key]


def _function_at(module: ast.Module, line: int) -> ast.FunctionDef | None:
    """The function defined at `line` (its `def`, or its first decorator, where Python says a
    decorated function's code starts)."""
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef):
            if line in [node.lineno] + [d.lineno for d in node.decorator_list]:
                return node
    return None


def _positional(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.posonlyargs + fn.args.args]


# The arguments a `*V` parameter holds, and the runs of them a local stands for (`rest =
# V[2:]`), are ranges of argument positions. How many there are is never known: the index
# in JAX's `V[i]` counts every element of V, those JAX leaves out of the jaxpr too (None, an
# empty pytree: flash_attention's absent inputs), so V may go on past its last ref. A run
# open at its end stops at _OPEN, and nothing is counted from the end (`V[-1]`, `*a, b = V`).
_OPEN = sys.maxsize


class _Source:
    """One module's functions, read for the names of their arguments."""

    def __init__(self, module: ast.Module):
        self.functions: dict[str, list[ast.FunctionDef]] = {}
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef):
                self.functions.setdefault(node.name, []).append(node)

    def argument_name(self, fn: ast.FunctionDef, position: int, depth: int = 0) -> str | None:
        """The name `fn` gives its positional argument at `position`: its parameter's, or the
        local its `*V` element is unpacked into, or the parameter of the function it passes
        `*V` on to."""
        positional = _positional(fn)
        if position < len(positional):
            return positional[position]
        if fn.args.vararg is None:
            return None
        element = position - len(positional)
        unpacked = _unpacked(fn, fn.args.vararg.arg)
        if element in unpacked.names:
            return unpacked.names[element]
        if depth >= _MAX_FORWARDS:
            return None
        return self._forwarded(fn, unpacked.views, element, depth)

    def _forwarded(self, fn: ast.FunctionDef, views: dict[str, range], element: int, depth: int) -> str | None:
        """The name a call `g(a, b, *V)` in `fn` gives `element` of the arguments, when every
        such call (and every function `g` may be) says the same."""
        answers = set()
        for call in ast.walk(fn):
            if not isinstance(call, ast.Call):
                continue
            position = _place_in_call(call, views, element)
            if position is None:
                continue
            for callee in self._callees(fn, call.func):
                answers.add(self.argument_name(callee, position, depth + 1))
        return answers.pop() if len(answers) == 1 else None

    def _callees(self, fn: ast.FunctionDef, func: ast.expr) -> list[ast.FunctionDef]:
        """The functions of this module a call's `func` may be: the one defined under its
        name, or, for a local bound to such functions (`kernel = a` in one branch, `kernel = b`
        in the other), each of them."""
        if not isinstance(func, ast.Name):
            return []
        bound = [
            node.value for node in ast.walk(fn)
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == func.id for t in node.targets)
        ]
        if not bound:
            defined = self.functions.get(func.id, [])
            return defined if len(defined) == 1 else []
        callees = []
        for value in bound:
            if not isinstance(value, ast.Name) or len(self.functions.get(value.id, [])) != 1:
                return []
            callees.extend(self.functions[value.id])
        return callees


def _place_in_call(call: ast.Call, views: dict[str, range], element: int) -> int | None:
    """The position of `element` among the arguments of a call that passes on a run of
    them (`*V`) after plain positional arguments only."""
    for before, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            if not isinstance(arg.value, ast.Name) or element not in views.get(arg.value.id, ()):
                return None
            return before + views[arg.value.id].index(element)
    return None


class _Unpacked:
    def __init__(self, vararg: str):
        # element -> the first local it is bound to
        self.names: dict[int, str] = {}
        # local -> the run of elements it stands for: `V` itself, `rest = V[2:]`
        self.views: dict[str, range] = {vararg: range(_OPEN)}


def _unpacked(fn: ast.FunctionDef, vararg: str) -> _Unpacked:
    """Which elements of `*vararg` the statements at the top of `fn` bind to locals, read up
    to its first statement that is no assignment."""
    out = _Unpacked(vararg)
    for statement in fn.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # the docstring
        if not isinstance(statement, ast.Assign):
            break
        value = _value(statement.value, out.views)
        for target in statement.targets:
            _bind(target, value, out)
    return out


# What an expression is, in terms of the arguments: an element (int), a run of them
# (range), a tuple of such, or None when it is anything else.
_Value = int | range | tuple | None


def _value(node: ast.expr, views: dict[str, range]) -> _Value:
    if isinstance(node, ast.Name):
        return views.get(node.id)
    if isinstance(node, ast.Tuple):
        return tuple(_value(e, views) for e in node.elts)
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in views):
        return None
    view, key = views[node.value.id], node.slice
    if isinstance(key, ast.Slice):
        lower, upper = _index(key.lower), _index(key.upper)
        if key.step is not None or lower is False or upper is False:
            return None
        return view[slice(lower, upper)]
    index = _index(key)
    return view[index] if isinstance(index, int) and index < len(view) else None


def _index(node: ast.expr | None) -> int | None | bool:
    """A non-negative int index or bound, None where a bound is left out, False otherwise
    (a negative one counts from an end that is not known)."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 0:
        return node.value
    return False


def _bind(target: ast.expr, value: _Value, out: _Unpacked) -> None:
    if isinstance(target, ast.Name):
        out.views.pop(target.id, None)
        if isinstance(value, int) and target.id != "_":  # `_` names what is thrown away
            out.names.setdefault(value, target.id)
        elif isinstance(value, range):
            out.views[target.id] = value
        return
    if not isinstance(target, ast.Tuple | ast.List):
        return
    starred = [k for k, t in enumerate(target.elts) if isinstance(t, ast.Starred)]
    if isinstance(value, tuple) and not starred and len(value) == len(target.elts):
        for t, v in zip(target.elts, value):
            _bind(t, v, out)
        return
    if not isinstance(value, range):
        return _forget(target, out)
    # A run unpacked from its front: a starred target last takes what is left; anything
    # after a starred one counts from the end.
    last = starred[0] if starred else len(target.elts)
    for t, v in zip(target.elts[:last], value):
        _bind(t, v, out)
    if starred and last == len(target.elts) - 1:
        _bind(target.elts[last].value, value[last:], out)  # type: ignore[attr-defined]
    else:
        _forget(ast.Tuple(target.elts[last:]), out)


def _forget(target: ast.expr, out: _Unpacked) -> None:
    """A target bound to something else: its names no longer stand for arguments."""
    for node in ast.walk(target):
        if isinstance(node, ast.Name):
            out.views.pop(node.id, None)
