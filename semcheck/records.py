"""`record`: `dataclasses.dataclass` without compiling a method at import.

`dataclasses` writes the source text of every method it adds (`__init__`, `__repr__`,
`__eq__`, `__hash__`, a frozen class's `__setattr__` and `__delattr__`) and has CPython parse
and compile it when the class is defined: about 0.4 ms of CPU a class on Python 3.11, which
for the 85 classes a model file's run defines was 43% of the instructions of its start-up
(benchmarks/startup.py, issue 28). `record` lets `dataclasses` collect the fields (so
`dataclasses.fields`, `replace`, `asdict` and `is_dataclass` work as ever) and generate
nothing, then installs methods made of closures over the class's field names, which are
created in microseconds and behave as the generated ones do: the same fields compared,
hashed and shown, `dataclasses.FrozenInstanceError` on assignment to a frozen record, the
same defaults and default factories, `__post_init__` called last, and `inspect.signature`
(help(), an editor) naming the fields as `dataclass` would.

What it takes is what semcheck uses: `init`, `repr`, `eq`, `frozen`, `slots`, `kw_only` and
`match_args`, with `field(default=, default_factory=, compare=, hash=, repr=, init=)`;
neither `order`, `unsafe_hash` nor an InitVar or ClassVar pseudo-field (a TypeError says
so). A method the class defines itself is kept, as `dataclass` keeps it. A frozen record
with slots pickles its fields as a list in field order (a protocol crosses a process
boundary pickled: a model file loads in a forked child, captures are cached).

The price, measured on Python 3.11 (a frozen class of four fields): defining it takes 35 µs
instead of 320; `__init__` takes 0.6 µs instead of 0.37 with every field passed by position
and 0.9 instead of 0.5 by keyword, `__eq__` 0.19 instead of 0.11, `__hash__` 0.14 instead of
0.10. Building and checking the ring model at 32 devices, that is 3% more instructions after
start-up (5.57 G against 5.42 G), for 213 M fewer at start-up.

Type checkers see `dataclasses.dataclass` itself, so a record is checked as a dataclass.
"""

from __future__ import annotations

import dataclasses
import reprlib
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, NoReturn

if TYPE_CHECKING:
    from dataclasses import dataclass as record
else:

    def record(cls=None, /, *, init=True, repr=True, eq=True, frozen=False, slots=False, kw_only=False,
               match_args=True):
        """`@record` or `@record(frozen=True, ...)`: see the module's docstring."""

        def wrap(cls):
            return _make_record(cls, init=init, repr=repr, eq=eq, frozen=frozen, slots=slots, kw_only=kw_only,
                                match_args=match_args)

        return wrap if cls is None else wrap(cls)


_MISSING = dataclasses.MISSING


def _make_record(cls: type, *, init: bool, repr: bool, eq: bool, frozen: bool, slots: bool, kw_only: bool,
                 match_args: bool) -> type:
    own = dict(cls.__dict__)
    for base in cls.__mro__[1:]:
        base_frozen = getattr(base, "__record_frozen__", None)
        if base_frozen is not None and base_frozen != frozen:
            raise TypeError(f"{cls.__qualname__}: a {'' if frozen else 'non-'}frozen record cannot inherit from "
                            f"a {'' if base_frozen else 'non-'}frozen one ({base.__qualname__})")
    if own.get("__doc__") is None:
        cls.__doc__ = cls.__name__  # spares dataclass its inspect.signature; named properly below
    # The fields, and nothing compiled: dataclass adds no method when told to add none.
    cls = _fields_of(cls, own, slots=slots, kw_only=kw_only, match_args=match_args)
    fields = dataclasses.fields(cls)
    if len(fields) != len(cls.__dict__["__dataclass_fields__"]):
        raise TypeError(f"{cls.__qualname__}: a record takes no InitVar or ClassVar pseudo-field; "
                        "use dataclasses.dataclass")
    if own.get("__doc__") is None:
        cls.__doc__ = f"{cls.__name__}({', '.join(f.name for f in fields if f.init)})"
    cls.__record_frozen__ = frozen  # type: ignore[attr-defined]

    def add(name: str, method: Callable) -> None:
        if name not in own:  # the class's own method wins, as with dataclass
            method.__qualname__ = f"{cls.__qualname__}.{name}"
            setattr(cls, name, method)

    if init and "__init__" not in own:
        made = _init(cls, fields, setter=object.__setattr__ if frozen else setattr)
        add("__init__", made)
        cls.__signature__ = _Signature(made)  # type: ignore[attr-defined]
    if repr:
        add("__repr__", _repr(fields))
    if eq:
        add("__eq__", _eq(fields))
        has_explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
        if not has_explicit_hash:
            # As dataclass: a frozen record hashes by its compared fields; a mutable one cannot
            # be hashed.
            setattr(cls, "__hash__", _hash(fields) if frozen else None)  # noqa: B010 (mypy refuses the assignment)
    if frozen:
        _make_frozen(cls, fields, own, add, slots)
    return cls


