"""The user's file and line for an eqn, from the traceback JAX records while tracing.

JAX's own `source_info_util.user_frame` treats everything inside the jax package as
internal, which would hide the kernels shipped in `jax/experimental/pallas/ops/` (those are
kernels too, and their reports must point into them). So the user's frame here is the
innermost frame outside JAX's implementation (`jax/_src`, the public re-export modules),
the standard library and semcheck itself.
"""

from __future__ import annotations

import importlib
import os
import re
import sysconfig

from semcheck import ir
from semcheck.jax_compat import jax_internal


def _package_dir(module) -> str:
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


def _internal_patterns() -> re.Pattern[str]:
    import jax

    jax_dir = _package_dir(jax)
    # The shipped kernels: jax/experimental/pallas/ops/, and jax/pallas/ops/ should the public
    # jax.pallas namespace (JAX newer than 0.11) carry them.
    ops_dirs = [os.path.join(jax_dir, *parts, "ops") + os.sep for parts in (("experimental", "pallas"), ("pallas",))]
    semcheck_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    excluded = [sysconfig.get_path("stdlib") + os.sep, semcheck_dir]
    try:
        import jaxlib

        excluded.append(_package_dir(jaxlib))
    except ImportError:  # pragma: no cover - jaxlib always comes with jax
        pass
    # Inside the jax package only the shipped ops are user code.
    shipped = "|".join(re.escape(d[len(jax_dir):]) for d in ops_dirs)
    jax_own = f"^{re.escape(jax_dir)}(?!{shipped})"
    return re.compile("|".join([jax_own] + [f"^{re.escape(p)}" for p in excluded]))


_INTERNAL: re.Pattern[str] | None = None
# is_user_file's answers for absolute file names (a relative one depends on the working
# directory): every eqn's traceback names the same few files, frame by frame.
_USER_FILE: dict[str, bool] = {}


def is_user_file(filename: str) -> bool:
    global _INTERNAL
    if _INTERNAL is None:
        _INTERNAL = _internal_patterns()
    if not filename or filename.startswith("<"):
        return False
    known = _USER_FILE.get(filename)
    if known is not None:
        return known
    answer = _INTERNAL.search(os.path.abspath(filename)) is None
    if os.path.isabs(filename):
        _USER_FILE[filename] = answer
    return answer


# The most calls a location's chain names (the frames nearest the line are kept).
MAX_CHAIN = 8


class KernelBody:
    """Which code object is the kernel body, where a location's call chain ends. JAX
    records a traceback only up to the function it is tracing (the kernel body, or a loop
    or branch body it traces for the kernel), so the outermost user frame of an eqn's
    traceback is already the kernel's own code; the body is matched as well, so that a
    JAX that recorded more would not name the script's calls into JAX. The body is known by
    its file and the line its function starts at (`name` also matches a decorated body,
    whose code starts at its first decorator line)."""

    def __init__(self, name: str | None, loc: ir.Loc | None):
        self.name = name
        self.file = os.path.abspath(loc.file) if loc is not None else None
        self.line = loc.line if loc is not None else 0

    def is_body(self, code) -> bool:
        if self.file is None or os.path.abspath(code.co_filename) != self.file:
            return False
        return code.co_firstlineno == self.line or (code.co_name == self.name and code.co_firstlineno <= self.line)


def loc_of_traceback(traceback, body: KernelBody | None = None) -> ir.Loc | None:
    """The innermost user frame of a JAX `Traceback`, or None. With the kernel `body`, a line
    in a helper of the user's carries, as its `chain`, the user frames that called it, out
    to the kernel's own code (see KernelBody)."""
    if traceback is None:
        return None
    source_info_util = jax_internal("source_info_util")
    codes, lastis = traceback.raw_frames()
    user = [(code, lasti) for code, lasti in zip(codes, lastis) if is_user_file(code.co_filename)]
    if not user:
        return None
    innermost = source_info_util.raw_frame_to_frame(*user[0])
    loc = ir.Loc(os.path.abspath(innermost.file_name), innermost.start_line)
    if body is None or body.is_body(user[0][0]):
        return loc
    chain = []
    for code, lasti in user[1:MAX_CHAIN + 1]:
        frame = source_info_util.raw_frame_to_frame(code, lasti)
        chain.append(ir.Frame(os.path.abspath(frame.file_name), frame.start_line, code.co_name))
        if body.is_body(code):
            break
    return ir.Loc(loc.file, loc.line, tuple(chain))


