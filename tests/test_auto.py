"""`--engine auto` as a portfolio: the explicit search alone while it stays narrow; simulate
and z3 joining a wide one, the engines taking turns on one core; the first counterexample
(or an exhaustive engine's verdict) ending the check; every engine's findings in the Result.
The race itself is tested with stand-in engines that count their work through the budget
(so turns rotate) and finish on cue, so no test depends on how fast anything runs."""

from __future__ import annotations

import json
import threading

import pytest

from semcheck import cli, engines
from semcheck.api import check_protocol
from semcheck.engines import auto
from semcheck.engines.budget import Budget, BudgetExceeded, Monitor, StopSignal
from semcheck.engines.options import CheckOptions
from semcheck.engines.turns import Slice, Turns
from semcheck.frontends import load
from semcheck.kinds import Kind
from semcheck.result import Result, Stats, Verdict, Violation
from semcheck.semantics import System
from tests.test_cli import model


FIRST, EXHAUSTIVE = CheckOptions(), CheckOptions(exhaustive=True)  # the first counterexample ends it, or not


def _ring(devices: int = 3):
    (protocol,) = load(model("ring_allgather"), devices)
    return protocol


def _violation(kind: Kind, line: int, engine: str) -> Violation:
    return Violation(kind=kind.value, severity="error", message=f"{kind.value} at line {line}", device=0, core=0,
                     location=None, identity=(kind, line), found_by=(engine,))


def _result(system: System, engine: str, verdict: Verdict, states: int = 0, queries=None, exhausted=None,
            violations=()) -> Result:
    from semcheck.engines.common import describing

    return Result(**describing(system.protocol), engine=engine, verdict=verdict, violations=list(violations),
                  stats=Stats(states=states, transitions=states, seconds=0.1, solver_queries=queries),
                  exhausted=exhausted)


