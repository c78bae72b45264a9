"""Kernel scripts: run the user's file and capture its Pallas kernels (see capture.py)."""

from __future__ import annotations

from semcheck.frontends import LoadError
from semcheck.ir import Protocol


def load(path: str, devices: int, **options) -> list[Protocol]:
    raise LoadError(
        f"{path} defines no model(devices) function, and tracing Pallas kernel scripts is "
        "not available in this build",
        hint="write a model with semcheck.model.ProtocolBuilder",
    )
