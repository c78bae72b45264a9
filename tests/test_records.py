"""`semcheck.records.record` behaves as `dataclasses.dataclass` for what semcheck uses:
each class below is made twice, once with each, and every operation on the two must give
the same answer, or the same error."""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import os
import pickle
from typing import ClassVar

import pytest

from semcheck import ir
from semcheck.records import record


def _shapes(make):
    """The shapes of record semcheck uses, made with `make` (dataclass or record)."""

    @make(frozen=True, slots=True)
    class Instr:
        loc: str

    @make(frozen=True, slots=True)
    class Signal(Instr):
        sem: str
        inc: int = 1
        note: str | None = dataclasses.field(default=None, compare=False)

    @make(frozen=True)
    class Protocol:
        name: str
        threads: tuple = ()
        notes: tuple = dataclasses.field(default=())
        extra: list = dataclasses.field(default_factory=list, repr=False)
        checked: bool = dataclasses.field(default=True, compare=False, repr=False)

    @make
    class Mutable:
        count: int
        seen: set = dataclasses.field(default_factory=set)
        later: int = dataclasses.field(default=0, init=False)

    @make(frozen=True, eq=False)
    class ByIdentity:
        value: int

    @make(repr=False)
    class OwnRepr:
        value: int

        def __repr__(self):
            return f"<{self.value}>"

    @make(frozen=True)
    class Checked:
        lo: int
        hi: int
        span: int = dataclasses.field(default=0, init=False)

        def __post_init__(self):
            if self.lo > self.hi:
                raise ValueError("empty")
            object.__setattr__(self, "span", self.hi - self.lo)

    @make(frozen=True, kw_only=True)
    class Options:
        depth: int = 3
        name: str = "x"

    return dict(Instr=Instr, Signal=Signal, Protocol=Protocol, Mutable=Mutable, ByIdentity=ByIdentity,
                OwnRepr=OwnRepr, Checked=Checked, Options=Options)


DATACLASS = _shapes(dataclasses.dataclass)
RECORD = _shapes(record)

# (label, operation on the shapes): each runs on both families of classes.
OPERATIONS = [
    ("positional", lambda c: c["Signal"]("l", "s", 2)),
    ("defaults", lambda c: c["Signal"]("l", "s")),
    ("keywords", lambda c: c["Signal"](sem="s", loc="l", note="n")),
    ("mixed", lambda c: c["Signal"]("l", inc=3, sem="s")),
    ("too many", lambda c: c["Signal"]("l", "s", 1, None, 5)),
    ("unexpected keyword", lambda c: c["Signal"]("l", "s", color=1)),
    ("twice", lambda c: c["Signal"]("l", "s", sem="t")),
    ("missing", lambda c: c["Signal"]("l")),
    ("missing, by keyword", lambda c: c["Signal"](inc=2)),
    ("equal", lambda c: c["Signal"]("l", "s", 2) == c["Signal"]("l", "s", 2)),
    ("equal but for an uncompared field", lambda c: c["Signal"]("l", "s", note="a") == c["Signal"]("l", "s", note="b")),
    ("unequal", lambda c: c["Signal"]("l", "s", 2) == c["Signal"]("l", "s", 3)),
    ("base and subclass unequal", lambda c: c["Instr"]("l") == c["Signal"]("l", "s")),
    ("hash equal when equal", lambda c: hash(c["Signal"]("l", "s", note="a")) == hash(c["Signal"]("l", "s", note="b"))),
    ("in a set", lambda c: len({c["Signal"]("l", "s"), c["Signal"]("l", "s"), c["Signal"]("l", "t")})),
    ("repr", lambda c: repr(c["Signal"]("l", "s", 2))),
    ("repr of a field left out", lambda c: repr(c["Protocol"]("p", (1,), extra=[2]))),
    ("repr of the class's own", lambda c: repr(c["OwnRepr"](4))),
    ("frozen", lambda c: setattr(c["Signal"]("l", "s"), "inc", 5)),
    ("frozen, a new attribute", lambda c: setattr(c["Protocol"]("p"), "other", 5)),
    ("frozen, delete", lambda c: delattr(c["Protocol"]("p"), "name")),
    ("slots", lambda c: hasattr(c["Signal"]("l", "s"), "__dict__")),
    ("factory, a new list each", lambda c: c["Protocol"]("p").extra is not c["Protocol"]("p").extra),
    ("mutable", lambda c: _assigned(c["Mutable"](1))),
    ("mutable, unhashable", lambda c: hash(c["Mutable"](1))),
    ("mutable, a field not in __init__", lambda c: c["Mutable"](1, later=3)),
    ("identity", lambda c: c["ByIdentity"](1) == c["ByIdentity"](1)),
    ("identity hash", lambda c: hash(c["ByIdentity"](1)) == hash(c["ByIdentity"](1))),
    ("post_init", lambda c: c["Checked"](1, 4).span),
    ("post_init refuses", lambda c: c["Checked"](4, 1)),
    ("keyword only", lambda c: c["Options"](depth=5)),
    ("keyword only, by position", lambda c: c["Options"](5)),
    ("replace", lambda c: dataclasses.replace(c["Signal"]("l", "s", note="n"), inc=7)),
    ("replace a field not in __init__", lambda c: dataclasses.replace(c["Mutable"](1), later=2)),
    ("fields", lambda c: [(f.name, f.type, f.compare, f.repr, f.init) for f in dataclasses.fields(c["Protocol"])]),
    ("inherited fields", lambda c: [(f.name, f.type) for f in dataclasses.fields(c["Signal"])]),
    ("annotations", lambda c: c["Signal"].__annotations__),
    ("asdict", lambda c: dataclasses.asdict(c["Protocol"]("p", (1,), extra=[2]))),
    ("is_dataclass", lambda c: dataclasses.is_dataclass(c["Signal"])),
    ("match_args", lambda c: c["Signal"].__match_args__),
    ("signature", lambda c: [str(inspect.signature(c[name])) for name in ("Signal", "Protocol", "Mutable", "Options")]),
    ("copy", lambda c: copy.copy(c["Signal"]("l", "s")) == c["Signal"]("l", "s")),
    ("deepcopy", lambda c: copy.deepcopy(c["Protocol"]("p", extra=[1]))),
]


