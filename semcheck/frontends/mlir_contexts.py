"""A stock of fresh MLIR contexts, made by the capture server for the children it forks.

JAX lowers every program it compiles in an MLIR context of its own, made fresh with every
dialect loaded (jax/_src/interpreters/mlir.py, `make_ir_context`, JAX 0.10.2): 2.5-5 ms
each, 20 ms for the first of a process, and a capture child makes 10-15 (the script's eager
operations and program, its kernels' TPU lowerings and folds). Making one starts no thread
and needs no backend, so the server makes a stock of them before it forks its second child
(capture_server.py: a run of one capture would make them for nothing); each later child
inherits a copy of the stock and hands out one context per call, so every context still
serves one lowering only (JAX 0.10.2 fails in its pass pipeline when one context serves
two: benchmarks/startup.py). Past the stock, JAX makes them as before; where JAX has no
such function, nothing changes.
"""

from __future__ import annotations

STOCK = 16  # contexts: more than the 10-15 a capture child of a small script asks for


def stock() -> None:
    """Make the stock in this process and have JAX take its contexts from it (once)."""
    from semcheck.jax_compat import JaxInternalMissing, jax_internal, replace_for_good

    try:
        make = jax_internal("mlir").make_ir_context
    except JaxInternalMissing:  # a JAX that moved it: its own contexts, as before
        return
    if getattr(make, "semcheck_stock", None) is not None:
        return
    made = [make() for _ in range(STOCK)]

    def make_ir_context():
        return made.pop() if made else make()

    make_ir_context.semcheck_stock = made  # type: ignore[attr-defined]
    make_ir_context.__doc__ = make.__doc__
    replace_for_good("mlir", "make_ir_context", make_ir_context)
