"""Load a model file: a Python file that defines `model(devices: int) -> Protocol`."""

from __future__ import annotations

import importlib.util
import sys
import traceback

from semcheck.errors import LoadError
from semcheck.ir import Loc, Protocol


def load(path: str, devices: int) -> Protocol:
    module = _import(path)
    try:
        protocol = module.model(devices)
    except Exception as e:
        raise LoadError(
            f"model({devices}) raised {type(e).__name__}: {e}", _user_frame(e, path)
        ) from None
    if not isinstance(protocol, Protocol):
        raise LoadError(
            f"model({devices}) returned {type(protocol).__name__}, not a Protocol",
            hint="end model() with `return builder.build()`",
        )
    return protocol


def _import(path: str):
    name = "semcheck_model_" + "".join(c if c.isalnum() else "_" for c in path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise LoadError(f"importing the model raised {type(e).__name__}: {e}", _user_frame(e, path)) from None
    return module


def _user_frame(error: BaseException, path: str) -> Loc | None:
    """The deepest frame of the traceback that lies in the user's file."""
    loc = None
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename.endswith(path.lstrip("./")) or frame.filename == path:
            loc = Loc(frame.filename, frame.lineno or 0)
    return loc
