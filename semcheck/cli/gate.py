"""The CI-gate side of `semcheck verify`: project defaults (`[tool.semcheck]`), parallel and
distributed sweeps (`-j`, `--executor ray`), `--baseline`, `--summary` and `--category`.
Kept apart from command.py so that the run loop there stays one call per step."""

from __future__ import annotations

import argparse
import os
import sys

from semcheck.cli import config
from semcheck.report import RenderOptions
from semcheck.result import Result, Verdict, worst
from semcheck.run.sweep import Executor
from semcheck.run.tasks import Task, TaskOutcome

SUMMARY_VARIABLE = "GITHUB_STEP_SUMMARY"


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of parallel jobs, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"-j needs at least 1 job, got {n}")
    return n


def add_arguments(verify: argparse.ArgumentParser) -> None:
    verify.add_argument("-j", "--jobs", type=_jobs, default=None, metavar="N",
                        help="run the captures and checks of N (file, device count) pairs at once, "
                        "in worker processes (default: 1, so that Ctrl-C keeps every finished "
                        "check); the report is the same as with -j 1, in the same order")
    verify.add_argument("--executor", choices=[e.value for e in Executor], default=Executor.LOCAL.value,
                        help="where the checks run: local (this machine, -j workers) or ray (a Ray "
                        "cluster: --ray-address, or RAY_ADDRESS, or a local one started for the run; "
                        "default: local)")
    verify.add_argument("--ray-address", metavar="ADDR", default=None,
                        help="the Ray cluster to send checks to (e.g. ray://head:10001 or auto)")
    verify.add_argument("--baseline", metavar="FILE", default=None,
                        help="a previous --format json or sarif result: report and gate only on "
                        "findings it does not have")
    verify.add_argument("--summary", metavar="FILE.md", default=None,
                        help=f"write a Markdown summary to FILE (appended to ${SUMMARY_VARIABLE} "
                        "by itself when that is set)")
    verify.add_argument("--sarif", metavar="FILE", default=None,
                        help="also write the SARIF report to FILE, whatever --format prints "
                        "(e.g. --format github for annotations and --sarif for code scanning)")
    verify.add_argument("--changed-files", action="store_true",
                        help="the PATHs are the files a change touched, as a pre-commit hook passes "
                        "them: each brings in the kernel scripts that import it (in its own folder "
                        "and [tool.semcheck] paths), and a change with nothing to check passes with "
                        "one line instead of failing (docs/ci.md, pre-commit)")
    verify.set_defaults(project_paths=())
    verify.add_argument("--category", metavar="NAME", default=None,
                        help="SARIF: the analysis category (runAutomationDetails.id), to keep several "
                        "analyses of one commit apart in code scanning")


def usage_problem(args) -> str | None:
    """What is wrong with the gate flags as given together, if anything."""
    if not args.paths:
        return "no PATH given, and no [tool.semcheck] paths in pyproject.toml"
    if args.ray_address and args.executor != Executor.RAY.value:
        return "--ray-address needs --executor ray"
    return None


def apply_project_defaults(verify: argparse.ArgumentParser, defaults: config.Defaults) -> None:
    """`[tool.semcheck]` values become the parser's defaults, so flags override them."""
    values: dict[str, object] = {}
    if defaults.paths is not None:
        values["paths"] = list(defaults.paths)
        values["project_paths"] = tuple(defaults.paths)  # where --changed-files looks for importers
    if defaults.devices is not None:
        values["devices"] = list(defaults.devices)
    if defaults.engine is not None:
        values["engine"] = defaults.engine
    if defaults.timeout is not None and "SEMCHECK_TIMEOUT" not in os.environ:
        values["timeout"] = defaults.timeout
    if defaults.invocations is not None:
        values["invocations"] = defaults.invocations
    if defaults.exhaustive is not None:
        values["exhaustive"] = defaults.exhaustive
    verify.set_defaults(**values)


def with_importers(args):
    """--changed-files: the changed files, then the kernel scripts that import them (one
    line on stderr naming those, unless -q); and the folders they were looked for in."""
    from semcheck.frontends.importers import importers_of

    reach = importers_of(args.paths, args.project_paths)
    given = {os.path.realpath(p) for p in args.paths}
    added = [p for p in reach.scripts if os.path.realpath(p) not in given]
    if added and not args.quiet:
        names = ", ".join(added[:4]) + (f" and {len(added) - 4} more" if len(added) > 4 else "")
        computed = [p for p in added if p in reach.computed]
        maybe = (f" ({len(computed)} of them may not: {', '.join(computed[:2])}{' and more' if len(computed) > 2 else ''}"
                 f" import{'s' if len(computed) == 1 else ''} a module by a name computed at run time)") if computed else ""
        print(f"semcheck: also checking {len(added)} kernel script{'s' if len(added) != 1 else ''} "
              f"that import{'s' if len(added) == 1 else ''} a changed file: {names}{maybe}", file=sys.stderr)
    return list(args.paths) + added, reach.searched


