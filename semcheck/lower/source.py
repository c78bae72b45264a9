"""The user's file and line for an eqn, from the traceback JAX records while tracing.

JAX's own `source_info_util.user_frame` treats everything inside the jax package as
internal, which would hide the kernels shipped in `jax/experimental/pallas/ops/` (those are
kernels too, and their reports must point into them). So the user's frame here is the
innermost frame outside JAX's implementation (`jax/_src`, the public re-export modules),
the standard library and semcheck itself.
"""

from __future__ import annotations

import os
import re
import sysconfig

from semcheck import ir


def _package_dir(module) -> str:
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


def _internal_patterns() -> re.Pattern[str]:
    import jax

    jax_dir = _package_dir(jax)
    ops_dir = os.path.join(jax_dir, "experimental", "pallas", "ops") + os.sep
    semcheck_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    excluded = [sysconfig.get_path("stdlib") + os.sep, semcheck_dir]
    try:
        import jaxlib

        excluded.append(_package_dir(jaxlib))
    except ImportError:  # pragma: no cover - jaxlib always comes with jax
        pass
    # Inside the jax package only the shipped ops are user code.
    jax_internal = f"^{re.escape(jax_dir)}(?!{re.escape(ops_dir[len(jax_dir):])})"
    return re.compile("|".join([jax_internal] + [f"^{re.escape(p)}" for p in excluded]))


_INTERNAL: re.Pattern[str] | None = None


def is_user_file(filename: str) -> bool:
    global _INTERNAL
    if _INTERNAL is None:
        _INTERNAL = _internal_patterns()
    if not filename or filename.startswith("<"):
        return False
    return _INTERNAL.search(os.path.abspath(filename)) is None


def loc_of_traceback(traceback) -> ir.Loc | None:
    """The innermost user frame of a JAX `Traceback`, or None."""
    if traceback is None:
        return None
    codes, lastis = traceback.raw_frames()
    from jax._src import source_info_util

    for code, lasti in zip(codes, lastis):
        if is_user_file(code.co_filename):
            frame = source_info_util.raw_frame_to_frame(code, lasti)
            return ir.Loc(os.path.abspath(frame.file_name), frame.start_line)
    return None


class Locator:
    """Caches the user location of each eqn, or None when its traceback has no user frame.

    JAX records tracebacks only up to the function being traced, so an eqn inside a
    library helper's `pl.when` (e.g. `pltpu.core_barrier`) has no user frame of its own;
    lowering then uses the location of the enclosing eqn (the helper call in the kernel).
    """

    def __init__(self) -> None:
        self._cache: dict[int, ir.Loc | None] = {}

    def __call__(self, eqn) -> ir.Loc | None:
        key = id(eqn)
        if key not in self._cache:
            self._cache[key] = loc_of_traceback(eqn.source_info.traceback)
        return self._cache[key]


_FUNC_SRC = re.compile(r"^(?P<name>.*) at (?P<file>.+):(?P<line>\d+)$")


def kernel_function(debug_info) -> tuple[str | None, ir.Loc | None]:
    """The kernel function's name and definition line, from the jaxpr's debug info
    (`func_src_info` is "name at file:line")."""
    text = getattr(debug_info, "func_src_info", None) or ""
    match = _FUNC_SRC.match(text)
    if not match:
        return (text or None), None
    name = match.group("name").split(".")[-1]
    return name, ir.Loc(os.path.abspath(match.group("file")), int(match.group("line")))
