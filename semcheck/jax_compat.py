"""semcheck's one door into JAX's internals, and what it knows of JAX's versions.

semcheck traces with JAX, lowers with JAX's own jaxprs and evaluates with JAX's own
primitives, so it reaches into `jax._src` (the capture hooks, the state discharge, the Pallas
and Mosaic GPU types). Those modules are private: JAX moves and renames them between
releases. Every such reach goes through `jax_internal(name)`, which looks the module up
among the places the JAX versions semcheck knows keep it, and, where none has it (or the
module lacks the attribute asked for), raises `JaxInternalMissing`: a `LoadError` that names
the installed JAX version and what was looked for, so the check ends with exit code 2 and
that sentence, never a traceback and never a silent "safe". docs/jax-versions.md states the
support policy.

Importing this module imports nothing of JAX: the version is read from the installed
package's metadata (`version_notice` runs in the CLI, where JAX is not imported at all).
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Callable, Iterator

from semcheck.errors import LoadError

# The oldest JAX semcheck runs with (pyproject's `jax>=` floor).
FLOOR = (0, 10, 2)
# The JAX releases semcheck's test suite ran with.
TESTED = ("0.10.2",)
# Releases whose source was read for what moved (docs/jax-versions.md), not run here.
READ = ("0.11.0", "0.11.1")

# Where each JAX internal semcheck uses lives, newest place first: the first module of the
# list that imports is the one used; "module:name" is an attribute of a module. (JAX 0.11 moved the TPU generation registry to
# jax/_src/tpu_info.py and left a forwarding shim at the old place.)
MODULES: dict[str, tuple[str, ...]] = {
    "callback": ("jax._src.callback",),
    "config": ("jax._src.config",),
    "core": ("jax._src.core",),
    "custom_batching": ("jax._src.custom_batching",),
    "debugging": ("jax._src.debugging",),
    "dispatch": ("jax._src.dispatch",),
    "dtypes": ("jax._src.dtypes",),
    "mlir": ("jax._src.interpreters.mlir",),
    "mlir_ir": ("jax._src.lib.mlir:ir",),  # an attribute of jax._src.lib.mlir
    "sdy": ("jax._src.lib.mlir.dialects:sdy",),  # Shardy's bindings: shard_map bodies' shardings
    "hlo": ("jax._src.lib.mlir.dialects:hlo",),  # StableHLO's Python bindings: an attribute of jax._src.lib.mlir.dialects
    "pjit": ("jax._src.pjit",),
    "pxla": ("jax._src.interpreters.pxla",),
    "sharding_impls": ("jax._src.sharding_impls",),
    "source_info_util": ("jax._src.source_info_util",),
    "xla_client": ("jax._src.lib:xla_client",),  # an attribute of jax._src.lib, not a submodule
    "state_discharge": ("jax._src.state.discharge",),
    "state_indexing": ("jax._src.state.indexing",),
    "state_types": ("jax._src.state.types",),
    "pallas_core": ("jax._src.pallas.core",),
    "pallas_call": ("jax._src.pallas.pallas_call",),
    "pallas_hlo_interpreter": ("jax._src.pallas.hlo_interpreter",),
    "mpmd": ("jax._src.pallas.mpmd",),
    "tpu_core": ("jax._src.pallas.mosaic.core",),
    "tpu_info": ("jax._src.tpu_info", "jax._src.pallas.mosaic.tpu_info"),
    "gpu_core": ("jax._src.pallas.mosaic_gpu.core",),
}


class JaxInternalMissing(LoadError):
    """A JAX internal semcheck needs is not where any JAX version it knows keeps it."""

    def __init__(self, what: str, tried: tuple[str, ...] = ()):
        places = f" (looked in {', '.join(tried)})" if tried else ""
        super().__init__(
            f"JAX {installed_version() or '(unknown version)'}: semcheck looked for {what}{places} "
            "and this JAX does not have it, so semcheck cannot capture the kernel",
            hint=f"semcheck was tested with JAX {', '.join(TESTED)} (docs/jax-versions.md); install "
            "one of those next to semcheck, or report the JAX version and this message",
        )
        self.what = what


class _Internal:
    """A JAX module as semcheck reaches it: an attribute it lacks is a `JaxInternalMissing`
    naming the module and the attribute, not an AttributeError deep in the lowering."""

    __slots__ = ("_module", "_path")

    def __init__(self, module, path: str):
        self._module, self._path = module, path

    def __getattr__(self, attr: str) -> Any:
        try:
            return getattr(self._module, attr)
        except AttributeError:
            raise JaxInternalMissing(f"{self._path}.{attr}") from None


_loaded: dict[str, _Internal] = {}


def jax_internal(name: str) -> Any:
    """The JAX internal module semcheck calls `name` (a key of `MODULES`)."""
    found = _loaded.get(name)
    if found is not None:
        return found
    paths = MODULES[name]
    for path in paths:
        module_path, _, attr = path.partition(":")
        try:
            module = importlib.import_module(module_path)
            if attr:
                module = getattr(module, attr)
        except (ImportError, AttributeError):
            continue
        found = _loaded[name] = _Internal(module, path.replace(":", "."))
        return found
    raise JaxInternalMissing(f"the module {paths[0].replace(':', '.')}", tuple(p.replace(":", ".") for p in paths[1:]))


@contextlib.contextmanager
def replaced(name: str, attr: str, make: Callable[[Any], Any]) -> Iterator[Any]:
    """Within this block, attribute `attr` of the JAX internal module `name` is
    `make(original)` (what the block gets); the original is restored after."""
    module = jax_internal(name)
    original = getattr(module, attr)
    replacement = make(original)
    setattr(module._module, attr, replacement)
    try:
        yield replacement
    finally:
        setattr(module._module, attr, original)


def replace_for_good(name: str, attr: str, replacement: Any) -> None:
    """Attribute `attr` of the JAX internal module `name` is `replacement` from now on, in
    this process (a capture server's, whose children inherit it)."""
    setattr(jax_internal(name)._module, attr, replacement)


def first_attr(name: str, *attrs: str) -> Any:
    """The first of `attrs` that module `name` has (a name that JAX renamed: the newest
    spelling first)."""
    module = jax_internal(name)
    for attr in attrs:
        try:
            return getattr(module, attr)
        except JaxInternalMissing:
            continue
    raise JaxInternalMissing(" or ".join(f"{MODULES[name][0]}.{a}" for a in attrs))


# --- versions ------------------------------------------------------------------------------


def installed_version() -> str | None:
    """The installed JAX's version, from its package metadata (JAX is not imported)."""
    from importlib import metadata

    try:
        return metadata.version("jax")
    except metadata.PackageNotFoundError:
        return None


def parse(version: str) -> tuple[int, ...]:
    """(0, 11, 1) of "0.11.1" or "0.11.1.dev20260808+cec06d1"."""
    import re

    numbers = []
    for part in version.split("+")[0].split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        numbers.append(int(digits.group()))
        if digits.end() < len(part):  # "0rc1": a pre-release of 0
            break
    return tuple(numbers)


_noticed = False


def notice_once() -> str | None:
    """`version_notice()` the first time it has something to say in this process, then None
    (one line per run)."""
    global _noticed
    if _noticed:
        return None
    text = version_notice()
    _noticed = text is not None
    return text


def version_notice(version: str | None = None) -> str | None:
    """One line when semcheck runs with a JAX it was not tested with (None: a tested one, or
    no JAX installed, which the capture reports when it needs JAX)."""
    version = installed_version() if version is None else version
    if version is None:
        return None
    release = ".".join(map(str, parse(version)[:3]))
    if release in TESTED:
        return None
    tested = ", ".join(TESTED)
    if parse(version)[:3] < FLOOR:
        return (f"JAX {version} is older than semcheck supports (JAX {'.'.join(map(str, FLOOR))} or newer, "
                f"tested with {tested}); checks may stop with an error naming what is missing")
    how = "whose source semcheck's names were read from" if release in READ else "which semcheck has not seen"
    return (f"JAX {version} is not a version semcheck was tested with ({tested}); it is a release {how}: "
            "a construct semcheck does not find stops its check with an error naming it (docs/jax-versions.md)")
