"""What JAX removed that kernels written for an older JAX still use, and what replaced it;
and names a newer JAX added that the installed, older one spells otherwise.

A script that fails on such a name raises an AttributeError whose whole message is the name
(`AttributeError: ANY`) or a TypeError about an unexpected keyword: true, but it does not say
that the name was JAX's once, nor what to write instead. Each entry names the owner the
script asked (a module, class or function, by `__name__`), the name, and the advice; the
capture adds the advice to the script's error (frontends/capture.py). Found while checking
vllm-project/tpu-inference's reduce-scatter matmul (abda97e4), written for a JAX before 0.10;
`backend=` and the `TPU`-prefixed names in JAX's own interpreter tests of 2025 (sweep 6).
"""

from __future__ import annotations

import re

from semcheck.records import record


@record(frozen=True)
class RemovedApi:
    owner: str  # the module, class or function the name was asked of, as its __name__ says
    name: str  # the attribute or keyword argument
    advice: str  # when JAX removed it, and what to write instead


REMOVED: tuple[RemovedApi, ...] = (
    RemovedApi("MemorySpace", "ANY", (
        "`pltpu.MemorySpace.ANY` was deprecated in JAX 0.9 (jax-ml/jax 7b63d9d3, \"Deprecated "
        "`pltpu.ANY` in favor of `pl.ANY`\") and removed in JAX 0.10.0: write `pl.ANY`"
    )),
    RemovedApi("jax.experimental.pallas.tpu", "ANY", (
        "`pltpu.ANY` was deprecated in JAX 0.9 (jax-ml/jax 7b63d9d3) and removed in JAX 0.10.0: "
        "write `pl.ANY`"
    )),
    RemovedApi("emit_pipeline", "should_accumulate_out", (
        "`emit_pipeline(should_accumulate_out=...)` was removed in JAX 0.10.0 (jax-ml/jax "
        "79c328ee, \"Get rid of old pallas emit_pipeline features that no one uses\"): drop it "
        "where it was False (the default); where it was True, pass the output ref as an input "
        "too and add to it in the body"
    )),
    RemovedApi("pallas_call", "backend", (
        "`pl.pallas_call(backend=...)` was removed in JAX 0.9.1 (jax-ml/jax 62816fe5, \"`pallas_call` "
        "no longer accepts `backend=`\"): drop it; `compiler_params=` picks the backend "
        "(`pltpu.CompilerParams()` for Mosaic TPU)"
    )),
    RemovedApi("jax.experimental.pallas.tpu", "TPUMemorySpace", (
        "`pltpu.TPUMemorySpace` was renamed `pltpu.MemorySpace` in JAX 0.6.2 (jax-ml/jax d0d08156) and "
        "the old name removed in JAX 0.7.2 (f1960a81): write `pltpu.MemorySpace` (`pl.ANY` for ANY)"
    )),
    RemovedApi("jax.experimental.pallas.tpu", "TPUCompilerParams", (
        "`pltpu.TPUCompilerParams` was renamed `pltpu.CompilerParams` in JAX 0.6.2 (jax-ml/jax "
        "d0d08156) and the old name removed in JAX 0.7.2 (f1960a81): write `pltpu.CompilerParams`"
    )),
)

# Names a newer JAX added that a kernel written for it uses: the installed JAX lacks them only
# when it is older, so the advice is what that older JAX spells instead (docs/jax-versions.md).
ADDED_LATER: tuple[RemovedApi, ...] = (
    RemovedApi("jax.experimental.pallas.tpu", "TensorCoreMesh", (
        "`pltpu.TensorCoreMesh` was added in JAX 0.11.0 (jax-ml/jax ac4c87f5, \"Move tensorcore mesh "
        "to pltpu.TensorCoreMesh\"); with an older JAX write `pltpu.create_tensorcore_mesh(axis_name, "
        "num_cores=...)`"
    )),
)

_UNEXPECTED_KEYWORD = re.compile(r"(\w+)\(\) got an unexpected keyword argument '(\w+)'")


def removed_api(e: BaseException) -> RemovedApi | None:
    """The removal the script's failure is about, if it is one of those known."""
    if isinstance(e, AttributeError):
        owner = getattr(e, "obj", None)
        key = (getattr(owner, "__name__", None), e.name)
    elif isinstance(e, TypeError) and (found := _UNEXPECTED_KEYWORD.search(str(e))):
        key = (found.group(1), found.group(2))
    else:
        return None
    return next((api for api in REMOVED + ADDED_LATER if (api.owner, api.name) == key), None)
