"""`semcheck explain [KIND]`: what a violation kind means, in the terminal.

With a kind, its page (`semcheck/kind_pages/KIND.md`, the same page SARIF rules carry as
their help: what it means, a bad and a good pattern, the fix); without one, every kind with
its one-line meaning (`semcheck.kinds.DESCRIPTIONS`). A kind that does not exist is a usage
error (exit 2) with the closest kind and the list, so a misspelt name is one step from the
page it meant.
"""

from __future__ import annotations

import textwrap

from semcheck.kinds import DESCRIPTIONS, Kind

EXIT_USAGE = 2
# What `semcheck explain` alone and `semcheck --help` say of `explain KIND`.
EXPLAIN_A_KIND = "semcheck explain KIND shows a kind's page: what it means, a bad and a good pattern, the fix"


def kind_lines(width: int) -> str:
    """Every kind and its one-line meaning, wrapped to `width` columns under the kind's name
    (`semcheck --help` and `semcheck explain` list them alike)."""
    column = max(len(k.value) for k in DESCRIPTIONS) + 4
    return "\n".join(textwrap.fill(d, width, initial_indent=f"  {k.value:<{column - 2}}",
                                   subsequent_indent=" " * column) for k, d in DESCRIPTIONS.items())


def _as_typed(name: str) -> str:
    """A kind's name as a user may type it (`data-race`, `DATA_RACE`), spelt as the kind is."""
    return name.strip().lower().replace("-", "_")


def find_kind(name: str) -> Kind | None:
    """The kind `name` names, read as a user may type it."""
    try:
        return Kind(_as_typed(name))
    except ValueError:
        return None


def explain(name: str | None, width: int) -> tuple[int, str, str]:
    """(exit code, what goes to stdout, what goes to stderr) for `semcheck explain [NAME]`."""
    if name is None:
        return 0, f"violation kinds:\n{kind_lines(width)}\n\n{EXPLAIN_A_KIND}\n", ""
    kind = find_kind(name)
    if kind is None:
        from semcheck.cli.options import did_you_mean

        close = did_you_mean(_as_typed(name), [k.value for k in Kind])
        return EXIT_USAGE, "", (f"semcheck: error: {name!r} is not a violation kind{close}\n"
                                f"violation kinds:\n{kind_lines(width)}\n")
    from semcheck.report.kinds import help_markdown

    page = help_markdown(kind)
    return 0, page if page.endswith("\n") else page + "\n", ""
