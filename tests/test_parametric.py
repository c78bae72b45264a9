"""`--devices all` (semcheck/parametric, docs/parametric.md): the template fitted to a family,
the proof for every N, and the verdict, held to the explicit search at every count it can run.

The mutants of tests/parametric_rings.py break the ring protocols of the examples one way at
a time; for each, what `--devices all` says must be what the explicit search says count by
count: a "safe for every N" is safe at every count searched, and a smallest failing N is the
smallest count at which the explicit search finds a violation, of the kind it finds there.
"""

from __future__ import annotations

import functools
import json
import os
import sys

import pytest
import z3

from semcheck.api import check_protocol
from semcheck.parametric import expr as ex
from semcheck.parametric import runs
from semcheck.parametric.family import EveryCount, every_count_of
from semcheck.parametric.template import NotParametric, Seg, fit_template
from semcheck.result import Verdict

sys.path.insert(0, os.path.dirname(__file__))
from parametric_rings import MUTANTS, allgather, allreduce, permute  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST_UP_TO = 8  # the fast tier compares counts 2..8; the slow tier 2..16 and 64


# --- the expression grammar -------------------------------------------------------------------------


def _samples(f, ns=(4, 5, 6, 7), rounds=True):
    return [(d, k, n, f(d, k, n)) for n in ns for d in range(n) for k in (range(n - 1) if rounds else (0,))]


@pytest.mark.parametrize("f, text", [
    (lambda d, k, n: 7, "7"),
    (lambda d, k, n: n - 1, "N - 1"),
    (lambda d, k, n: (d + 1) % n, "((d + 1) mod N)"),
    (lambda d, k, n: (d - k) % n, "((d - k) mod N)"),
    (lambda d, k, n: 8 * ((d - k - 3) % n), "8*((d - k - 3) mod N)"),
    (lambda d, k, n: 1 - k % 2, "-((k) mod 2) + 1"),
    (lambda d, k, n: (n - 1) + k, "k + N - 1"),
    (lambda d, k, n: n % 2, "((N) mod 2)"),
])
def test_fit_finds_the_form(f, text):
    found = ex.fit(_samples(f))
    assert found is not None and str(found) == text
    assert all(found.value(d, k, n) == v for d, k, n, v in _samples(f, ns=(9, 12)))


def test_fit_refuses_what_no_form_gives():
    assert ex.fit(_samples(lambda d, k, n: d * k)) is None
    assert ex.fit(_samples(lambda d, k, n: 1 << k)) is None


def test_neighbour_offsets():
    assert ex.fit(_samples(lambda d, k, n: (d - 1) % n)).device_offset() == -1
    assert ex.fit(_samples(lambda d, k, n: (d + k) % n)).device_offset() is None
    assert ex.fit(_samples(lambda d, k, n: d)).device_offset() is None


@pytest.mark.parametrize("form", [
    ex.Expr(scale=8, mod_d=1, mod_k=-1, mod_c=-3), ex.Expr(const=1, scale=-1, mod_k=1, modulus=2),
    ex.Expr(k=1, n=1, const=-1), ex.Expr(scale=1, mod_n=1, modulus=2), ex.neighbour(-1),
])
def test_z3_term_is_the_value(form):
    """The mod-N encoding (a remainder and a bounded quotient) gives exactly the value."""
    for n in (3, 7, 16):
        for d in (0, n - 1):
            for k in (0, n - 2):
                side: list = []
                term = form.term(z3.IntVal(d), z3.IntVal(k), z3.IntVal(n), side, 2, (1, 0))
                solver = z3.Solver()
                solver.add(*side)
                assert solver.check() == z3.sat
                assert solver.model().eval(term, model_completion=True).as_long() == form.value(d, k, n)


# --- the template ----------------------------------------------------------------------------------------


def _fit(model, ns=(2, 3, 4, 5, 6, 7, 8)):
    return fit_template({n: model(n) for n in ns}, (4, 5, 6, 7))


