"""The proof for every N from some N0 on, for a template: the orderings (no race, no early
arrival) first, since their windows decide N0, then what counting decides (no block for
good, no leftover, no index or window outside its allocation) from N0 on."""

from __future__ import annotations

import time
from dataclasses import field

from semcheck.parametric import counting, ordering
from semcheck.parametric.template import Template, counts_text
from semcheck.records import record


@record(frozen=True)
class Proof:
    """`holds`: every property for every N >= `from_n`. Otherwise `gaps` says what could not
    be proved, and `smallest_gap` the smallest N at which a counting property fails (exact:
    the symmetric run decides those), when one does."""

    holds: bool
    from_n: int
    obligations: int = 0
    certificates: int = 0
    queries: int = 0
    window: int = 1
    seconds: float = 0.0
    gaps: tuple[str, ...] = ()
    smallest_gap: int | None = None
    kinds: tuple[str, ...] = field(default=())  # what the gaps are about (deadlock, leftover, ...)

    def _ordered(self) -> str:
        """What the certificates showed, in words that agree with the count."""
        if self.obligations == 0:
            return "no two steps could race or arrive early"
        if self.obligations == 1:
            return "the 1 pair of steps that could race or arrive early is ordered"
        return f"each of the {self.obligations} pairs of steps that could race or arrive early is ordered"

    def argument(self, template: Template) -> str:
        """The note a proved result carries."""
        return (
            f"for N >= {self.from_n} every device runs one program ({template.shape_text()}; fitted at "
            f"N = {counts_text(template.fitted_at)}" + (f", confirmed at N = {counts_text(template.confirmed_at)}"
                                                    if template.confirmed_at else "")
            + "), and z3 proved for every such N: no device blocks for good and every semaphore ends at 0 "
            "(the symmetric run, where every wait gets what the steps before it add), every semaphore "
            f"index and copy window lies inside its allocation, and {self._ordered()} (a blocking "
            "certificate over a window of "
            f"{self.window} neighbouring devices, {self.certificates} in all, {self.queries} queries)"
            + ("; no device runs the body before every device entered (the default device barrier, "
               "taken out of the template)" if template.entered_together else "") + "; "
            "the argument, and what it assumes, is docs/parametric.md"
        )



def prove(template: Template, n_min: int = 2, give_up_above: int = 12) -> Proof:
    start = time.monotonic()
    obs = ordering.obligations(template)
    outcomes = [ordering.prove(template, ob, n_min, give_up_above) for ob in obs]
    failed = [o for o in outcomes if o.proved_from is None]
    from_n = max([n_min] + [o.proved_from for o in outcomes if o.proved_from is not None])
    certificates = sum(o.certificates for o in outcomes)
    queries = sum(o.queries for o in outcomes)
    window = max([1] + [o.window for o in outcomes])
    gaps = [o.failure or "" for o in failed]
    kinds = ["data_race" if o.obligation.kind == "data_race" else "remote_before_entry" for o in failed]
    counted = []
    for kind, finder in (("blocks", counting.blocking_gaps), ("semaphore_leftover", counting.leftover_gaps),
                         ("fault", counting.fault_gaps)):
        try:
            counted += [(kind, gap) for gap in finder(template, from_n)]
        except counting.Undecided as e:
            gaps.append(f"what counting decides ({kind}): {e}")
            kinds.append(kind)
    gaps += [f"{gap.what} (from N = {gap.smallest})" for _, gap in counted]
    kinds += [kind for kind, _ in counted]
    smallest = min((gap.smallest for _, gap in counted), default=None)
    return Proof(
        holds=not gaps, from_n=from_n, obligations=len(obs), certificates=certificates, queries=queries,
        window=window, seconds=time.monotonic() - start, gaps=tuple(gaps), smallest_gap=smallest,
        kinds=tuple(kinds),
    )
