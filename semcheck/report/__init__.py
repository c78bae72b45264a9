"""Reports: render Results. One module per format, registered by name."""

from __future__ import annotations

from typing import Callable

from semcheck.ir import display_path  # noqa: F401  (re-exported for reports)
from semcheck.result import Result


def _text(results: list[Result], **options) -> str:
    from semcheck.report import text

    return text.render(results, **options)


def _json(results: list[Result], **options) -> str:
    from semcheck.report import json as json_report

    return json_report.render(results, **options)


def _sarif(results: list[Result], **options) -> str:
    from semcheck.report import sarif

    return sarif.render(results, **options)


def _concise(results: list[Result], **options) -> str:
    from semcheck.report import concise

    return concise.render(results, **options)


def _github(results: list[Result], **options) -> str:
    from semcheck.report import github

    return github.render(results, **options)


FORMATS: dict[str, Callable[..., str]] = {
    "text": _text, "json": _json, "sarif": _sarif, "concise": _concise, "github": _github,
}
