"""semcheck.testing: assertions for users' test suites; a failure's message is the report."""

import os

import pytest

from semcheck import testing
from semcheck.frontends import model_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")


def model(name):
    return os.path.join(MODELS, name + ".py")


def test_a_safe_protocol_passes_and_returns_its_results():
    results = testing.assert_protocol_safe(model("ring_allgather"), devices=(2, 4))
    assert [r.devices for r in results] == [2, 4]


def test_a_model_function_and_a_protocol_are_targets_too():
    module_model = model_file._import(model("double_buffer")).model
    assert len(testing.assert_protocol_safe(module_model, devices=(2, 3))) == 2
    assert len(testing.assert_protocol_safe(module_model(4))) == 1


def test_failure_message_is_the_text_report():
    with pytest.raises(AssertionError) as exc:
        testing.assert_protocol_safe(model("ring_allgather_missing_signal"), devices=4)
    message = str(exc.value)
    assert "VIOLATION: ring_allgather_missing_signal [4 devices, tpu rules]" in message
    assert "|         t.wait(barrier, 2)" in message
    assert "trace to the stuck state" in message


def test_failure_first_line_names_kind_line_and_device_counts():
    with pytest.raises(AssertionError) as exc:
        testing.assert_protocol_safe(model("ring_allgather_missing_signal"), devices=(2, 4))
    first = str(exc.value).splitlines()[0]
    assert first == ("semcheck: not verified safe: unsatisfied_wait at "
                     f"{os.path.relpath(model('ring_allgather_missing_signal'))}:30 (2, 4 devices)")


def test_failure_first_line_names_violation_kinds_where_a_root_cause_groups_them():
    # it said "wrong_signaller at ...": a root cause's internal name, which no docs page,
    # `semcheck explain` or --expectations knows; the kinds are what the user can act on
    kernel = os.path.join(ROOT, "examples", "tpu", "ring_permute_right_handshake.py")
    with pytest.raises(AssertionError) as exc:
        testing.assert_protocol_safe(kernel, devices=4)
    first = str(exc.value).splitlines()[0]
    assert first == f"semcheck: not verified safe: remote_before_entry at {os.path.relpath(kernel)}:37 (4 devices)"


def test_pytest_hides_semchecks_own_frames():
    import inspect

    for helper in (testing.assert_protocol_safe, testing.assert_violation, testing.assert_as_declared):
        assert "__tracebackhide__" in inspect.getsource(helper)
        assert helper.__code__.co_varnames.index("__tracebackhide__") >= 0


def test_warnings_fail_only_when_asked():
    """A protocol with only a warning (here a TPU wait that decrements though written with
    decrement=False, as the TPU frontend reports it) passes unless warnings are refused."""
    import dataclasses

    from semcheck import ir
    from semcheck.kinds import Kind

    def warned(devices):
        protocol = model_file._import(model("nondec_poll")).model(devices)
        note = ir.LoweringFinding(Kind.LOWERED_AS_DECREMENTING, protocol.loc, "decrements on a TPU")
        return dataclasses.replace(protocol, findings=(note,))

    testing.assert_protocol_safe(model("nondec_poll"), devices=2)
    testing.assert_protocol_safe(warned, devices=2)
    with pytest.raises(AssertionError, match="lowered_as_decrementing"):
        testing.assert_protocol_safe(warned, devices=2, allow_warnings=False)


def test_assert_violation():
    testing.assert_violation(model("circular_wait"), "deadlock", devices=(2, 3))
    with pytest.raises(AssertionError, match="expected deadlock at every device count, got safe at 2 devices") as exc:
        testing.assert_violation(model("ring_allgather"), "deadlock", devices=2)
    assert "SAFE: ring_allgather [2 devices" in str(exc.value)


def test_assert_as_declared(tmp_path):
    models = [n for n in os.listdir(MODELS) if n.endswith(".py")]
    assert len(testing.assert_as_declared(MODELS, devices=(2,))) == len(models)
    (tmp_path / "bug.py").write_text(open(model("circular_wait")).read().replace("# semcheck: expect", "# was"))
    with pytest.raises(AssertionError) as exc:
        testing.assert_as_declared(str(tmp_path), devices=(2,))
    assert "UNEXPECTED: expected safe, found deadlock" in str(exc.value)
