"""A stock of fresh MLIR contexts, made by the capture server for the children it forks.

JAX lowers every program it compiles in an MLIR context made fresh with every dialect
loaded: 2.5-5 ms each, 20 ms for the first of a process. JAX 0.10.2 makes one for every
lowering (jax/_src/interpreters/mlir.py, `make_ir_context`), so a capture child makes 10-15
(the script's eager operations and program, its kernels' TPU lowerings and folds); JAX
0.11 makes them in `_create_ir_context` and has each thread use one for up to 10 lowerings
(`make_ir_context`, jax-ml/jax cec06d11), so a child makes a few. Making one starts no
thread and needs no backend, so the server makes a stock before it forks its second child
(capture_server.py: a run of one capture would make them for nothing), and each later child
inherits a copy and takes from it what JAX would have made, one context where JAX makes one:
JAX 0.10.2 fails in its pass pipeline when one context serves two lowerings
(benchmarks/startup.py), so a stocked context is never handed out twice. Past the stock, JAX
makes them as before; where JAX has neither function, nothing changes.
"""

from __future__ import annotations

# Contexts: more than a capture child of a small script makes, with each JAX.
STOCK_FRESH_PER_LOWERING = 16  # JAX 0.10.2
STOCK_REUSED = 3  # JAX 0.11 and later


def stock() -> None:
    """Make the stock in this process and have JAX take its contexts from it (once)."""
    from semcheck.jax_compat import JaxInternalMissing, first_attr, replace_for_good

    try:
        make = first_attr("mlir", "_create_ir_context", "make_ir_context")
    except JaxInternalMissing:  # a JAX that moved both: its own contexts, as before
        return
    if getattr(make, "semcheck_stock", None) is not None:
        return
    reused = make.__name__ == "_create_ir_context"
    made = [make() for _ in range(STOCK_REUSED if reused else STOCK_FRESH_PER_LOWERING)]

    def from_stock():
        return made.pop() if made else make()

    from_stock.semcheck_stock = made  # type: ignore[attr-defined]
    from_stock.__doc__ = make.__doc__
    replace_for_good("mlir", make.__name__, from_stock)
