"""`--devices all`: a kernel (or model) at every device count. It loads the file at the counts
the template is fitted and confirmed at, proves the template for every N from some N0 on
(`prove`), checks every count below N0 one by one with the explicit search, and says one
verdict per kernel:

* safe for every N >= 2 (the counts below N0 checked, the rest proved), or
* a violation at the smallest N that has one (the counterexample of the explicit search
  there, every smaller count checked safe), or
* inconclusive, with the reason: `not parametric: ...` (which part is not one template), or
  no proof for every N and no violation up to the counts searched.
"""

from __future__ import annotations

import time
from dataclasses import field, replace
from typing import Callable

from semcheck.records import record
from semcheck.run.checks import check_one, error_result
from semcheck.engines.budget import Budget
from semcheck.engines.options import CheckOptions
from semcheck.errors import LoadError, NothingToCheck
from semcheck.ir import Protocol
from semcheck.parametric.prove import Proof, prove
from semcheck.parametric.template import NotParametric, Template, counts_text, fit_template
from semcheck.result import Result, Stats, Verdict

DOCS = "docs/parametric.md"


@record(frozen=True)
class EveryCount:
    """How `--devices all` goes about it (defaults: the counts fitted, confirmed and searched)."""

    fit_at: tuple[int, ...] = (4, 5, 6, 7)
    confirm_at: tuple[int, ...] = (2, 3, 8)
    search_up_to: int = 16  # without a proof: the explicit search from N = 2 up to this
    give_up_above: int = 12  # an ordering with no certificate up to this N is not proved
    budget: Budget | None = None  # for each explicit check and each load


@record
class Outcome:
    """One kernel at every device count."""

    kernel: str
    file: str
    verdict: Verdict
    claim: str  # one line: what holds for which N
    result: Result  # what the reports render (the counterexample's check, for a violation)
    checked: dict[int, Verdict] = field(default_factory=dict)  # the counts checked one by one
    proof: Proof | None = None
    template: Template | None = None
    smallest: int | None = None  # the smallest N with a violation


Loader = Callable[[int], list]  # N -> the protocols (or LoadErrors) of the file at N


def every_count(path: str, options: EveryCount = EveryCount(), load: Loader | None = None) -> list[Outcome]:
    """Every kernel of the file at `path`, at every device count."""
    if load is None:
        from semcheck.frontends import load as load_file

        def load(n: int) -> list:
            return load_file(path, n)

    family = _Family(path, load, options)
    return family.outcomes()


def every_count_of(model: Callable[[int], Protocol], options: EveryCount = EveryCount()) -> Outcome:
    """A model function (the builder API) at every device count."""
    family = _Family("", lambda n: [model(n)], options)
    return family.outcomes()[0]