def _assigned(obj):
    obj.count = 5
    return obj.count


def _outcome(operation, classes):
    """What an operation gives, as comparable across the two families: a value (records
    shown by their repr), or the error's type and message."""
    try:
        value = operation(classes)
    except Exception as error:  # noqa: BLE001 (the error is the outcome compared)
        return type(error).__name__, str(error).replace("__create_fn__.<locals>.", "")
    return repr(value) if dataclasses.is_dataclass(value) else value


@pytest.mark.parametrize("label,operation", OPERATIONS, ids=[label for label, _ in OPERATIONS])
def test_a_record_does_what_a_dataclass_does(label, operation):
    expected, got = _outcome(operation, DATACLASS), _outcome(operation, RECORD)
    if isinstance(expected, tuple) and expected[0] == "TypeError" and "__init__()" in expected[1]:
        # The same error; Python's wording names the generated function its own way.
        assert got[0] == "TypeError" and got[1].split("__init__()")[1] == expected[1].split("__init__()")[1], got
    else:
        assert got == expected


def test_a_record_defines_without_compiling(monkeypatch):
    """The point of it: no source text goes to `exec` when a record is defined (a dataclass
    compiles six methods for a frozen class)."""
    import builtins

    compiled = []
    real_exec = builtins.exec
    monkeypatch.setattr(builtins, "exec", lambda *args, **kw: compiled.append(args[0]) or real_exec(*args, **kw))
    _shapes(record)
    assert compiled == []
    _shapes(dataclasses.dataclass)
    assert len(compiled) > 20  # the converse, so the assertion above can fail


def test_what_a_record_does_not_take_is_refused():
    with pytest.raises(TypeError):
        record(order=True)  # type: ignore[call-overload]

    with pytest.raises(TypeError, match="InitVar"):
        @record
        class WithInitVar:
            scale: dataclasses.InitVar[int]

    with pytest.raises(TypeError, match="ClassVar"):
        @record
        class WithClassVar:
            count: ClassVar[int] = 0

    @record(frozen=True)
    class Frozen:
        x: int

    with pytest.raises(TypeError, match="frozen"):
        @record
        class Thawed(Frozen):
            y: int = 0


def test_the_ir_pickles_as_before():
    """A frozen record with slots pickles its fields as a list in field order (the format the
    IR's own pickling had, so a kept capture reads back)."""
    signal = ir.Signal(ir.Loc("k.py", 3), ir.SemRef("send", 1, device=2), inc=ir.BinOp("+", ir.Reg("r"), 1))
    assert signal.__reduce_ex__(2)[2] == [signal.loc, signal.sem, signal.inc]
    for protocol in (2, 4, pickle.HIGHEST_PROTOCOL):
        back = pickle.loads(pickle.dumps(signal, protocol))
        assert back == signal and hash(back) == hash(signal) and back is not signal
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.inc = 2  # type: ignore[misc]


def test_every_dataclass_of_the_package_is_a_record():
    """A `dataclasses.dataclass` in semcheck/ would compile its methods at import again."""
    package = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "semcheck")
    plain = []
    for folder, _, files in os.walk(package):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    plain += [f"{os.path.relpath(path, package)}: {node.name}" for decorator in node.decorator_list
                              if "dataclass" in ast.unparse(decorator)]
    assert plain == []
