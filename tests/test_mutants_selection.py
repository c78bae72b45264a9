"""benchmarks/mutants.py picks the examples declared safe by their `# semcheck: expect`
lines (read by semcheck.expectations, as the gate reads them), and fails when it picks
nothing, so a changed declaration format cannot make it check zero mutants and pass."""

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_mutants():
    spec = importlib.util.spec_from_file_location("mutants", os.path.join(ROOT, "benchmarks", "mutants.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutants", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


mutants = load_mutants()


def example(name):
    return mutants.EXAMPLES / name


def test_a_declaration_narrowed_to_a_device_count_decides_at_that_count():
    # `expect remote_before_entry` and `expect safe devices=2`: safe at 2 devices only.
    assert mutants.declared_errors(example("ring_permute_right_handshake.py"), 2) == set()
    assert mutants.declared_errors(example("ring_permute_right_handshake.py"), 4) == {"remote_before_entry"}


def test_a_file_declared_racy_on_two_cores_is_not_a_safe_example():
    # `expect safe cores=1` and `expect data_race cores=2`: its parallel grid races on two cores.
    assert mutants.declared_errors(example("megacore_row_sums_parallel_reduction.py"), 2) == {"data_race"}
    assert mutants.declared_errors(example("megacore_row_sums.py"), 2) == set()


def test_a_declared_warning_is_no_error():
    assert mutants.declared_errors(example("nondecrementing_poll_leftover.py"), 2) == set()


def test_the_safe_examples_are_selected_and_the_buggy_ones_are_not():
    selected = {p.name for p in mutants.safe_examples(2)}
    assert {"ring_permute.py", "double_buffer.py", "allgather_ring_capacity.py"} <= selected
    assert not selected & {"ring_permute_no_wrap.py", "poll_arrivals_miscounted.py", "chunked_shift_shared_recv.py"}
    assert "allgather_ring_overwrite.py" in selected  # `expect safe devices=2`: 2 devices exchange once
    found = [m for p in mutants.safe_examples(2) for m in mutants.mutants_of(p, 6)]
    assert len(found) > 100
    removed = next(m for m in found if m.example == "ring_permute.py" and m.line == 31)
    assert removed.statement == "pl.semaphore_wait(barrier, 2)"
    assert "    pass  # mutant: removed pl.semaphore_wait(barrier, 2)\n" in removed.source


def test_selecting_nothing_fails(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["mutants.py", "--only", "no_such_example"])
    assert mutants.main() == 2
    assert "nothing to check" in capsys.readouterr().err