class _Family:
    def __init__(self, path: str, load: Loader, options: EveryCount):
        self.path, self.load, self.options = path, load, options
        self.loaded: dict[int, list] = {}

    def at(self, n: int) -> list:
        if n not in self.loaded:
            try:
                self.loaded[n] = list(self.load(n))
            except LoadError as e:
                self.loaded[n] = [e]
        return self.loaded[n]

    def outcomes(self) -> list[Outcome]:
        counts = sorted(set(self.options.fit_at) | set(self.options.confirm_at))
        kernels = {n: self.at(n) for n in counts}
        if all(isinstance(item, NothingToCheck) for items in kernels.values() for item in items):
            return []  # no kernel at any count: not a kernel script (a folder walk's helper file)
        widths = {len(items) for items in kernels.values()}
        if len(widths) != 1:
            first = next(p for items in kernels.values() for p in items if isinstance(p, Protocol))
            return [self._inconclusive(first, "not parametric: the file runs a different number of kernels at "
                                              "different device counts", {})]
        return [self._one(index) for index in range(widths.pop())]

    def protocol(self, index: int, n: int) -> Protocol | LoadError:
        items = self.at(n)
        if index >= len(items):
            return LoadError(f"the file runs {len(items)} kernel(s) at {n} devices")
        return items[index]

    def _one(self, index: int) -> Outcome:
        start = time.monotonic()
        options = self.options
        fitted = {n: self.protocol(index, n) for n in sorted(set(options.fit_at) | set(options.confirm_at))}
        sample = next((p for p in fitted.values() if isinstance(p, Protocol)), None)
        if sample is None:
            error = next(iter(fitted.values()))
            return self._error(str(error))
        protocols = {n: p for n, p in fitted.items() if isinstance(p, Protocol)}
        broken = sorted(n for n, p in fitted.items() if not isinstance(p, Protocol))
        try:
            if any(n in broken for n in options.fit_at):
                raise NotParametric(f"the file does not load at N = {min(broken)}: {fitted[min(broken)]}")
            template = fit_template(protocols, options.fit_at)
        except NotParametric as e:
            return self._without_proof(index, sample, f"not parametric: {e}", None, None, start)
        proof = prove(template, n_min=max(2, template.holds_from), give_up_above=options.give_up_above)
        if not proof.holds:
            why = "no proof for every N: " + "; ".join(proof.gaps[:3]) + (
                f" (and {len(proof.gaps) - 3} more)" if len(proof.gaps) > 3 else "")
            return self._without_proof(index, sample, why, template, proof, start)
        checked: dict[int, Verdict] = {}
        for n in range(2, proof.from_n):
            result = self._check(index, n)
            checked[n] = result.verdict
            if result.verdict is not Verdict.SAFE:
                return self._stopped_at(result, n, checked, template, proof, start,
                                        f"for N >= {proof.from_n} the kernel is proved safe ({DOCS})")
        below = (f"N = {counts_text(checked)} checked one by one (explicit search); " if checked else "")
        claim = "safe for every device count N >= 2"
        notes = [f"{claim}: {below}{proof.argument(template)}", *_assumptions(template)]
        result = Result(
            kernel=template.name, file=template.loc.file, line=template.loc.line, frontend=template.frontend,
            backend="tpu", devices=0, cores=1, engine="parametric", verdict=Verdict.SAFE,
            stats=Stats(seconds=round(time.monotonic() - start, 4), solver_queries=proof.queries),
            notes=notes,
        )
        return Outcome(template.name, template.loc.file, Verdict.SAFE, claim, result, checked, proof, template)

    def _check(self, index: int, n: int) -> Result:
        protocol = self.protocol(index, n)
        if isinstance(protocol, LoadError):
            return error_result("", self.path, 0, n, f"cannot load at {n} devices: {protocol}", "explicit")
        budget = (self.options.budget or Budget.from_env()).started()
        # The first counterexample is enough: the count, not every finding at it, is what is searched for.
        return check_one(protocol, CheckOptions(engine="explicit"), budget=budget)

    def _without_proof(self, index: int, sample: Protocol, why: str, template: Template | None,
                       proof: Proof | None, start: float) -> Outcome:
        """Search N = 2, 3, ... explicitly for the smallest violation (and the count the
        symmetric run names, when it is beyond the search)."""
        checked: dict[int, Verdict] = {}
        limit = self.options.search_up_to if template is not None else max(self.loaded)
        counts = list(range(2, limit + 1))
        if proof is not None and proof.smallest_gap is not None and proof.smallest_gap > limit:
            counts.append(proof.smallest_gap)
        for n in counts:
            result = self._check(index, n)
            checked[n] = result.verdict
            if result.verdict is Verdict.VIOLATION:
                return self._stopped_at(result, n, checked, template, proof, start, why)
            if result.verdict is not Verdict.SAFE:
                break  # undecided at n: a violation above it would not be the smallest known
        return self._inconclusive(sample, why, checked, template, proof, start)

    def _stopped_at(self, result: Result, n: int, checked: dict[int, Verdict], template, proof, start: float,
                    why: str) -> Outcome:
        smaller = [m for m in checked if m < n]
        if result.verdict is Verdict.VIOLATION:
            kinds = ", ".join(sorted({v.kind for v in result.errors}))
            claim = f"{kinds} at N = {n}, the smallest device count with a violation"
            if smaller:
                claim += f" (N = {counts_text(smaller)} {'is' if len(smaller) == 1 else 'are'} safe)"
            if len(checked) > 1 and max(checked) > n:
                claim += f"; N = {counts_text(m for m in checked if m > n)} searched because {why}"
        else:
            claim = f"no verdict at N = {n}: {result.error or result.exhausted or result.unjustified}"
        notes = [claim, why] if result.verdict is Verdict.VIOLATION and why not in claim else [claim]
        shown = replace(result, notes=notes + list(result.notes), engine=f"{result.engine}, every count")
        return Outcome(result.kernel, result.file, result.verdict, claim, shown, checked, proof, template,
                       smallest=n if result.verdict is Verdict.VIOLATION else None)

    def _inconclusive(self, sample: Protocol, why: str, checked: dict[int, Verdict],
                      template: Template | None = None, proof: Proof | None = None, start: float = 0.0) -> Outcome:
        safe = [n for n, v in checked.items() if v is Verdict.SAFE]
        searched = f"; no violation at N = {counts_text(safe)} (explicit search)" if safe else ""
        claim = f"inconclusive for every device count: {why}{searched}"
        result = Result(
            kernel=sample.name, file=sample.loc.file, line=sample.loc.line, frontend=sample.frontend,
            backend=sample.backend.value, devices=0, cores=sample.cores, engine="parametric",
            verdict=Verdict.INCONCLUSIVE, notes=[claim],
            stats=Stats(seconds=round(time.monotonic() - start, 4) if start else 0.0),
            unjustified=f"{why}{searched}",
        )
        return Outcome(sample.name, sample.loc.file, Verdict.INCONCLUSIVE, claim, result, checked, proof, template)

    def _error(self, message: str) -> Outcome:
        import os

        kernel = os.path.splitext(os.path.basename(self.path))[0]
        result = error_result(kernel, self.path, 0, 0, message, "parametric")
        return Outcome(kernel, self.path, Verdict.ERROR, message, result)



def _assumptions(template: Template) -> list[str]:
    return [
        "assumed, not checked: the kernel's program at every N beyond the counts captured is the fitted "
        "template (a kernel whose code branches on N in ways the captures did not show is outside the "
        f"argument); one invocation; the semantics' rules for TPU ({DOCS}, \"What is assumed\")",
    ]
