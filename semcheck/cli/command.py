"""`semcheck verify PATH...`: argument parsing, progress and exit codes; nothing else.

Exit codes: 0 every check verified safe; 1 at least one violation; 2 error (cannot load or
trace, unsupported construct, bad usage); 3 inconclusive (a budget ran out); 130 / 143 / 129
interrupted by Ctrl-C / SIGTERM / SIGHUP (the checks that finished are still reported, marked
partial).

With --expectations, each check is judged against the verdict declared for its file
(`semcheck/run/expectations.py`): 0 every check matched its declaration; 1 some check did not;
2 some check errored (or a declaration is malformed); 3 some check was inconclusive and
none of the above.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import replace

from semcheck.cli import config, gate, interrupts, options as cli_options
from semcheck.run import expectations
from semcheck.api import check_paths
from semcheck.version import ISSUES_URL, __version__
from semcheck.passes.assumptions import AssumptionError, parse as parse_assumption
from semcheck.cli.explain import EXPLAIN_A_KIND, explain as explain_kind, kind_lines
from semcheck.cli.options import did_you_mean, for_argparse
from semcheck.engines import ENGINES
from semcheck.engines.budget import DEFAULT_MAX_STATES, DEFAULT_TIMEOUT, Budget, ProgressInfo
from semcheck.frontends import discover
from semcheck.frontends.discovery import Why, summarize
from semcheck.ir import display_path
from semcheck.report import FORMATS, RenderOptions
from semcheck.result import EXIT_CODES, worst

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line (exit 2, like every other error), with a "did you mean"
    for a misspelt option or choice; `--help` has the whole usage."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"semcheck: error: {message} (semcheck {self._command()}--help lists the options)\n")

    def _command(self) -> str:
        return next((f"{name} " for name in ("verify", "explain") if self.prog.endswith(f" {name}")), "")

    def _check_value(self, action, value):
        if action.dest == "command" and value not in (action.choices or ()):
            # `semcheck --devices 2 k.py`: argparse takes an option's value for the command
            close = did_you_mean(str(value), list(action.choices or ()))
            commands = list(action.choices or ())
            raise argparse.ArgumentError(action, f"{value!r} is not a command" + (close or (
                f" (the commands are {' and '.join(commands)}; options go after the command: "
                "`semcheck verify [OPTIONS] PATH...`)")))
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(map(str, action.choices))
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from {choices})"
                                         + did_you_mean(str(value), [str(c) for c in action.choices]))


def _unknown_options(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """The usage error for arguments no option takes, naming the option each one is close to."""
    options = [o for action in _verify_parser(parser)._actions for o in action.option_strings]
    # A word after an unknown option is that option's value (`--devcies 2`), not an argument
    # of its own: it is shown with the option, and the hint follows both.
    groups: list[list[str]] = []
    for extra in extras:
        if groups and not extra.startswith("-") and groups[-1][0].startswith("-") and len(groups[-1]) == 1 \
                and "=" not in groups[-1][0]:
            groups[-1].append(extra)
        else:
            groups.append([extra])
    parts = []
    for group in groups:
        name = group[0].split("=", 1)[0]
        hint = did_you_mean(name, options) if name.startswith("-") else ""
        parts.append(" ".join(group) + ((f" ({hint[2:]})" if len(groups) > 1 else hint) if hint else ""))
    what = "unknown option" if all(g[0].startswith("-") for g in groups) else "unrecognized argument"
    return f"{what}{'s' if len(groups) > 1 else ''}: {', '.join(parts)}"


def _verify_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["verify"]


def _device_counts(text: str) -> list[int] | str:
    if text.strip().lower() == "all":  # every device count: semcheck/parametric (docs/parametric.md)
        return "all"
    try:
        counts = [int(part) for part in text.split(",")]  # an empty part (2,,4) is a typo too
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated device counts like 2,4,8, got {text!r}") from None
    if not counts or any(n < 1 for n in counts):
        raise argparse.ArgumentTypeError(f"device counts must be positive, got {text!r}")
    return counts


def _assumption(text: str):
    try:
        return parse_assumption(text)
    except AssumptionError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _graph_file(text: str) -> str:
    from semcheck.report.draw import SUFFIXES

    if not text.lower().endswith(SUFFIXES):
        raise argparse.ArgumentTypeError(f"the file name must end in {', '.join(SUFFIXES)}, got {text!r}")
    return text


def build_parser(defaults: config.Defaults | None = None) -> argparse.ArgumentParser:
    import textwrap

    # the epilog is laid out by hand (RawDescriptionHelpFormatter), so it is wrapped here, as
    # argparse wraps the options' help: to the terminal, at most 100 columns
    width = max(60, min(100, shutil.get_terminal_size().columns - 2))
    kinds = kind_lines(width)
    explain = textwrap.fill(EXPLAIN_A_KIND, width, subsequent_indent="  ")
    exits = textwrap.fill("exit codes: 0 safe, 1 violation, 2 error, 3 inconclusive, 130/143/129 interrupted "
                          "(Ctrl-C/SIGTERM/SIGHUP; what finished is reported, marked partial)", width,
                          subsequent_indent="  ")
    parser = _Parser(
        prog="semcheck",
        description="Model-check the synchronization protocol of Pallas kernels and semcheck models.",
        epilog=f"violation kinds:\n{kinds}\n\n{explain}\n\n{exits}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"semcheck {__version__}")
    # not required: a bare `semcheck` gets a line saying what to type (main), not argparse's
    # "the following arguments are required: command"
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    verify = sub.add_parser(
        "verify",
        help="check kernel scripts, model files or folders of them",
        description="Check every schedule of each kernel or model for deadlocks, unsatisfied waits, "
        "leftover semaphores, bad device, core or semaphore ids and DMA windows, data races and early "
        "arrivals (the kinds: semcheck explain).",
    )
    verify.add_argument("paths", nargs="*", metavar="PATH",
                        help="a kernel script, a model file, or a folder (default: [tool.semcheck] paths)")
    verify.add_argument("--devices", type=_device_counts, default=[2, 4, 8], metavar="N[,N...]|all",
                        help="device counts to check (default: 2,4,8); `all`: every device count, proved "
                        "where every device runs one program written in terms of its id and the device count, "
                        "else the smallest count that fails, or inconclusive (docs/parametric.md)")
    verify.add_argument("--engine", choices=sorted(ENGINES), default="auto",
                        help="how to decide: explicit (exhaustive search), z3 (SMT; every input value "
                        "in one query), auto (default: explicit, joined by simulate and z3 taking turns "
                        "on one core once the search looks wide; the first counterexample or an "
                        "exhaustive engine's verdict ends the check; z3 alone for wide inputs; the "
                        "report names the engines that found what) or simulate (random schedules: "
                        "finds bugs fast, never proves safe)")
    verify.add_argument("--exhaustive", action=argparse.BooleanOptionalAction, default=False,
                        help="report every finding of every kind (by default a check stops at its first "
                        "counterexample, shown with its root cause, as SPIN and TLC do; a safe verdict "
                        "means the same either way); --expectations and --baseline imply it")
    verify.add_argument("--assume", type=_assumption, action="append", default=[], metavar="NAME=LO..HI",
                        help="check input NAME only for LO..HI (repeatable; overrides the file's "
                        "semcheck.assume and the input's own range; a NAME no input has is an error)")
    verify.add_argument("--unroll", type=for_argparse(cli_options.non_negative_int), default=None, metavar="N",
                        help="z3: unroll loops to N backward jumps per thread that depend on inputs or "
                        "semaphore reads (default: 8; constant trip counts unroll fully); a loop that "
                        "can run longer makes the verdict inconclusive, never safe")
    verify.add_argument("--format", choices=sorted(FORMATS), default="text", help="output format (default: text)")
    verify.add_argument("-o", "--output", metavar="FILE",
                        help="write the report to FILE instead of stdout (default: stdout); with a "
                        "--format other than text, stdout still gets the text report unless -q")
    verify.add_argument("--max-states", type=for_argparse(cli_options.positive_int), default=None, metavar="N",
                        help="stop with verdict inconclusive after N states (default: SEMCHECK_MAX_STATES, "
                        f"else {DEFAULT_MAX_STATES:,})")
    verify.add_argument("--timeout", type=for_argparse(cli_options.positive_seconds), default=None, metavar="S",
                        help="stop with verdict inconclusive after S seconds per check (default: "
                        f"SEMCHECK_TIMEOUT, else {DEFAULT_TIMEOUT:g})")
    verify.add_argument("--max-memory", type=for_argparse(cli_options.positive_megabytes), default=None, metavar="MB",
                        help="stop with verdict inconclusive above MB of memory (default: SEMCHECK_MAX_MEMORY_MB, else what semcheck holds plus half of what is free as a check starts)")
    verify.add_argument("--invocations", type=for_argparse(cli_options.positive_int), default=1, metavar="K",
                        help="run each kernel K times back to back on every device (default 1): "
                             "barrier semaphores persist, so collective_id reuse hazards show up")
    verify.add_argument("--assume-cores-enter-together", action=argparse.BooleanOptionalAction, default=True,
                        help="read the TensorCores of one chip as entering each kernel invocation "
                        "together, as JAX's own core barriers do (default); --no-assume-cores-enter-together "
                        "lets a core enter late, so a signal or copy between cores of one chip can "
                        "be remote_before_entry")
    verify.add_argument("--no-reduction", action="store_true",
                        help="explore every interleaving (slow; for cross-checking the reduction)")
    verify.add_argument("--no-symmetry", action="store_true",
                        help="do not merge states that a rotation of the device axis maps onto each "
                        "other (by default a protocol checked to be invariant under such rotations "
                        "stores one state per orbit; for cross-checking)")
    verify.add_argument("--no-split", action="store_true",
                        help="search the whole kernel at once even where its threads form independent "
                        "parts (by default each part is checked on its own; for cross-checking)")
    verify.add_argument("--max-trace-steps", type=for_argparse(cli_options.non_negative_int), default=0, metavar="N",
                        help="print only the N steps of each trace closest to the violation in its "
                        "causal past, unfolded (default: the closest few, the rest folded; with -v every "
                        "step it depends on)")
    verify.add_argument("--all-traces", action="store_true",
                        help="report every check's violations in full (by default one problem found "
                        "at several device counts is shown once, at the smallest)")
    verify.add_argument("--graph", metavar="FILE", type=_graph_file,
                        help="draw each counterexample to FILE (.dot, .svg or .png); with several, "
                        "FILE's stem gets -KERNEL-Nd-KIND appended per counterexample")
    verify.add_argument("--expectations", action="store_true",
                        help="judge each check against the verdict declared for its file "
                        "(# semcheck: expect KIND, or [tool.semcheck.expect] in pyproject.toml): "
                        "exit 0 when every check matches, 1 when one does not")
    verify.add_argument("-q", "--quiet", action="store_true",
                        help="no progress or capture lines, nor the line of files a folder walk skipped, on "
                        "stderr; warnings stay (a `# semcheck` comment that is almost a declaration is ignored, "
                        "and its warning can be all that says a gate judges a kernel against the wrong verdict)")
    verify.add_argument("-v", "--verbose", action="store_true",
                        help="text report: every step of each trace the violation depends on, and the "
                        "modelling notes each verdict rests on (by default counted; always in json and sarif)")
    gate.add_arguments(verify)
    if defaults is not None:
        gate.apply_project_defaults(verify, defaults)
    explaining = sub.add_parser(
        "explain",
        help="show what a violation kind means: a bad and a good pattern, and the fix",
        description="Print a violation kind's page (what it means, a bad and a good pattern, the fix); "
        "without KIND, list the kinds with one line each.",
    )
    explaining.add_argument("kind", nargs="?", metavar="KIND", help="a violation kind, e.g. data_race")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        defaults = config.load()
    except config.ConfigError as e:
        print(f"semcheck: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    for warning in defaults.warnings():
        print(warning, file=sys.stderr)
    parser = build_parser(defaults)
    args, extras = parser.parse_known_args(argv)
    if args.command == "explain":
        return _explain(args, extras)
    if args.command is None:
        what = (f"{_unknown_options(parser, extras)} (options go after the command: "
                "`semcheck verify [OPTIONS] PATH...`)" if extras else
                "no command given: `semcheck verify PATH...` checks kernel scripts, model files or "
                "folders of them, `semcheck explain KIND` says what a finding means "
                "(semcheck --help lists the options)")
        print(f"semcheck: error: {what}", file=sys.stderr)
        return EXIT_USAGE
    if extras:
        print(f"semcheck: error: {_unknown_options(parser, extras)} (semcheck verify --help lists the options)",
              file=sys.stderr)
        return EXIT_USAGE
    problem = gate.usage_problem(args)
    if problem:
        print(f"semcheck: error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with interrupts.terminating_raises():
            cli_options.check_all(args)
            return _verify(args)
    except (AssumptionError, cli_options.UsageError) as e:
        print(f"semcheck: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:  # before any check finished
        print(f"semcheck: interrupted ({interrupts.signal_name(e)}) before any check finished", file=sys.stderr)
        return interrupts.exit_code(e)
    except Exception as e:  # a bug in semcheck itself: say so plainly, no traceback dump
        if _is_lazy_usage_error(e):  # --baseline unreadable, --executor ray without Ray
            print(f"semcheck: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        if os.environ.get("SEMCHECK_DEBUG"):
            raise
        print(f"semcheck: internal error: {type(e).__name__}: {e}\n"
              f"  (set SEMCHECK_DEBUG=1 to see the traceback, and please report it at {ISSUES_URL})", file=sys.stderr)
        return EXIT_USAGE


def _explain(args, extras: list[str]) -> int:
    if extras:
        print(f"semcheck: error: unrecognized argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)} "
              "(semcheck explain takes one KIND)", file=sys.stderr)
        return EXIT_USAGE
    code, out, err = explain_kind(args.kind, max(60, min(100, shutil.get_terminal_size().columns - 2)))
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


# Usage errors of modules the CLI imports only when an option asks for them (the baseline
# reader, the Ray executor): a module not imported cannot have raised its error.
_LAZY_USAGE_ERRORS = (("semcheck.report.baseline", "BaselineError"), ("semcheck.run.sweep_ray", "RayUnavailable"))


def _is_lazy_usage_error(e: Exception) -> bool:
    for module, name in _LAZY_USAGE_ERRORS:
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(e, getattr(loaded, name)):
            return True
    return False


def _notice_jax_version(results) -> None:
    """One line when a kernel script was checked with a JAX semcheck was not tested with."""
    if not any(_ran_jax(r) for r in results):
        return
    from semcheck import jax_compat

    if notice := jax_compat.notice_once():
        print(f"semcheck: note: {notice}", file=sys.stderr)


def _ran_jax(result) -> bool:
    if result.frontend in ("tpu", "gpu"):
        return True
    if result.built or not result.file.endswith(".py"):
        return False
    from semcheck.errors import LoadError
    from semcheck.frontends import FileKind, classify

    try:
        return classify(result.file).kind is FileKind.KERNEL
    except (LoadError, OSError):
        return False


def _verify(args) -> int:  # noqa: C901
    _warn_about_empty_folders(args.paths)
    given, searched = args.paths, ()
    if args.changed_files:
        args.paths, searched = gate.with_importers(args)
    if args.devices == "all":
        from semcheck.parametric import command

        return command.run(args, (lambda why: gate.nothing_changed_to_check(why, searched)) if args.changed_files
                           else None)
    budget = Budget.from_env(max_states=args.max_states, timeout=args.timeout, max_memory_mb=args.max_memory)
    from semcheck.report.feedback import Position

    position = Position(total=len(discover(args.paths)) * len(args.devices))
    progress_for = None if args.quiet else _progress_printer(position, budget)
    skipped: list = []
    results, interrupted = interrupts.collect(check_paths(  # keeps what finished on Ctrl-C, marked partial
        args.paths, args.devices, engine=args.engine, budget=budget, progress_for=progress_for,
        on_load=None if args.quiet else _capture_printer(args.verbose),
        assume=args.assume, reduce=not args.no_reduction, split=not args.no_split,
        symmetry=False if args.no_symmetry else None,  # None: with the reduction
        invocations=args.invocations, skipped=skipped, cores_enter_together=args.assume_cores_enter_together,
        # a gate judges every declared kind, and a baseline hides only known findings: both need
        # every finding, or a new bug behind a known first one would pass (docs/engines.md, "The gate")
        exhaustive=args.exhaustive or args.expectations or args.baseline is not None,
        **({} if args.unroll is None else {"unroll": args.unroll}), **gate.sweep_arguments(args, position),
    ))
    _clear_progress()
    _notice_jax_version(results)
    if not results:
        if args.changed_files and interrupted is None:
            reason = _nothing_to_check(argparse.Namespace(**{**vars(args), "paths": given}), skipped)
            return gate.nothing_changed_to_check(reason, searched)
        print(f"semcheck: error: {_nothing_to_check(args, skipped)}", file=sys.stderr)
        return EXIT_USAGE
    if summarize(skipped) and not args.quiet:  # -q: only why nothing is left to check (above) is said
        print(f"semcheck: {summarize(skipped)}", file=sys.stderr)
    # even with -q: an ignored declaration can turn a gate that should fail into a pass, and
    # this line is then the only sign (docs/cli.md)
    for near_miss in expectations.near_misses_in(sorted({r.file for r in results if r.file})):
        print(f"semcheck: warning: {near_miss}", file=sys.stderr)
    full, (results, hidden) = results, gate.apply_baseline(args, results)
    judgements = None
    if args.expectations:
        try:
            judgements = expectations.judge_all(full)
        except expectations.ExpectationError as e:
            print(f"semcheck: error: {e}", file=sys.stderr)
            return EXIT_USAGE
    gate.write_summary(args, results, judgements, hidden, full=full)
    options = RenderOptions(max_trace_steps=args.max_trace_steps, judgements=judgements,
                            all_traces=args.all_traces, category=args.category, verbose=args.verbose)
    gate.write_sarif(args, results, options)
    if args.format == "text" and not args.output and sys.stdout.isatty():
        options = replace(options, width=shutil.get_terminal_size().columns)  # prose lines wrap to the terminal
    rendered = _render(args.format, results, options, interrupted)
    from semcheck.report import colour

    if colour.wanted(sys.stdout):  # only what goes to a terminal: never -o's file, never a pipe
        options = replace(options, color=True)
    written = True
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(rendered)
        except OSError as e:  # checked before the run; the disk can still refuse
            print(f"semcheck: error: cannot write -o {args.output}: {e.strerror or e}", file=sys.stderr)
            written = False
        if not written or (not args.quiet and args.format != "text"):
            sys.stdout.write(rendered if not written else _render("text", results, options, interrupted))
    else:
        if options.color and args.format == "text":
            rendered = _render("text", results, options, interrupted)
        sys.stdout.write(rendered if rendered.endswith("\n") else rendered + "\n")
    if args.graph:
        code = _draw(results, args.graph)
        if code and not interrupted:
            return code
    if judgements is not None:
        _list_mismatches(full, judgements)
    if interrupted is not None:
        print(f"semcheck: interrupted ({interrupts.signal_name(interrupted)}): the report holds the "
              f"{len(results)} check(s) that finished", file=sys.stderr)
        return interrupts.exit_code(interrupted)
    if not written:
        return EXIT_USAGE
    if judgements is not None:
        return EXIT_CODES[gate.run_verdict(full, results, judgements)]
    return EXIT_CODES[worst(r.verdict for r in results)]


def _render(fmt: str, results: list, options: RenderOptions, interrupted: KeyboardInterrupt | None) -> str:
    """The report in `fmt`; a text report of an interrupted run says so in its last line, so
    that the report alone (a file, a pipe, a scrolled terminal) never reads as the whole run
    (json and sarif carry the partial-run note in every result)."""
    rendered = FORMATS[fmt](results, options)
    if fmt != "text" or interrupted is None:
        return rendered
    return (rendered.rstrip("\n") + f"\nPARTIAL: semcheck was interrupted ({interrupts.signal_name(interrupted)}) "
            f"after {len(results)} check(s) finished; the checks after them were not run\n")


def _nothing_to_check(args, skipped: list) -> str:
    """Why there is nothing to check. A script that ran but compiled no Pallas kernel is the
    usual reason: say which, at which device counts, and what semcheck looks for."""
    empty = sorted({s.path for s in skipped if s.why is Why.NO_KERNEL})
    if not empty:
        return "nothing to check: no kernel scripts or models in " + ", ".join(args.paths)
    counts = ", ".join(map(str, args.devices))
    named = ", ".join(display_path(p) for p in empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
    return (f"nothing to check: {named} ran with {counts} devices but compiled no Pallas kernel\n"
            "  hint: semcheck checks the kernels a script compiles when run as `python FILE` "
            "(pl.pallas_call, pl.kernel, pl.core_map, plgpu.kernel); make the script call its kernel, "
            "e.g. under `if __name__ == \"__main__\":`, or write a model file (a `model(devices)` function)")


def _list_mismatches(results: list, judgements: list) -> None:
    """The checks not as declared, last on stderr: a CI log that keeps only its tail still
    says which checks failed the gate and why."""
    missed = [(r, j) for r, j in zip(results, judgements) if not j.matched]
    if not missed:
        return
    print(f"semcheck: {len(missed)} check(s) not as declared:", file=sys.stderr)
    for result, judgement in missed:
        why = result.exhausted or result.unjustified or (result.error or "").split("\n")[0]
        print(f"  {display_path(result.file)} {result.kernel} at {result.devices} devices: {judgement.reason}"
              + (f" ({why})" if why else ""), file=sys.stderr)


def _warn_about_empty_folders(paths: list[str]) -> None:
    for path in paths:
        if os.path.isdir(path) and not discover([path]):
            print(f"semcheck: {path}: no kernel scripts or models (.py files) to check", file=sys.stderr)


def _draw(results, path: str) -> int:
    from semcheck.report import draw  # Graphviz is needed only when drawing

    try:
        written = draw.write_counterexamples(results, path)
    except draw.DrawError as e:
        print(f"semcheck: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if not written:
        print("semcheck: no counterexample to draw: no check has an error that a schedule shows", file=sys.stderr)
    for name in written:
        print(f"semcheck: counterexample drawn to {name}", file=sys.stderr)
    return 0


_progress_shown = False


# Off a terminal (a CI log) a progress line is a line for good: at most one this often.
LOG_PROGRESS_EVERY = 15.0


def _progress_printer(position, budget: Budget):
    """progress_for: a progress line per check, with where the run is (`[3/12]`, the
    (file, device count) pairs done of all) and what is left of the check's budget."""
    from semcheck.report.feedback import progress_line

    def printer(kernel: str, devices: int):
        tty = sys.stderr.isatty()
        last_logged = [-LOG_PROGRESS_EVERY]

        def show(info: ProgressInfo) -> None:
            if not tty:
                now = time.monotonic()
                if now - last_logged[0] < LOG_PROGRESS_EVERY:
                    return
                last_logged[0] = now
            line = progress_line(kernel, devices, info, position, budget)
            if tty:
                _show_in_place(line)
            else:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()

        return show

    return printer


def _capture_printer(verbose: bool):
    """Where a capture line goes: on a terminal it is progress, shown in place until the next
    line or the report (so that the report keeps to a screen), and kept with -v; off a
    terminal (a CI log) every one is a line for good."""
    from semcheck.report.feedback import capture_line, capture_line_printer

    if verbose or not sys.stderr.isatty():
        return capture_line_printer(sys.stderr, before=_clear_progress)

    def show(report) -> None:
        line = capture_line(report)
        if line is not None:
            _show_in_place(line)

    return show


def _show_in_place(line: str) -> None:
    """`line` on the terminal's last line, over what was there, until the next one or the
    report (`_clear_progress`)."""
    global _progress_shown
    width = shutil.get_terminal_size().columns - 1
    sys.stderr.write("\r" + line[:width].ljust(min(width, 120)))
    sys.stderr.flush()
    _progress_shown = True


def _clear_progress() -> None:
    global _progress_shown
    if _progress_shown:
        sys.stderr.write("\r" + " " * min(shutil.get_terminal_size().columns - 1, 120) + "\r")
        _progress_shown = False


if __name__ == "__main__":
    raise SystemExit(main())
