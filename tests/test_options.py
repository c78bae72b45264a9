"""A check's options are typed (`engines/options.py`): the API's keywords become one frozen
`CheckOptions` at the boundary, each engine reads its own options from it, and derived options
(a part's z3 run, auto's open-ended random walks) are replaced, never edited. An unknown
keyword fails at the boundary, naming itself."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle

import pytest

from semcheck import api, cli, engines, testing
from semcheck.engines.options import CheckOptions, ExplicitOptions, SimulateOptions, Z3Options
from semcheck.frontends import model_file
from semcheck.report import FORMATS, RenderOptions
from semcheck.run.tasks import SweepOptions
from semcheck.semantics import System
from tests.test_components import competing_waits

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_RECV = os.path.join(ROOT, "models", "ring_allgather_shared_recv.py")


def test_each_keyword_goes_to_its_own_engine():
    options = CheckOptions.from_keywords(engine="z3", unroll=3, reduce=False, symmetry=False, runs=7, seed=2,
                                         split=False, exhaustive=True, silence_reported_races=False)
    assert (options.engine, options.split, options.exhaustive) == ("z3", False, True)
    assert options.explicit == ExplicitOptions(reduce=False, symmetry=False, silence_reported_races=False)
    assert options.z3 == Z3Options(unroll=3)
    assert options.simulate == SimulateOptions(runs=7, seed=2)


def test_exhaustive_decides_every_engines_stop_at_first():
    first = CheckOptions(explicit=ExplicitOptions(stop_at_first=False))
    assert first.stop_at_first and first.explicit.stop_at_first and first.z3.stop_at_first
    assert first.simulate.stop_at_first
    every = dataclasses.replace(first, exhaustive=True)
    assert not (every.explicit.stop_at_first or every.z3.stop_at_first or every.simulate.stop_at_first)
    assert CheckOptions.from_keywords(stop_at_first=True) == CheckOptions()  # the older spelling
    assert CheckOptions.from_keywords(stop_at_first=False).exhaustive
    with pytest.raises(TypeError, match="stop_at_first=True contradicts exhaustive=True"):
        CheckOptions.from_keywords(stop_at_first=True, exhaustive=True)


def test_options_are_frozen_and_derived_by_replacing():
    options = CheckOptions(engine="explicit")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.explicit.reduce = False  # type: ignore[misc]
    part = options.with_ends_reported()
    assert part.z3.report_ends and not options.z3.report_ends
    assert dataclasses.replace(part, z3=options.z3) == options


def test_an_unknown_option_is_a_type_error_naming_it_and_the_closest_one():
    protocol = competing_waits(2, blocks=2)
    with pytest.raises(TypeError, match=r"unknown check option 'reduc' \(did you mean 'reduce'\?\)"):
        api.check_protocol(protocol, reduc=False)
    with pytest.raises(TypeError, match=r"unknown check options 'colour', 'unrol' \(did you mean 'unroll'\?\)"):
        api.verify_path([SHARED_RECV], [2], unrol=3, colour=True)
    with pytest.raises(TypeError, match="'exhaustiv'"):
        testing.assert_protocol_safe(protocol, exhaustiv=True)
    with pytest.raises(TypeError, match="'sed'"):
        api.verify(lambda: None, sed=3)  # before anything is traced
    with pytest.raises(TypeError, match="takes no options, got reduce"):
        api.verify_model(competing_waits, devices="all", reduce=False)


def test_a_check_of_parts_asks_z3_how_each_part_ends(monkeypatch):
    heard: list[CheckOptions] = []
    real = engines.ENGINES["z3"]

    def z3(system, budget, progress, options):
        heard.append(options)
        return real(system, budget, progress, options)

    monkeypatch.setitem(engines.ENGINES, "z3", z3)
    result = api.check_protocol(competing_waits(3, blocks=2), engine="z3", exhaustive=True)
    assert result.verdict.value == "violation"
    assert len(heard) == 3 and all(o.z3.report_ends and not o.stop_at_first for o in heard)
    heard.clear()
    api.check_protocol(competing_waits(3, blocks=2), engine="z3", split=False)
    assert [o.z3.report_ends for o in heard] == [False]


def test_the_sweep_carries_typed_options_to_every_task():
    options = SweepOptions(check=CheckOptions.from_keywords(engine="explicit", reduce=False, unroll=2))
    assert options.engine == "explicit"
    assert pickle.loads(pickle.dumps(options)) == options  # a pool or Ray worker gets the same
    # reduce=False reaches the search: the shared-receive ring at 3 devices stores 41 states
    # reduced (with symmetry), 4,206 unreduced (1,422 with symmetry alone)
    [reduced] = api.verify_path([SHARED_RECV], [3], engine="explicit", exhaustive=True)
    [full] = api.verify_path([SHARED_RECV], [3], engine="explicit", exhaustive=True, reduce=False)
    [rotated] = api.verify_path([SHARED_RECV], [3], engine="explicit", exhaustive=True, reduce=False,
                                symmetry=True)
    assert (reduced.stats.states, full.stats.states, rotated.stats.states) == (41, 4206, 1422)


def test_no_reduction_on_the_command_line_leaves_symmetry_off(capsys):
    """Symmetry goes with the reduction unless asked for (--no-reduction: neither)."""
    code = cli.main(["verify", SHARED_RECV, "--devices", "3", "--engine", "explicit", "--format", "json", "-q",
                     "--exhaustive", "--no-reduction"])
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert code == 1 and not any("symmetry" in n for n in result["notes"])
    assert result["stats"]["states"] == 4206


def test_simulate_under_auto_walks_until_stopped(monkeypatch, every_engine_joins):
    """auto hands simulate its own options with no bound on the walks; the others' unchanged."""
    from semcheck.engines import auto

    heard: dict[str, CheckOptions] = {}

    def recording(name):
        real = engines.ENGINES[name]

        def run(system, budget, progress, options):
            heard[name] = options
            return real(system, budget, progress, options)
        return run

    options = CheckOptions.from_keywords(runs=5, seed=4, exhaustive=True)  # as tests/test_auto.py's json test
    system = System(model_file.load(os.path.join(ROOT, "models", "ring_allgather_missing_signal.py"), 3))
    auto.run(system, None, None, options, explicit=recording("explicit"), z3=recording("z3"),
             simulate=recording("simulate"))
    assert heard["explicit"] is options
    assert heard["simulate"].simulate == SimulateOptions(runs=None, seed=4)


def test_every_format_reads_what_it_uses_of_one_render_options():
    results = api.verify_path([SHARED_RECV], [3], engine="explicit")
    options = RenderOptions(category="unit", verbose=True, max_trace_steps=2)
    rendered = {name: render(results, options) for name, render in FORMATS.items()}
    assert json.loads(rendered["sarif"])["runs"][0]["automationDetails"] == {"id": "unit/"}
    assert rendered["text"] == results[0].report(verbose=True, max_trace_steps=2)
    assert json.loads(rendered["json"])["results"][0]["verdict"] == "violation"
    with pytest.raises(TypeError, match="colour"):
        results[0].report(colour=True)  # the text report's options are its keyword parameters
