"""The jaxprs inside an eqn's params: the bodies of control flow, calls and kernels."""

from __future__ import annotations

from semcheck.jax_compat import jax_internal


def subjaxprs(params: dict):
    """The open jaxprs among an eqn's params (alone or in tuples)."""
    jax_core = jax_internal("core")

    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, jax_core.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, jax_core.Jaxpr):
                yield item


def has_subjaxprs(params: dict) -> bool:
    return next(subjaxprs(params), None) is not None
