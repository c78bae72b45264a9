"""The capture child lowers into one MLIR context, not a fresh one per lowering.

JAX makes a new MLIR context for every program it lowers (`make_ir_context`, called by
`ModuleContext.__init__` in jax/_src/interpreters/mlir.py, JAX 0.10.2): a context loads and
registers every dialect JAX uses, 1.5-2.5 ms of CPU each, and 10 ms the first time in a
process. A capture child lowers a program for each eager operation of the script, for the
script's jitted code, for each scalar fold program and indexing question of the lowering
(lower/folds.py, lower/discharge.py) and for JAX's Pallas TPU lowering of each kernel: about
15 contexts, and their fresh memory (about 2,500 of the child's page faults). Measured over
the 20 TPU examples of `benchmarks/startup.py` at 2 devices, forked as the capture server
forks: 0.5-0.75 CPU s less of 3.7-4.2, and 47,000 fewer page faults of 277,000.

Why no value can change: an MLIR context owns the dialects it has loaded and the types and
attributes it has uniqued, nothing of a program; every program is still a module of its own,
built by the same lowering rules, and handed to XLA serialized (so XLA compiles the same
bytes, and JAX's persistent cache finds the same entries). JAX itself already builds two
modules in one context when it lowers a Pallas TPU kernel inside a program
(jax/_src/pallas/mosaic/lowering.py creates the Mosaic module in the enclosing context).
The context is replaced after `LOWERINGS_PER_CONTEXT` programs, so a script that lowers
many programs with large constants does not keep them all: what a context uniques lives as
long as the context does.

Only the capture child does this (`capture._child`), a process of its own that ends after
the capture: `semcheck.verify` in a user's process leaves JAX as it is.
"""

from __future__ import annotations

from semcheck.jax_compat import JaxInternalMissing, jax_internal, replace_attr

LOWERINGS_PER_CONTEXT = 64


def share_contexts() -> None:
    """Have JAX's lowerings in this process share a context, `LOWERINGS_PER_CONTEXT` at a
    time. A JAX without `make_ir_context` keeps making its own."""
    try:
        mlir = jax_internal("mlir")
        fresh = mlir.make_ir_context
    except JaxInternalMissing:
        return
    if getattr(fresh, "semcheck_shared", False):
        return
    current: list = [None, 0]  # the context, and the lowerings it has served

    def shared_context():
        if current[0] is None or current[1] >= LOWERINGS_PER_CONTEXT:
            current[0], current[1] = fresh(), 0
        current[1] += 1
        return current[0]

    shared_context.semcheck_shared = True  # type: ignore[attr-defined]
    replace_attr("mlir", "make_ir_context", shared_context)