def _engine(name: str, *, ticks: int | None = None, verdict: Verdict = Verdict.INCONCLUSIVE, frontier: int = 0,
            found=(), log: list | None = None):
    """A stand-in engine that does `ticks` units of work through its budget (forever when
    None: until stopped) and then returns `verdict` with `found`; `frontier` is what it tells
    the width watch (a wide search). `log` records which engine ran each unit."""
    def run(system, budget, progress, options):
        monitor = Monitor(budget)
        done = 0
        try:
            while ticks is None or done < ticks:
                done += 1
                if name == "explicit":  # a search tells the width watch how far it got
                    monitor.tick(done, done, frontier, done // 10)
                else:
                    monitor.check()
                if log is not None:
                    log.append(name)
        except BudgetExceeded as e:
            return _result(system, name, Verdict.INCONCLUSIVE, done, exhausted=e.reason)
        return _result(system, name, verdict, done, violations=found)

    return run


def _calls(name: str, calls: list):
    def run(system, budget, progress, options):
        calls.append(name)
        return _result(system, name, Verdict.INCONCLUSIVE, exhausted="stand-in")

    return run


def _real(name: str):
    return engines.ENGINES[name]


# --- who runs -------------------------------------------------------------------------------


def test_a_one_path_search_runs_alone_and_never_goes_to_z3():
    """The ring all-gather at 16 devices is one path (frontier 0): never wide."""
    calls: list = []
    result = auto.run(System(_ring(16)), Budget(), None, FIRST, explicit=_real("explicit"), z3=_calls("z3", calls),
                      simulate=_calls("simulate", calls))
    assert result.verdict is Verdict.SAFE and result.engine == "explicit"
    assert calls == [] and result.runs == []
    assert result.stats.states == 5 * 16 * 16 - 2 * 16 + 1  # one state per step of the one path


def test_the_width_watch_looks_at_the_frontier_and_the_steps_left():
    seen: list = []
    width = auto.Width(1_000, lambda states, projected: seen.append((states, projected)))
    for states in range(1, 2 * auto.WIDE_STATES):
        width(states, 0, states)  # one path: nothing queued, depth grows with the states
    assert seen == []  # however long (the ring model at 128 devices: 81,665 states)
    at = width.next_look  # it looks every LOOK_EVERY states
    width(at, auto.WIDE_STATES // 100 + 1, 10)  # a frontier that would outlast WIDE_STATES
    assert seen == [(at, at + (auto.WIDE_STATES // 100 + 1) * 990)]
    width(at + auto.LOOK_EVERY, 10**6, 10)
    assert len(seen) == 1  # once


def test_the_width_watch_of_a_protocol_with_loops_guesses_as_many_steps_again():
    seen: list = []
    width = auto.Width(None, lambda states, projected: seen.append(projected))
    width(auto.WARMUP_STATES, 200, 400)
    assert seen == [auto.WARMUP_STATES + 200 * 400]


def test_nothing_joins_before_the_warmup():
    seen: list = []
    width = auto.Width(10**6, lambda *a: seen.append(a))
    width(auto.WARMUP_STATES - 1, 10**6, 1)
    assert seen == []


# --- the race -------------------------------------------------------------------------------


def test_the_first_counterexample_of_any_engine_ends_the_check():
    race = _violation(Kind.DATA_RACE, 40, "simulate")
    result = auto.run(
        System(_ring()), Budget(), None, FIRST,
        explicit=_engine("explicit", frontier=10**6),  # wide, and never ends
        simulate=_engine("simulate", ticks=50_000, verdict=Verdict.VIOLATION, found=[race]),
        z3=_engine("z3"),
    )
    assert (result.verdict, result.engine, result.first_only) == (Verdict.VIOLATION, "simulate", True)
    assert [(v.kind, v.found_by) for v in result.violations] == [("data_race", ("simulate",))]
    by_engine = {r.engine: r for r in result.runs}
    assert by_engine["simulate"].decided and not by_engine["explicit"].decided
    assert by_engine["explicit"].stopped == by_engine["z3"].stopped == "engine auto: simulate decided first"
    assert result.exhausted is None
    assert result.notes[0].startswith("engine auto: the explicit search looked wide after")
    assert "simulate found the first counterexample" in result.notes[0]


def test_exhaustive_waits_for_an_exhaustive_engine_and_merges_every_finding():
    race = _violation(Kind.DATA_RACE, 40, "simulate")
    also_race = _violation(Kind.DATA_RACE, 40, "explicit")
    leftover = _violation(Kind.SEMAPHORE_LEFTOVER, 50, "explicit")
    result = auto.run(
        System(_ring()), Budget(), None, EXHAUSTIVE,
        explicit=_engine("explicit", ticks=40_000, frontier=10**6, verdict=Verdict.VIOLATION,
                         found=[also_race, leftover]),
        simulate=_engine("simulate", ticks=4_096, verdict=Verdict.VIOLATION, found=[race]),
        z3=_engine("z3"),
    )
    assert (result.verdict, result.engine, result.first_only) == (Verdict.VIOLATION, "explicit", False)
    assert {(v.kind, v.found_by) for v in result.violations} == {
        ("data_race", ("explicit", "simulate")), ("semaphore_leftover", ("explicit",)),
    }
    by_engine = {r.engine: r for r in result.runs}
    assert by_engine["explicit"].decided and by_engine["simulate"].verdict is Verdict.VIOLATION
    assert by_engine["z3"].stopped == "engine auto: explicit decided first"


def test_z3_decides_a_wide_search_and_the_others_are_stopped():
    result = auto.run(System(_ring()), Budget(), None, FIRST, explicit=_engine("explicit", frontier=10**6),
                      simulate=_engine("simulate"), z3=_engine("z3", ticks=10, verdict=Verdict.SAFE))
    assert (result.verdict, result.engine) == (Verdict.SAFE, "z3")
    assert {r.engine: r.stopped for r in result.runs} == {
        "explicit": "engine auto: z3 decided first", "simulate": "engine auto: z3 decided first", "z3": None,
    }


def test_simulate_alone_never_makes_a_check_safe_or_keeps_it_going():
    """Once every exhaustive engine ended without a verdict, the random walks are stopped
    and the check is inconclusive."""
    out_of_states = "state budget of 1,000 states ran out"

    def explicit(system, budget, progress, options):
        try:
            _engine("explicit", ticks=1_000, frontier=10**6)(system, budget, progress, options)
        finally:
            pass
        return _result(system, "explicit", Verdict.INCONCLUSIVE, 1_000, exhausted=out_of_states)

    result = auto.run(System(_ring()), Budget(), None, FIRST, explicit=explicit, simulate=_engine("simulate"),
                      z3=_engine("z3", ticks=200, verdict=Verdict.INCONCLUSIVE))
    assert result.verdict is Verdict.INCONCLUSIVE and result.exhausted == out_of_states
    assert {r.engine: r.stopped for r in result.runs}["simulate"] == "engine auto: every exhaustive engine had ended"
    assert "no engine decided" in result.notes[0]


def test_the_engines_take_turns_and_never_run_at_once():
    log: list = []
    result = auto.run(System(_ring()), Budget(), None, FIRST, explicit=_engine("explicit", ticks=2_000, frontier=10**6,
                                                                          verdict=Verdict.SAFE, log=log),
                      simulate=_engine("simulate", log=log), z3=_engine("z3", log=log))
    assert result.verdict is Verdict.SAFE
    runs = [name for i, name in enumerate(log) if i == 0 or log[i - 1] != name]
    assert set(runs) == {"explicit", "simulate", "z3"}
    # explicit's turns after the others joined are its slice long: it got no more in between
    lengths = [len(list(g)) for g in _groups(log) if g[0] == "explicit"]
    assert all(n <= auto.SLICES["explicit"].ticks for n in lengths[1:-1])


def _groups(log: list) -> list[list]:
    out: list[list] = []
    for name in log:
        if out and out[-1][0] == name:
            out[-1].append(name)
        else:
            out.append([name])
    return out


def test_turns_hand_over_round_robin_by_slice():
    turns = Turns()
    order: list = []
    running = threading.Semaphore(1)  # nobody else may run while a member works
    members = [turns.join(name, Slice(ticks=3)) for name in ("a", "b")]

    def work(turn, name):
        turn.begin()
        for _ in range(9):
            assert running.acquire(blocking=False), "two members ran at once"
            order.append(name)
            running.release()
            turn.tick()
        turn.leave()

    threads = [threading.Thread(target=work, args=(t, t.name)) for t in members]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert "".join(order) == "aaabbbaaabbbaaabbb"


def test_a_stopped_member_waiting_for_its_turn_raises():
    turns = Turns()
    turns.join("a", Slice(ticks=1))
    b = turns.join("b", Slice(ticks=1))
    stop = StopSignal()
    stop.stop("decided elsewhere")
    with pytest.raises(BudgetExceeded, match="decided elsewhere"):
        b.begin(stop)


def _burn(cpu_seconds: float) -> None:
    """Spend this much CPU of the calling thread (a solver call that cannot be cut)."""
    import time

    until = time.thread_time() + cpu_seconds
    while time.thread_time() < until:
        pass


def test_a_turn_that_overran_lends_its_cpu_to_a_member_with_a_share():
    """A member with share 1 gets, in its next turn, at least the CPU by which the other
    member's turn overran its slice; one without a share keeps its slice. CPU time of each thread is what
    is compared (`thread_time`), so the machine's load cannot change the outcome."""
    import time

    turns = Turns()
    solver = turns.join("z3", Slice(seconds=0.001))
    search = turns.join("explicit", Slice(ticks=1), share=1.0)
    walks = turns.join("simulate", Slice(ticks=1))
    spent: dict[str, float] = {}

    def overrun():
        solver.tick()  # the first holder's clock starts here
        _burn(0.3)
        solver.tick()  # hands over: 0.3 s lent to the search
        solver.leave()

    def member(turn, name):
        turn.begin()
        started = time.thread_time()
        while not turn.handovers:  # its first turn (tick waits for the next one once it hands over)
            _burn(0.001)
            turn.tick()
        spent[name] = time.thread_time() - started
        turn.leave()

    threads = [threading.Thread(target=overrun)] + [threading.Thread(target=member, args=(t, t.name))
                                                    for t in (search, walks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert spent["explicit"] >= 0.3 - 0.001 > spent["simulate"]  # the overrun, past its 0.001 s slice
    assert search.owed == 0.0  # repaid, and nothing is owed once its turn ended


def _idle(turn, done: threading.Event) -> None:
    """A member that takes its turns and hands them back at once, until `done`."""
    turn.begin()
    while not done.is_set():
        turn.tick()
    turn.leave()


def test_bounded_solver_calls_asked_again_reach_the_same_verdicts(monkeypatch):
    """While z3 shares the core its calls are cut at a bound and asked again with the bound
    doubled: with a bound far below what a query takes, every query is cut and asked again,
    and z3 still decides what it decides alone."""
    import z3 as z3_module

    from semcheck.engines.z3 import engine as smt

    monkeypatch.setattr(smt, "FIRST_CALL_BOUND", 0.0005)
    calls = []
    check = z3_module.Solver.check
    monkeypatch.setattr(z3_module.Solver, "check", lambda self, *a: calls.append(1) or check(self, *a))
    asked = answered = 0
    for name, devices in (("ring_allgather", 6), ("ring_allgather_missing_signal", 6), ("circular_wait", 3)):
        system = System(load(model(name), devices)[0])
        alone = smt.explore(system)
        calls.clear()
        turns = Turns()
        solver = turns.join("z3", Slice(seconds=0.0))
        idle = turns.join("explicit", Slice(ticks=1))  # takes its turns and hands them back at once
        done = threading.Event()

        other = threading.Thread(target=_idle, args=(idle, done))
        other.start()
        try:
            shared = smt.explore(system, budget=Budget(turn=solver).started())
        finally:
            solver.leave()
            done.set()
            other.join(30)
        assert shared.exhausted is None and shared.has_errors == alone.has_errors, name
        assert set(shared.findings) == set(alone.findings), name
        assert shared.solver_queries == alone.solver_queries, name
        asked, answered = asked + len(calls), answered + shared.solver_queries
    assert asked > answered  # calls were cut and asked again


# --- with the real engines ------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "ring_allgather", "ring_allgather_missing_signal", "ring_allgather_shared_recv", "ring_recv_before_send",
    "circular_wait", "dma_wait_mismatch", "double_buffer", "poll_flag", "poll_flag_never_set", "nondec_poll_leak",
])
def test_the_real_portfolio_agrees_with_the_search_alone(every_engine_joins, name):
    """Every engine joins from the first look: exhaustive, the merged findings are the
    search's; stopping at the first, the verdict is the search's and its errors are some of
    the search's."""
    (protocol,) = load(model(name), 3)
    alone = check_protocol(protocol, engine="explicit", exhaustive=True, split=False)
    every = check_protocol(protocol, engine="auto", exhaustive=True, split=False)
    first = check_protocol(protocol, engine="auto", split=False)
    assert every.verdict is first.verdict is alone.verdict, name
    assert {v.kind for v in every.errors} == {v.kind for v in alone.errors}
    assert {v.kind for v in first.errors} <= {v.kind for v in alone.errors}
    assert first.first_only is (first.verdict is Verdict.VIOLATION)
    assert every.runs and all(v.found_by for v in every.errors)


def test_json_says_which_engine_found_what(capsys, every_engine_joins):
    code = cli.main(["verify", model("ring_allgather_missing_signal"), "--devices", "3", "--format", "json", "-q",
                     "--exhaustive", "--no-split"])
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert code == 1 and result["first_only"] is False
    engines_ran = [e["engine"] for e in result["stats"]["engines"]]
    # an engine stopped before its first turn did not run
    assert engines_ran[0] == "explicit" and "simulate" in engines_ran and set(engines_ran) <= {"explicit", "simulate", "z3"}
    assert [e["decided"] for e in result["stats"]["engines"]].count(True) == 1
    for v in result["violations"]:
        assert v["found_by"] and set(v["found_by"]) <= set(engines_ran)


def test_a_stop_signal_ends_the_explicit_search_at_its_first_check():
    from semcheck.engines.explicit import search as explicit

    stop = StopSignal()
    stop.stop("told to stop")
    found = explicit.explore(System(_ring()), budget=Budget(stop=stop))
    assert found.exhausted == "told to stop" and found.states == 0


def test_a_stop_signal_ends_z3_before_it_encodes():
    from semcheck.engines.z3 import engine as smt

    stop = StopSignal()
    stop.stop("told to stop")
    found = smt.explore(System(_ring()), budget=Budget(stop=stop))
    assert found.exhausted == "told to stop" and found.solver_queries == 0


def test_wide_inputs_go_to_z3_alone():
    from dataclasses import replace

    from semcheck import ir

    protocol = replace(_ring(), inputs=(ir.Input("n", 0, 999),))
    calls: list = []
    result = auto.run(System(protocol), Budget(), None, FIRST, explicit=_calls("explicit", calls),
                      simulate=_calls("simulate", calls), z3=_engine("z3", ticks=1, verdict=Verdict.SAFE))
    assert result.engine == "z3" and calls == []
    assert "span 1,000 value combinations" in result.notes[-1]
