"""frontends/mlir_contexts.py: in the capture child JAX's lowerings share one MLIR context,
a fresh one every LOWERINGS_PER_CONTEXT lowerings, and a program lowered there is the
same program: the same StableHLO text, the same values when run, the same Pallas TPU
lowering verdict."""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from semcheck.frontends import mlir_contexts
from semcheck.jax_compat import MODULES

mlir = importlib.import_module(MODULES["mlir"][0])


@pytest.fixture
def shared(monkeypatch):
    """Share contexts for one test, then give JAX its own function back."""
    monkeypatch.setattr(mlir, "make_ir_context", mlir.make_ir_context)
    mlir_contexts.share_contexts()
    yield


def programs():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    i = np.int32(7)
    return [
        (lambda a: jnp.sin(a) @ a.T + 1.5, (x,)),
        (lambda a, b: (a * b).sum(axis=0) - jnp.cumsum(a, axis=1)[:, -1:], (x, np.float32(0.25))),
        (lambda k: jnp.where(k % 3 == 1, k // 2, -k) << 2, (i,)),
        (lambda a: jax.lax.fori_loop(0, 3, lambda j, c: c * 2 + a[j], a[0]), (x,)),
    ]


def lowered_texts_and_values():
    out = []
    for fn, args in programs():
        text = jax.jit(fn).lower(*args).as_text()
        value = np.asarray(jax.jit(fn)(*args))
        out.append((text, value.dtype, value.tobytes()))
    return out


def test_one_context_serves_many_lowerings_then_a_fresh_one(shared):
    contexts = [mlir.make_ir_context() for _ in range(mlir_contexts.LOWERINGS_PER_CONTEXT + 1)]
    assert all(c is contexts[0] for c in contexts[:-1])
    assert contexts[-1] is not contexts[0]


def test_sharing_twice_wraps_once(shared):
    first = mlir.make_ir_context
    mlir_contexts.share_contexts()
    assert mlir.make_ir_context is first


def test_a_program_lowered_in_a_shared_context_is_the_same_program(monkeypatch):
    jax.clear_caches()  # lower again, not from JAX's in-process caches
    alone = lowered_texts_and_values()
    monkeypatch.setattr(mlir, "make_ir_context", mlir.make_ir_context)
    mlir_contexts.share_contexts()
    jax.clear_caches()
    first = mlir.make_ir_context()
    together = lowered_texts_and_values()
    assert mlir.make_ir_context() is first  # they were all lowered in the one context
    assert together == alone


def test_jax_without_make_ir_context_keeps_its_own(monkeypatch):
    monkeypatch.delattr(mlir, "make_ir_context")
    mlir_contexts.share_contexts()  # nothing to wrap: no error
    assert not hasattr(mlir, "make_ir_context")