def nothing_changed_to_check(reason: str, searched: tuple[str, ...]) -> int:
    """--changed-files with nothing to check: a commit that touched no kernel passes."""
    where = f" in {', '.join(os.path.join(folder, '') for folder in searched)}" if searched else ""
    print(f"semcheck: {reason.splitlines()[0]}; no kernel script{where} imports the changed files, so the "
          "change passes (--changed-files)", file=sys.stderr)
    return 0


def sweep_arguments(args, position=None) -> dict:
    """verify_path's keyword arguments for where and how wide the sweep runs; `position`
    (report/feedback.Position) counts the finished (file, device count) tasks."""
    # One task at a time unless -j says otherwise: results then reach the report as each check
    # ends, so Ctrl-C keeps every finished one (a pool hands them back only at the end).
    jobs = args.jobs if args.jobs is not None else 1
    shown = not args.quiet and (jobs > 1 or args.executor == Executor.RAY.value)
    return {"jobs": jobs, "executor": args.executor, "ray_address": args.ray_address,
            "on_done": _done_printer(position, shown) if shown or position is not None else None}


def _done_printer(position=None, shown: bool = True):
    """Counts each finished (file, device count) in `position`; with checks running out of
    order (`shown`), one line per task as it finishes: `[3/12]`."""
    finished = 0

    def done(task: Task, outcome: TaskOutcome) -> None:
        nonlocal finished
        finished += 1
        if position is not None:
            position.done()
        if not shown:
            return
        of = f"/{position.total}" if position is not None and position.total else ""
        verdicts = ", ".join(f"{r.kernel} {r.verdict.value}" for r in outcome.results) or "nothing"
        seconds = sum(r.stats.seconds for r in outcome.results)
        sys.stderr.write(f"semcheck: [{finished}{of}] {task.path} [{task.devices} devices]: {verdicts} "
                         f"({seconds:.1f} s checking)\n")
        sys.stderr.flush()

    return done


def apply_baseline(args, results):
    """The results without the findings the baseline has, and how many were hidden."""
    if not args.baseline:
        return results, 0
    from semcheck.report import baseline

    return baseline.without_known(results, baseline.known_fingerprints(args.baseline), args.baseline)


def judged_verdict(full: Result, shown: Result, judgement) -> Verdict:
    """What a check counts as under --expectations (judged on its full findings), when a
    baseline may have hidden some: a mismatch made only of findings the baseline knows
    passes, like any known finding."""
    from semcheck.run.expectations import effective_verdict

    verdict = effective_verdict(full, judgement)
    if verdict is Verdict.VIOLATION and shown is not full and not shown.errors:
        return Verdict.SAFE
    return verdict


def run_verdict(full: list[Result], shown: list[Result], judgements) -> Verdict:
    """What the whole run counts as under --expectations: its exit code, and the headline
    of its summary."""
    return worst(judged_verdict(f, r, j) for f, r, j in zip(full, shown, judgements))


def write_summary(args, results, judgements, hidden: int, full=None) -> list[str]:
    """Write the Markdown summary where asked; returns the files written. `full`: the
    results before the baseline hid known findings (the gate judges those)."""
    targets = [args.summary] if args.summary else []
    step_summary = os.environ.get(SUMMARY_VARIABLE)
    if step_summary and step_summary not in targets:
        targets.append(step_summary)
    if not targets:
        return []
    from semcheck.report import job_summary

    judged = None if judgements is None else run_verdict(full or results, results, judgements)
    text = job_summary.render(results, judgements=judgements, hidden=hidden, judged=judged,
                              title=f"semcheck ({args.category})" if args.category else "semcheck")
    for path in targets:
        mode = "a" if path == step_summary else "w"  # the job summary file collects every step's
        with open(path, mode, encoding="utf-8") as f:
            f.write(text)
    return targets


def write_sarif(args, results, options: RenderOptions) -> None:
    if args.sarif:
        from semcheck.report import FORMATS

        with open(args.sarif, "w", encoding="utf-8") as f:
            f.write(FORMATS["sarif"](results, options))
