"""Load a model file: a Python file that defines `model(devices: int) -> Protocol`.

The file is imported and called in a forked child (`isolation.py`), so that whatever it does
(`sys.exit`, `os._exit`, a fork, a hang) cannot end semcheck; its `semcheck.assume` calls
are recorded again here, in the load that `frontends.load` is collecting."""

from __future__ import annotations

import importlib.util
import os
import sys

from semcheck.errors import LoadError
from semcheck.frontends.isolation import call_isolated, user_frame
from semcheck.ir import Loc, Protocol
from semcheck.model import ModelError


def load(path: str, devices: int, *, timeout: float | None = None, memory_mb: float | None = None) -> Protocol:
    """`memory_mb`: the resident size the child that runs `model()` may reach."""
    from semcheck.passes import assumptions

    protocol, assumed = call_isolated(
        _load_here, path, devices, user_file=path, what=f"loading the model file (model({devices}))",
        timeout=timeout, memory_mb=memory_mb,
    )
    for a in assumed:
        assumptions.record(a)
    return protocol


def _load_here(path: str, devices: int):
    """In the child: the Protocol and the assumptions the file made."""
    from semcheck.passes import assumptions

    with assumptions.collecting() as assumed:
        protocol = load_in_process(path, devices)
    return protocol, list(assumed)


def load_in_process(path: str, devices: int) -> Protocol:
    module = _import(path)
    model = getattr(module, "model", None)
    if not callable(model):
        raise LoadError(f"{path} has no callable model(devices)", hint="define `def model(devices: int):`")
    try:
        protocol = model(devices)
    except ModelError as e:  # a builder call the protocol cannot hold: the call's line says which
        raise LoadError(f"bad model: {e}", user_frame(e, path)) from None
    except Exception as e:
        raise LoadError(
            f"model({devices}) raised {type(e).__name__}: {e}", user_frame(e, path)
        ) from None
    if not isinstance(protocol, Protocol):
        raise LoadError(
            f"model({devices}) returned {type(protocol).__name__}, not a Protocol",
            _definition(model, path),
            hint="end model() with `return builder.build()`",
        )
    return protocol


def _definition(function, path: str) -> Loc | None:
    """The line of `def model` in the user's file: where a missing `return` belongs."""
    code = getattr(function, "__code__", None)
    if code is None or os.path.abspath(code.co_filename) != os.path.abspath(path):
        return None
    return Loc(path, code.co_firstlineno)


def _import(path: str):
    name = "semcheck_model_" + "".join(c if c.isalnum() else "_" for c in path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except ModelError as e:
        raise LoadError(f"bad model: {e}", user_frame(e, path)) from None
    except Exception as e:
        raise LoadError(f"importing the model raised {type(e).__name__}: {e}", user_frame(e, path)) from None
    return module