def user_column(traceback) -> int | None:
    """Where on its line the user's call that bound an eqn starts (the column, in UTF-8
    bytes as `ast` counts them, of `loc_of_traceback`'s frame), or None: what tells two
    calls on one line apart."""
    if traceback is None:
        return None
    codes, lastis = traceback.raw_frames()
    for code, lasti in zip(codes, lastis):
        if is_user_file(code.co_filename):
            column = jax_internal("source_info_util").raw_frame_to_frame(code, lasti).start_column
            return column if column is not None and column >= 0 else None
    return None


def library_call(traceback) -> str | None:
    """The Pallas backend function the user's code called to bind an eqn (`sync_copy` for
    the `dma_start` inside `pltpu.sync_copy`, `async_copy`, or `AsyncCopyDescriptor.start`
    for a descriptor's `.start()`): the outermost frame of a backend module (`pallas/mosaic`,
    `pallas/mosaic_gpu`) below the innermost user frame, named by its qualified name up to
    its first `<locals>`; None when there is none. Inside a helper's own traced body (the
    run_scoped of sync_copy) JAX's traceback stops at the helper's inner function, which
    its qualified name still names."""
    library = _library_code(traceback)
    return None if library is None else _called_as(library)


def library_api(traceback) -> str | None:
    """`library_call` as the user wrote the call, under the alias Pallas's docs import the
    backend's module as: `pltpu.sync_copy`. A private function behind a public one of the
    same name goes by the public one (`pltpu.emit_pipeline` returns a closure of
    `_emit_pipeline`, which the kernel then calls)."""
    library = _library_code(traceback)
    if library is None:
        return None
    gpu = _GPU_BACKEND_MODULE in library.co_filename.replace(os.sep, "/")
    alias, module = ("plgpu", "jax.experimental.pallas.mosaic_gpu") if gpu else ("pltpu", "jax.experimental.pallas.tpu")
    name = _called_as(library)
    public = name.lstrip("_")
    if public != name and hasattr(importlib.import_module(module), public):
        name = public
    return f"{alias}.{name}"


def _called_as(code) -> str:
    return getattr(code, "co_qualname", code.co_name).split(".<locals>")[0]


def _library_code(traceback):
    """The code of `library_call`'s frame, or None."""
    if traceback is None:
        return None
    codes, _lastis = traceback.raw_frames()
    library = None
    for code in codes:  # innermost first
        if is_user_file(code.co_filename):
            break
        if _BACKEND_MODULE in code.co_filename.replace(os.sep, "/"):
            library = code
    return library


_BACKEND_MODULE = "/pallas/mosaic"  # also pallas/mosaic_gpu
_GPU_BACKEND_MODULE = "/pallas/mosaic_gpu/"


class Locator:
    """Caches the user location of each eqn, or None when its traceback has no user frame.

    JAX records tracebacks only up to the function being traced, so an eqn inside a
    library helper's `pl.when` (e.g. `pltpu.core_barrier`) has no user frame of its own;
    lowering then uses the location of the enclosing eqn (the helper call in the kernel).
    """

    def __init__(self, body: KernelBody | None = None) -> None:
        self._cache: dict[int, ir.Loc | None] = {}
        self.body = body

    def __call__(self, eqn) -> ir.Loc | None:
        key = id(eqn)
        if key not in self._cache:
            self._cache[key] = loc_of_traceback(eqn.source_info.traceback, self.body)
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
