"""A Result in a notebook (`Result._repr_html_`): the text report, then each counterexample
drawn inline as SVG (when Graphviz is installed; otherwise a note says how to get it)."""

from __future__ import annotations

import html

from semcheck.result import Result


def render(result: Result) -> str:
    from semcheck.report import text

    parts = [f'<pre style="white-space: pre-wrap">{html.escape(text.render([result]))}</pre>']
    for violation in result.errors:
        if not violation.trace and not violation.blocked:
            continue
        parts.append(_picture(result, violation))
    return "<div class=\"semcheck-result\">" + "\n".join(parts) + "</div>"


def _picture(result: Result, violation) -> str:
    from semcheck.report import draw, graph

    try:
        svg = draw.render(graph.counterexample_graph(result, violation), "svg").decode("utf-8")
    except draw.DrawError as e:
        return f"<p><i>{html.escape(str(e))}</i></p>"
    # Graphviz writes an XML prolog and a DOCTYPE; inline SVG in HTML wants the element only.
    start = svg.find("<svg")
    return f'<div style="overflow-x: auto">{svg[start:] if start >= 0 else svg}</div>'
