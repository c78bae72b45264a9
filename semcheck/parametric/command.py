"""`semcheck verify PATH --devices all`: every kernel of every file at every device count
(`family.every_count`), reported as one verdict per kernel."""

from __future__ import annotations

import sys
from collections.abc import Callable

from semcheck.engines.budget import Budget
from semcheck.parametric.family import EveryCount, Outcome, every_count
from semcheck.result import EXIT_CODES, Verdict, worst

ALL = "all"

_HEADS = {
    Verdict.SAFE: "SAFE FOR EVERY DEVICE COUNT",
    Verdict.VIOLATION: "VIOLATION",
    Verdict.INCONCLUSIVE: "INCONCLUSIVE",
    Verdict.ERROR: "ERROR",
}

# Options that mean something for a sweep of given counts only.
_NOT_WITH_ALL = (
    ("expectations", "--expectations"), ("graph", "--graph"), ("assume", "--assume"), ("baseline", "--baseline"),
)


def usage_problem(args) -> str | None:
    for name, flag in _NOT_WITH_ALL:
        if getattr(args, name, None):
            return f"{flag} cannot be combined with --devices all"
    if getattr(args, "invocations", 1) != 1:
        return "--devices all covers one invocation of each kernel (leave --invocations out)"
    if getattr(args, "engine", "auto") not in ("auto", "explicit"):
        return "--devices all checks the counts below its proof with the explicit search (leave --engine out)"
    return None


def run(args, nothing_to_check: Callable[[str], int] | None = None) -> int:
    """What the CLI runs for `--devices all`; returns the exit code. `nothing_to_check` is
    handed why nothing was checked and returns the exit code (--changed-files passes such a
    change); without it, nothing to check is a usage error."""
    from semcheck.frontends import discover
    from semcheck.report import FORMATS, RenderOptions

    problem = usage_problem(args)
    if problem:
        print(f"semcheck: error: {problem}", file=sys.stderr)
        return 2
    budget = Budget.from_env(max_states=args.max_states, timeout=args.timeout, max_memory_mb=args.max_memory)
    options = EveryCount(budget=budget)
    outcomes: list[Outcome] = []
    empty = []
    for path in discover(args.paths):
        if not args.quiet:
            print(f"semcheck: {path}: every device count (loading at N = 2..8, proving, checking)", file=sys.stderr)
        found = every_count(path, options)
        if not found:
            empty.append(path)
            if not args.quiet:
                print(f"semcheck: {path}: no kernel at any device count, skipped", file=sys.stderr)
        outcomes.extend(found)
    if not outcomes:
        why = (f"nothing to check: {', '.join(empty)} compiled no Pallas kernel at any device count" if empty
               else "nothing to check: no kernel scripts or models in " + ", ".join(args.paths))
        if nothing_to_check is not None:
            return nothing_to_check(why)
        print(f"semcheck: error: {why}", file=sys.stderr)
        return 2
    results = [o.result for o in outcomes]
    if args.format == "text":
        rendered = render_text(outcomes)
    else:
        rendered = FORMATS[args.format](results, RenderOptions())
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(rendered)
        if not args.quiet and args.format != "text":
            sys.stdout.write(render_text(outcomes))
    else:
        sys.stdout.write(rendered if rendered.endswith("\n") else rendered + "\n")
    return EXIT_CODES[worst(o.verdict for o in outcomes)]


def render_text(outcomes: list[Outcome]) -> str:
    from semcheck.ir import display_path
    from semcheck.report import text

    blocks = []
    for o in outcomes:
        r = o.result
        where = (f"{display_path(r.file)}:{r.line}" if r.line else display_path(r.file)) if r.file else ""
        lines = [f"{_HEADS[o.verdict]}: {o.kernel} {where}: {o.claim}"]
        if o.verdict is Verdict.VIOLATION:
            lines += ["", text.render_result(r)]
        else:
            lines += [f"  note: {note}" for note in r.notes if note != o.claim]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"
