"""semcheck: a model checker for the synchronization protocols of JAX Pallas kernels."""

from semcheck import result as _result
from semcheck.version import REPOSITORY_URL, __version__  # noqa: F401 (REPOSITORY_URL: re-exported)


# A Result's text report and notebook display are the report layer's, installed here, above
# both: the reports are imported when a Result is first shown, never at start-up.
def _text_report(result, **options) -> str:
    from semcheck.report import text

    return text.render([result], **options)


def _html_report(result) -> str:
    from semcheck.report import html

    return html.render(result)


_result.install_renderers(_result.Renderers(text=_text_report, html=_html_report))


# The public names are imported on first use (PEP 562), so that `import semcheck.frontends.capture`
# (the capture subprocess) or `semcheck.cli` on a model file loads only what it needs.
_EXPORTS = {
    "assume": "semcheck.passes.assumptions",
    "check_protocol": "semcheck.api",
    "verify": "semcheck.api",
    "verify_model": "semcheck.api",
    "verify_path": "semcheck.api",
    "Result": "semcheck.result",
    "Verdict": "semcheck.result",
    "Violation": "semcheck.result",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'semcheck' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