def test_template_of_the_ring_allgather():
    t = _fit(allgather)
    assert (len(t.pro), len(t.body), len(t.epi)) == (4, 3, 1)
    assert (t.trip_a, t.trip_b) == (1, -1)  # N - 1 rounds
    assert t.holds_from == 2 and t.confirmed_at == (2, 3, 8)
    start = t.body[0]
    assert start.recv is not None and start.recv.offset == 1 and str(start.recv.index) == "k"
    assert [str(e) for e in start.accesses[0].starts] == ["((d - k) mod N)", "0", "0"]
    assert str(t.sem_sizes["recv_sem"]) == "N - 1"
    assert t.offsets() == {-1, 0, 1}


def test_default_device_barrier_is_taken_out():
    """XLA's barrier before the body, as the TPU lowering models it (device 0 runs more of it):
    taken out of the template, and with it every early-arrival ordering."""
    from semcheck.lower import tpu_kernel
    from semcheck.parametric import template

    assert (template.BARRIER_ARRIVE, template.BARRIER_RELEASE) == (tpu_kernel.ARRIVE, tpu_kernel.RELEASE)
    t = _fit(lambda n: allgather(n, barrier=False, default_barrier=True))
    assert t.entered_together and len(t.pro) == 1 and "device_barrier.arrive" not in t.sem_decls
    stripped, had = template.without_default_barrier(allgather(4, barrier=False, default_barrier=True))
    assert had and [t.body for t in stripped.threads] == [t.body for t in allgather(4, barrier=False).threads]


def test_template_counts_below_the_fit_may_differ():
    t = _fit(lambda n: permute(n, handshake=n != 2))
    assert t.holds_from == 3 and t.confirmed_at == (3, 8)


