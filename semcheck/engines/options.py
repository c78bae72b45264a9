"""How a check runs, as typed values: one frozen options type per engine, and `CheckOptions`
holding the engine's name, the driver's own choices and one of each engine's options (so
`--engine auto` can hand each engine it runs its own).

The Python API and the CLI take keywords (`reduce=False, exhaustive=True`); they become a
`CheckOptions` once, at that boundary (`CheckOptions.from_keywords`), and travel typed from
there: through a sweep's tasks, `engines.check`, the portfolio and each engine's `explore`.
Derived options are `dataclasses.replace`d, never edited: a check of independent parts, for
instance, asks z3 to report how its runs end (`with_ends_reported`).
"""

from __future__ import annotations

from dataclasses import field, fields, replace
from typing import TYPE_CHECKING, Callable

from semcheck.records import record

if TYPE_CHECKING:
    from semcheck.engines.budget import Budget, ProgressFn
    from semcheck.result import Result
    from semcheck.semantics import System

DEFAULT_UNROLL = 8  # z3: backward jumps per thread that depend on inputs or reads (z3/unroll.py)
DEFAULT_RUNS = 200  # simulate: random schedules walked


@record(frozen=True)
class ExplicitOptions:
    """The explicit search (explicit/search.py)."""

    reduce: bool = True  # partial-order reduction (explicit/reduction.py)
    symmetry: bool | None = None  # rotations of the device axis (explicit/symmetry.py); None: when reducing
    silence_reported_races: bool = True  # one report per pair of racing lines (search.explore)
    stop_at_first: bool = False  # end at the first counterexample


@record(frozen=True)
class Z3Options:
    """The z3 engine (z3/engine.py)."""

    unroll: int = DEFAULT_UNROLL
    report_ends: bool = False  # also ask whether some execution ends cleanly (merging parts needs it)
    stop_at_first: bool = False  # ask no more questions once an answer is an error


@record(frozen=True)
class SimulateOptions:
    """Random schedules (simulate.py)."""

    runs: int | None = DEFAULT_RUNS  # None: until stopped, as `--engine auto` runs it
    seed: int = 0
    stop_at_first: bool = False  # end at the first error, in the middle of its run


ENGINE_OPTION_TYPES = {"explicit": ExplicitOptions, "z3": Z3Options, "simulate": SimulateOptions}


@record(frozen=True)
class CheckOptions:
    """One check: which engine (`engines.ENGINES`), whether independent parts are checked one
    at a time (`split`, engines/components.py), whether it goes on past the first
    counterexample (`exhaustive`), and each engine's own options.

    `exhaustive` decides every engine's `stop_at_first` (set here, whatever the engine
    options given say), so the two can never disagree."""

    engine: str = "auto"
    split: bool = True
    exhaustive: bool = False
    explicit: ExplicitOptions = field(default_factory=ExplicitOptions)
    z3: Z3Options = field(default_factory=Z3Options)
    simulate: SimulateOptions = field(default_factory=SimulateOptions)

    def __post_init__(self) -> None:
        first = not self.exhaustive
        for name in ENGINE_OPTION_TYPES:
            own = getattr(self, name)
            if own.stop_at_first is not first:
                object.__setattr__(self, name, replace(own, stop_at_first=first))  # frozen: set once, here

    @property
    def stop_at_first(self) -> bool:
        return not self.exhaustive

    def with_ends_reported(self) -> CheckOptions:
        """These options for a check of one independent part (z3 reports how its runs end)."""
        return replace(self, z3=replace(self.z3, report_ends=True))

    @classmethod
    def from_keywords(cls, **keywords) -> CheckOptions:
        """The options the API's keywords name (`engine="z3", unroll=4, exhaustive=True`).
        Each engine option goes to its engine's options (`unroll` to z3's); `stop_at_first`,
        an older spelling, is `not exhaustive`. An unknown keyword is a TypeError naming it."""
        _reject_unknown(keywords)
        stop_at_first = keywords.pop("stop_at_first", None)
        if stop_at_first is not None:
            if "exhaustive" in keywords and keywords["exhaustive"] is bool(stop_at_first):
                raise TypeError(f"stop_at_first={stop_at_first!r} contradicts exhaustive={keywords['exhaustive']!r}")
            keywords["exhaustive"] = not stop_at_first
        own = {name: {k: keywords.pop(k) for k in list(keywords) if k in ENGINE_KEYWORDS[name]}
               for name in ENGINE_OPTION_TYPES}
        return cls(**keywords, **{name: ENGINE_OPTION_TYPES[name](**given) for name, given in own.items()})


# An engine as `engines.ENGINES` and the portfolio call it: it takes the whole CheckOptions
# and reads its own part (`options.explicit`, ...), so `auto` hands one value to each engine.
EngineFn = Callable[["System", "Budget | None", "ProgressFn | None", CheckOptions], "Result"]


def _names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


# The keywords of each engine's options; stop_at_first is the check's (from `exhaustive`).
ENGINE_KEYWORDS: dict[str, frozenset[str]] = {
    name: _names(cls) - {"stop_at_first"} for name, cls in ENGINE_OPTION_TYPES.items()
}
CHECK_KEYWORDS = frozenset({"engine", "split", "exhaustive", "stop_at_first"}).union(*ENGINE_KEYWORDS.values())


def _reject_unknown(keywords: dict) -> None:
    unknown = sorted(set(keywords) - CHECK_KEYWORDS)
    if not unknown:
        return
    import difflib  # only on a misspelt option: a run's start-up does without it

    said = []
    for name in unknown:
        close = difflib.get_close_matches(name, CHECK_KEYWORDS, n=1)
        said.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise TypeError(f"unknown check option{'s' if len(said) > 1 else ''} {', '.join(said)}; "
                    f"the options are {', '.join(sorted(CHECK_KEYWORDS))}")
