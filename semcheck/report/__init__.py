"""Reports: render Results. One module per format, registered by name in `FORMATS`; each
takes the Results and one `RenderOptions` and reads the options it has a use for."""

from __future__ import annotations

from dataclasses import fields
from typing import Callable, Sequence

from semcheck.ir import display_path  # noqa: F401  (re-exported for reports)
from semcheck.records import record
from semcheck.result import Result


@record(frozen=True)
class RenderOptions:
    """What `semcheck verify`'s flags say about the report."""

    max_trace_steps: int = 0  # text: the steps of a trace shown (0: as folded, `folding.py`)
    all_traces: bool = False  # text: every check's violations in full, not each problem once
    verbose: bool = False  # text: every step a trace depends on, and the notes
    width: int = 0  # text: verdict lines wrapped to this many columns (0: not wrapped)
    color: bool = False  # text: verdicts and fixes painted for a terminal
    judgements: Sequence | None = None  # --expectations: one `run.expectations.Judgement` per Result
    category: str | None = None  # sarif: the run's category (several uploads on one commit)


_PLAIN = RenderOptions()


def _text(results: list[Result], options: RenderOptions = _PLAIN) -> str:
    from semcheck.report import text

    # every option but SARIF's category is the text report's (a new one reaches it, or fails loudly)
    return text.render(results, **{f.name: getattr(options, f.name) for f in fields(options) if f.name != "category"})


def _json(results: list[Result], options: RenderOptions = _PLAIN) -> str:
    from semcheck.report import json as json_report

    return json_report.render(results, judgements=options.judgements)


def _sarif(results: list[Result], options: RenderOptions = _PLAIN) -> str:
    from semcheck.report import sarif

    return sarif.render(results, judgements=options.judgements, category=options.category)


def _concise(results: list[Result], options: RenderOptions = _PLAIN) -> str:
    from semcheck.report import concise

    return concise.render(results, judgements=options.judgements)


def _github(results: list[Result], options: RenderOptions = _PLAIN) -> str:
    from semcheck.report import github

    return github.render(results, judgements=options.judgements)


FORMATS: dict[str, Callable[[list[Result], RenderOptions], str]] = {
    "text": _text, "json": _json, "sarif": _sarif, "concise": _concise, "github": _github,
}