_PSEUDO_FIELDS = ("ClassVar", "InitVar", "KW_ONLY")


def _fields_of(cls: type, own: dict, *, slots: bool, kw_only: bool, match_args: bool) -> type:
    """`cls` made a dataclass with no method added. Its annotations are strings (`from
    __future__ import annotations`), and `dataclass` matches each string against a regular
    expression three times to learn whether it names ClassVar, InitVar or KW_ONLY: 2% of a
    model file's start-up for 250 fields. Where no annotation can name one, `dataclass`
    is shown placeholders instead, and each field gets its annotation back."""
    annotations = own.get("__annotations__", {})
    if any(not isinstance(a, str) or any(word in a for word in _PSEUDO_FIELDS) for a in annotations.values()):
        return dataclasses.dataclass(cls, init=False, repr=False, eq=False, frozen=False, slots=slots,
                                     kw_only=kw_only, match_args=match_args)
    cls.__annotations__ = dict.fromkeys(annotations, object)
    try:
        cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, frozen=False, slots=slots,
                                    kw_only=kw_only, match_args=match_args)
    finally:
        cls.__annotations__ = annotations
    for name, f in cls.__dict__["__dataclass_fields__"].items():
        if name in annotations:  # not a base's
            f.type = annotations[name]
    return cls


def _make_frozen(cls: type, fields: tuple[dataclasses.Field, ...], own: dict, add: Callable, slots: bool) -> None:
    for name in ("__setattr__", "__delattr__"):
        if name in own:
            raise TypeError(f"cannot overwrite attribute {name} in class {cls.__name__}")
    add("__setattr__", _frozen_setattr(cls, fields))
    add("__delattr__", _frozen_delattr(cls, fields))
    if slots:
        _add_pickling(cls, fields, add)


def _init(cls: type, fields: tuple[dataclasses.Field, ...], setter: Callable) -> Callable:
    qualname = cls.__qualname__
    positional = tuple(f.name for f in fields if f.init and not f.kw_only)
    accepted = frozenset(f.name for f in fields if f.init)
    # (name, default, factory) for each field __init__ sets, in order
    plan = tuple((f.name, f.default, None if f.default_factory is _MISSING else f.default_factory)
                 for f in fields if f.init or f.default is not _MISSING or f.default_factory is not _MISSING)
    post_init = hasattr(cls, "__post_init__")
    count = len(positional)
    # The common case, every field a positional parameter: the fields without a default come
    # first (dataclass requires it), and those not passed take their defaults.
    simple = count == len(plan)
    required = sum(1 for _, default, factory in plan if default is _MISSING and factory is None)
    required_positional = sum(1 for f in fields if f.name in positional and f.default is _MISSING
                              and f.default_factory is _MISSING)

    def __init__(self, *args, **kwargs):
        if simple and not kwargs and required <= len(args) <= count:
            for name, value in zip(positional, args):
                setter(self, name, value)
            if len(args) < count:
                for name, default, factory in plan[len(args):]:  # the rest take their defaults
                    setter(self, name, default if factory is None else factory())
        else:
            values = _bind(qualname, positional, required_positional, accepted, args, kwargs)
            for name, default, factory in plan:  # a field not passed to __init__ is never in values
                value = values.get(name, default)
                if value is _MISSING:
                    if factory is None:
                        _missing(qualname, positional, plan, values)
                    value = factory()
                setter(self, name, value)
        if post_init:
            self.__post_init__()

    return __init__