@pytest.mark.parametrize("model, reason", [
    (MUTANTS["token_from_device0"][0], "device 1 does not run device 0's program"),
    (lambda n: allgather(n, shared_recv=n == 8), "does not hold at N = 8"),
    (lambda n: _rounds(n, max(n.bit_length() - 1, 1)), "does not hold at N = 8: device 0 runs 6 instructions"),
    (lambda n: _rounds(n, n * (n - 1) // 2), "rounds is not a*N + b: 6 at N = 4, 10 at N = 5"),
    (lambda n: _all_to_all(n), "only a ring neighbour (d + c) mod N"),
    (lambda n: _indexed_by_device(n), "depends on the device"),
])
def test_not_parametric_says_why(model, reason):
    with pytest.raises(NotParametric, match=reason.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")
                       .replace("*", r"\*")):
        _fit(model)


def _rounds(n, rounds):
    """A ring handoff repeated `rounds` times (log N: constant at N = 4..7; N(N-1)/2: not a*N + b)."""
    from semcheck.model import ProtocolBuilder

    p = ProtocolBuilder("rounds", devices=n, backend="tpu")
    sem = p.semaphore("sem")
    for d in range(n):
        t = p.thread(d)
        for _ in range(rounds):
            t.signal(sem, device=(d + 1) % n)
            t.wait(sem)
    return p.build()


def _all_to_all(n):
    from semcheck.model import ProtocolBuilder

    p = ProtocolBuilder("all_to_all", devices=n, backend="tpu")
    sem = p.semaphore("sem")
    for d in range(n):
        t = p.thread(d)
        for k in range(1, n):
            t.signal(sem, device=(d + k) % n)
        t.wait(sem, n - 1)
    return p.build()


def _indexed_by_device(n):
    from semcheck.model import ProtocolBuilder

    p = ProtocolBuilder("by_device", devices=n, backend="tpu")
    sem = p.semaphore("sem", size=n)
    for d in range(n):
        t = p.thread(d)
        t.signal(sem[d], device=(d + 1) % n)
        t.wait(sem[(d - 1) % n])
    return p.build()


# --- the symmetric run decides blocking and leftovers ------------------------------------------------------


@functools.cache
def _in_class(name):
    try:
        return _fit(MUTANTS[name][0])
    except NotParametric:
        return None


def _blocking_mutants():
    """The mutants of one template, except those that race or arrive early: a schedule that
    races reaches end states the lockstep run never does, but the race is the finding (and
    searching all of them is slow); blocking and leftovers are compared where they decide."""
    return sorted(name for name, (_, expected) in MUTANTS.items()
                  if not (isinstance(expected, tuple) and expected[0] in ("data_race", "remote_before_entry"))
                  and _in_class(name) is not None)


@pytest.mark.parametrize("name", _blocking_mutants())
def test_symmetric_run_is_where_every_schedule_ends(name):
    """Every maximal run ends where the lockstep run ends (docs/parametric.md): it stops at a
    wait exactly where the explicit search finds a device blocked for good, and its final
    counts are a leftover exactly where the search finds one."""
    template = _in_class(name)
    assert template is not None
    model = MUTANTS[name][0]
    for n in range(max(2, template.holds_from), 7):
        stuck, counts = runs.symmetric_run(template, n)
        result = check_protocol(model(n), engine="explicit", exhaustive=True)
        kinds = {v.kind for v in result.errors}
        assert (stuck is not None) == bool(kinds & {"deadlock", "unsatisfied_wait"}), (n, kinds)
        if stuck is None:
            zero_at_exit = {name for name, decl in template.sem_decls.items() if decl.origin.value != "argument"}
            left = {alloc for (alloc, _), c in counts.items() if c and alloc in zero_at_exit}
            assert bool(left) == ("semaphore_leftover" in kinds), (n, left, kinds)


# --- every mutant: --devices all against the explicit search ------------------------------------------------


@functools.cache
def _outcome(name):
    return every_count_of(MUTANTS[name][0], EveryCount(search_up_to=FAST_UP_TO))


@functools.cache
def _explicit(name, n):
    result = check_protocol(MUTANTS[name][0](n), engine="explicit", stop_at_first=True)
    return result.verdict, frozenset(v.kind for v in result.errors)


def _agree(name, counts):
    outcome = _outcome(name)
    expected = MUTANTS[name][1]
    if expected == "safe":
        assert outcome.verdict is Verdict.SAFE, outcome.claim
        assert "safe for every device count N >= 2" in outcome.claim
        assert outcome.proof is not None and outcome.proof.holds
        for n in counts:
            assert _explicit(name, n)[0] is Verdict.SAFE, n
    elif expected == "not parametric":
        assert outcome.verdict is Verdict.INCONCLUSIVE
        assert "not parametric" in outcome.claim
        for n in counts:
            assert _explicit(name, n)[0] is not Verdict.VIOLATION, n
    else:
        kind, smallest = expected
        assert outcome.verdict is Verdict.VIOLATION, outcome.claim
        assert outcome.smallest == smallest
        assert kind in {v.kind for v in outcome.result.errors}
        assert outcome.result.devices == smallest
        for n in (n for n in counts if n <= smallest):  # what makes it the smallest
            verdict, kinds = _explicit(name, n)
            if n < smallest:
                assert verdict is Verdict.SAFE, n
            else:
                assert verdict is Verdict.VIOLATION and kind in kinds, (n, kinds)
        if outcome.proof is not None and outcome.proof.holds:  # a proof is only ever for counts that pass
            assert smallest < outcome.proof.from_n


def test_there_are_twenty_mutants_that_fail():
    failing = [name for name, (_, expected) in MUTANTS.items() if isinstance(expected, tuple)]
    assert len(failing) >= 20
    assert len({MUTANTS[name][1][0] for name in failing}) >= 6  # kinds: race, arrival, deadlock, ...


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_agrees_with_the_explicit_search(name):
    _agree(name, range(2, FAST_UP_TO + 1))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n, (_, e) in MUTANTS.items() if e == "safe"))
def test_safe_for_every_n_agrees_up_to_16_and_at_64(name):
    _agree(name, range(2, 17))
    result = check_protocol(MUTANTS[name][0](64), engine="explicit", stop_at_first=True)
    assert result.verdict is Verdict.SAFE


def test_proof_counts_and_windows_of_the_ring_allgather():
    outcome = _outcome("allgather")
    proof = outcome.proof
    assert proof is not None and proof.from_n == 2 and proof.window == 2
    # a copy's start against the copies still writing the slot it reads, writing the slot it
    # writes, and reading the slot it writes; and its landing after its target's entry
    assert proof.obligations == 4
    assert outcome.checked == {}  # nothing below N0 = 2 to check one by one
    assert outcome.result.notes[0].startswith("safe for every device count N >= 2: for N >= 2 every device")


def test_allreduce_is_checked_below_its_proof():
    outcome = _outcome("allreduce")
    assert outcome.proof is not None and outcome.proof.from_n == 3
    assert outcome.checked == {2: Verdict.SAFE}
    assert outcome.result.notes[0].startswith("safe for every device count N >= 2: N = 2 checked one by one")


def test_violation_below_the_proof_names_both():
    outcome = _outcome("permute_no_handshake_at_2")
    assert outcome.proof is not None and outcome.proof.holds and outcome.proof.from_n == 3
    assert outcome.result.notes[:2] == [
        "remote_before_entry at N = 2, the smallest device count with a violation",
        "for N >= 3 the kernel is proved safe (docs/parametric.md)",
    ]


def test_capacity_to_the_wrong_neighbour_names_the_smallest_count():
    outcome = _outcome("allreduce_capacity_to_right")
    assert outcome.claim == "data_race at N = 3, the smallest device count with a violation (N = 2 is safe)"
    assert outcome.checked == {2: Verdict.SAFE, 3: Verdict.VIOLATION}
    assert any("no proof for every N: no blocking certificate" in note for note in outcome.result.notes)


def _rows_by_device(view: bool, rows: int = 1):
    """Device d stores `rows` rows from row d of an 8-row buffer (checked, as a TPU store
    is), or of the 8-row `.at[...]` view at the top of a 16-row one: one row is inside up to
    N = 8, an empty window (no rows) up to N = 9 (it starts one past the end)."""

    def model(n):
        from semcheck.model import ProtocolBuilder

        p = ProtocolBuilder("rows_by_device", devices=n, backend="tpu")
        buf = p.buffer("buf", (16, 8) if view else (8, 8), space="vmem")
        for d in range(n):
            p.thread(d).store(buf.region(d, size=(rows, 8)), checked=True,
                              view=buf.region(0, size=(8, 8)) if view else None)
        return p.build()

    return model


@pytest.mark.parametrize("view", [False, True])
def test_a_load_or_store_window_that_leaves_its_buffer_or_view_at_a_larger_count_is_found(view):
    """The proof once checked copy windows only: a checked store leaving its buffer (or its
    view) from N = 9 on was "safe for every N" with the counts up to 4 searched."""
    outcome = every_count_of(_rows_by_device(view), EveryCount(search_up_to=4))
    assert outcome.verdict is Verdict.VIOLATION and outcome.smallest == 9, outcome.claim
    [fault] = outcome.result.errors
    assert fault.kind == "invalid_region" and fault.device == 8
    assert ("outside its .at[...] view [0:8, 0:8]" in fault.message) is view


@pytest.mark.parametrize("view", [False, True])
def test_an_empty_window_is_inside_one_past_its_buffer_or_view_and_outside_further_on(view):
    """The proof judges an empty window against a view as against a buffer, and as the
    engines do: row 8 of 8 (one past the end) is inside, row 9 is not."""
    outcome = every_count_of(_rows_by_device(view, rows=0), EveryCount(search_up_to=4))
    assert outcome.verdict is Verdict.VIOLATION and outcome.smallest == 10, outcome.claim
    [fault] = outcome.result.errors
    assert fault.kind == "invalid_region" and fault.device == 9
    assert ("outside its .at[...] view [0:8, 0:8]" in fault.message) is view


def _empty_copies_by_device(bounds_checked: bool):
    """Device d copies the empty window at row d of its 8-row buffer into row 0, from a
    kernel compiled with disable_bounds_checks=True where `bounds_checked` is False."""
    from dataclasses import replace

    from semcheck import ir
    from semcheck.model import DMA, ProtocolBuilder

    def model(n):
        p = ProtocolBuilder("empty_copies_by_device", devices=n, backend="tpu")
        sem = p.semaphore("sem", DMA)
        buf = p.buffer("buf", (8, 8), space="vmem")
        for d in range(n):
            p.thread(d).dma_start(buf.region(d, size=(0, 8)), buf.region(0, size=(0, 8)), recv_sem=sem).wait_recv()
        built = p.build()
        threads = tuple(replace(t, body=tuple(replace(i, bounds_checked=bounds_checked) if isinstance(i, ir.DmaStart)
                                              else i for i in t.body)) for t in built.threads)
        return replace(built, threads=threads)

    return model