class _Signature:
    """`inspect.signature` of a record class: the parameters its `__init__` takes, as
    `dataclass` would declare them, made when first asked for (help(), an editor). The
    `__init__` itself takes `*args, **kwargs`."""

    def __init__(self, made: Callable) -> None:
        self.made = made
        self.signature: Any = None

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is not None or getattr(owner, "__init__", None) is not self.made:  # an instance; an __init__ of its own
            return None
        if self.signature is None:
            import inspect

            fields = [f for f in dataclasses.fields(owner) if f.init]
            parameters = [inspect.Parameter(
                f.name, inspect.Parameter.KEYWORD_ONLY if f.kw_only else inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=(f.default if f.default is not _MISSING else
                         _FACTORY if f.default_factory is not _MISSING else inspect.Parameter.empty),
                annotation=f.type) for f in sorted(fields, key=lambda f: bool(f.kw_only))]
            self.signature = inspect.Signature(parameters, return_annotation=None)
        return self.signature


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _bind(qualname: str, positional: tuple[str, ...], required: int, accepted: frozenset[str], args: tuple,
          kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments by field name, refused as Python refuses a call that does not fit (in
    its words)."""
    if len(args) > len(positional):
        most = len(positional) + 1
        takes = f"from {required + 1} to {most}" if required < len(positional) else str(most)
        raise TypeError(f"{qualname}.__init__() takes {takes} positional argument{'s' if most > 1 else ''} but "
                        f"{len(args) + 1} were given")
    if not accepted.issuperset(kwargs):
        unexpected = next(name for name in kwargs if name not in accepted)
        raise TypeError(f"{qualname}.__init__() got an unexpected keyword argument {unexpected!r}")
    if not args:
        return kwargs
    values = dict(zip(positional, args))
    if not kwargs.keys().isdisjoint(values):
        twice = next(name for name in kwargs if name in values)
        raise TypeError(f"{qualname}.__init__() got multiple values for argument {twice!r}")
    values.update(kwargs)
    return values


def _missing(qualname: str, positional: tuple[str, ...], plan: tuple, values: dict[str, Any]) -> NoReturn:
    missing = [name for name, default, factory in plan
               if name not in values and default is _MISSING and factory is None]
    by_position = [name for name in missing if name in positional]
    kind = "positional" if by_position else "keyword-only"
    names = [repr(name) for name in (by_position or missing)]
    listed = names[0] if len(names) == 1 else (
        f"{names[0]} and {names[1]}" if len(names) == 2 else f"{', '.join(names[:-1])}, and {names[-1]}")
    raise TypeError(f"{qualname}.__init__() missing {len(names)} required {kind} argument"
                    f"{'s' if len(names) > 1 else ''}: {listed}")


def _key(names: tuple[str, ...]) -> Callable[[Any], tuple]:
    """The tuple of the named fields' values (as the generated methods build it)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        name = names[0]
        return lambda self: (getattr(self, name),)
    return lambda self: ()


def _repr(fields: tuple[dataclasses.Field, ...]) -> Callable:
    names = tuple(f.name for f in fields if f.repr)

    @reprlib.recursive_repr()
    def __repr__(self):
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({shown})"

    return __repr__


def _eq(fields: tuple[dataclasses.Field, ...]) -> Callable:
    key = _key(tuple(f.name for f in fields if f.compare))

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    return __eq__


def _hash(fields: tuple[dataclasses.Field, ...]) -> Callable:
    key = _key(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))

    def __hash__(self):
        return hash(key(self))

    return __hash__


def _frozen_setattr(cls: type[Any], fields: tuple[dataclasses.Field, ...]) -> Callable:
    names = frozenset(f.name for f in fields)

    def __setattr__(self, name, value):
        if self.__class__ is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    return __setattr__


def _frozen_delattr(cls: type[Any], fields: tuple[dataclasses.Field, ...]) -> Callable:
    names = frozenset(f.name for f in fields)

    def __delattr__(self, name):
        if self.__class__ is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __delattr__


def _add_pickling(cls: type, fields: tuple[dataclasses.Field, ...], add: Callable) -> None:
    """A frozen record with slots has no `__dict__` for pickle to fill, and its `__setattr__`
    refuses: its state is the list of its fields' values in field order, set past the
    refusal."""
    names = tuple(f.name for f in fields)

    def __getstate__(self):
        return [getattr(self, name) for name in names]

    def __setstate__(self, state):
        for name, value in zip(names, state):
            object.__setattr__(self, name, value)

    add("__getstate__", __getstate__)
    add("__setstate__", __setstate__)