@pytest.mark.parametrize("bounds_checked", [True, False])
def test_an_empty_copy_window_past_its_buffer_faults_only_where_the_windows_are_checked(bounds_checked):
    """The proof judges an empty copy window as the engines do (`semantics.rules._check_window`):
    one past the end is inside, further on a fault where Mosaic checks the windows, and no
    fault where nothing does. Was a gap from N = 10 without the bounds checks, so the proof
    did not hold for a kernel the engines call safe at every count."""
    outcome = every_count_of(_empty_copies_by_device(bounds_checked), EveryCount(search_up_to=4))
    if bounds_checked:
        assert outcome.verdict is Verdict.VIOLATION and outcome.smallest == 10, outcome.claim
    else:
        assert outcome.verdict is Verdict.SAFE and outcome.proof is not None and outcome.proof.holds, outcome.claim


# --- the command line ------------------------------------------------------------------------------------------


def test_cli_devices_all(capsys):
    from semcheck.cli import main

    code = main(["verify", os.path.join(ROOT, "models", "ring_allgather.py"),
                 os.path.join(ROOT, "models", "ring_allgather_shared_recv.py"), "--devices", "all", "-q"])
    out = capsys.readouterr().out
    assert code == 1
    assert "SAFE FOR EVERY DEVICE COUNT: ring_allgather models/ring_allgather.py:29: safe for every device count N >= 2" in out
    assert ("VIOLATION: ring_allgather_shared_recv models/ring_allgather_shared_recv.py:22: data_race at N = 3, "
            "the smallest device count with a violation (N = 2 is safe)") in out
    assert "VIOLATION: ring_allgather_shared_recv [3 devices" in out  # the counterexample, as at one count


def test_cli_devices_all_json(capsys):
    from semcheck.cli import main

    code = main(["verify", os.path.join(ROOT, "models", "ring_allgather.py"), "--devices", "all", "-q",
                 "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    (result,) = report["results"]
    assert result["verdict"] == "safe" and result["engine"] == "parametric"
    assert result["notes"][0].startswith("safe for every device count N >= 2")


@pytest.mark.parametrize("flags, message", [
    (["--expectations"], "--expectations cannot be combined with --devices all"),
    (["--invocations", "2"], "--devices all covers one invocation"),
    (["--engine", "z3"], "leave --engine out"),
])
def test_cli_devices_all_refuses_what_it_cannot_honour(capsys, flags, message):
    from semcheck.cli import main

    code = main(["verify", os.path.join(ROOT, "models", "ring_allgather.py"), "--devices", "all", *flags])
    assert code == 2
    assert message in capsys.readouterr().err


def test_every_count_of_a_template_segment_names_are_stable():
    # the proof's notes name the layout in the template's own terms
    t = _fit(allreduce)
    assert t.shape_text() == "a prologue of 8 instructions, a loop of N rounds of 10, an epilogue of 1"
    assert {s.seg for s in t.steps} == {Seg.PRO, Seg.BODY, Seg.EPI}


def test_python_api_devices_all():
    import semcheck

    proved = semcheck.verify_model(allgather, devices="all")
    assert proved.verdict is Verdict.SAFE and proved.engine == "parametric" and proved.devices == 0
    (found,) = semcheck.verify_path(os.path.join(ROOT, "models", "ring_allgather_shared_recv.py"), devices="all")
    assert found.verdict is Verdict.VIOLATION and found.devices == 3
    assert found.notes[0] == "data_race at N = 3, the smallest device count with a violation (N = 2 is safe)"


def test_no_answer_from_z3_is_no_proof(monkeypatch):
    """A query z3 cannot decide (its time ran out) proves nothing: the template is not proved."""
    from semcheck.parametric import prove

    template = _fit(allgather)
    monkeypatch.setattr(z3.Optimize, "check", lambda self, *a: z3.unknown)
    proof = prove.prove(template)
    assert not proof.holds
    assert any("z3 gave no answer within 30 s" in gap for gap in proof.gaps)
