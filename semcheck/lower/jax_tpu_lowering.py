"""JAX's own Pallas TPU lowering as a check: does a captured TPU kernel build for a TPU?

A kernel can trace, run on CPU devices and satisfy every synchronization property, and still
not build for a TPU: Pallas TPU lowering implements only some primitives (an array value
indexed with a traced index is a `dynamic_slice`, which it does not). JAX lowers for the TPU
platform on a CPU machine too, so semcheck asks it: the captured kernel is bound again
inside a `shard_map` over a mesh of the same axes and lowered with
`jax.jit(f).trace(*avals).lower(lowering_platforms=("tpu",))`, which runs JAX's Pallas TPU
lowering (jaxpr -> Mosaic MLIR, `jax/_src/pallas/mosaic/lowering.py`) and the checks of its
custom call (`jax/_src/tpu_custom_call.py`). What it rejects is a `not_lowerable` error at
the line JAX's error points at. Mosaic's own compiler (libtpu) does not run on a CPU, so
what only it rejects (e.g. a constant device id outside the mesh) is not found here.

The outcome travels in the Protocol (`ir.Protocol.findings`, or a note when the lowering
could not be asked), so the capture cache keeps it with the capture. A kernel that semcheck
cannot lower at all (a LoadError before any protocol) is not asked: its error stands alone.
"""

from __future__ import annotations

import os
import re
import traceback
from typing import Iterator

from semcheck import ir
from semcheck.records import record

# Where JAX's TPU lowering lives: an exception raised through these is the lowering's
# verdict on the kernel, anything else a failure to ask it (then the note says so).
_LOWERING_FILES = tuple(os.path.join("jax", *parts) for parts in (
    ("_src", "pallas", "mosaic", "pallas_call_registration.py"),
    ("_src", "pallas", "mosaic", "lowering.py"),
    ("_src", "tpu_custom_call.py"),
    ("experimental", "mosaic", ""),
))
# The file of the loop that lowers a kernel's jaxpr one equation (`eqn`) at a time.
_LOWERING_LOOP = _LOWERING_FILES[1]

# What to do about a rejection, by the words of JAX's message (the first that matches).
ADVICE: tuple[tuple[str, str], ...] = (
    ("dynamic_slice", (
        "an array value is indexed with a traced index (a table built in the kernel, read at "
        "axis_index or a loop counter): index with scalars read from SMEM (a scalar-prefetch "
        "operand or an SMEM scratch ref) instead, or build the value from iotas "
        "(lax.broadcasted_iota, jnp.where, a sum) so that nothing indexes it"
    )),
    ("Non-decrementing wait", (
        "poll with pl.semaphore_read in a loop, then take what you saw with one ordinary wait"
    )),
    ("collective_id", (
        "set collective_id exactly when the kernel uses pltpu.get_barrier_semaphore (or pass "
        "allow_collective_id_without_custom_barrier=True)"
    )),
    ("only allowed on VMEM and SMEM", (
        "copy the HBM ref into VMEM (a scratch buffer) with a DMA first (pltpu.sync_copy or "
        "make_async_copy), or give the operand a VMEM BlockSpec"
    )),
    ("Strided slices of references", (
        "put the stride in the load's or store's own index (ref[pl.ds(start, n, stride=s)]), "
        "not in an .at[...] view: Mosaic makes each view a tpu.memref_slice, which has no stride"
    )),
    ("Unimplemented primitive", (
        "rewrite the operation JAX names with primitives Pallas TPU lowers (see the Pallas TPU "
        "docs' list of supported operations)"
    )),
)
GENERIC_ADVICE = "rewrite the construct JAX's message names in a form Pallas TPU lowers"


@record(frozen=True)
class TpuLowering:
    """JAX's answer for one kernel: `rejected` (its error, the user's line it points at, or
    None), or `unasked` (why semcheck could not run the lowering), or neither: it lowers."""

    rejected: str | None = None
    loc: ir.Loc | None = None
    unasked: str | None = None


def lower_for_tpu(capture) -> TpuLowering:
    """Run JAX's Pallas TPU lowering on the captured kernel (a `KernelCapture` of a TPU
    pallas_call or mpmd_map, with the avals of its operands)."""
    import jax

    if not capture.in_avals and capture.num_operands:
        return TpuLowering(unasked="the capture has no operand avals")
    try:
        fn, avals = _rebound(capture)
    except Exception as e:  # noqa: BLE001 - building the call is semcheck's side: say so, never fail the check
        return TpuLowering(unasked=f"{type(e).__name__}: {_first_line(e)}")
    from semcheck.lower.tpu_hardware import tpu_generation_for_cpu

    try:
        with tpu_generation_for_cpu():  # as while capturing: a TPU v6e where JAX asks
            jax.jit(fn).trace(*avals).lower(lowering_platforms=("tpu",))
    except Exception as e:  # noqa: BLE001 - JAX's verdict, or a failure to ask it
        if not _raised_by_lowering(e):
            return TpuLowering(unasked=f"{type(e).__name__}: {_first_line(e)}")
        return TpuLowering(rejected=f"{type(e).__name__}: {_first_line(e)}", loc=_user_line(e))
    return TpuLowering()


def _rebound(capture):
    """A function that binds the captured primitive as the script did (inside a shard_map
    over a mesh with the kernel's axes, on the first devices of this process) and the
    operand avals to trace it at (per-device shapes, replicated)."""
    import jax
    import numpy as np
    from semcheck.jax_compat import jax_internal

    mpmd, pallas_call = jax_internal("mpmd"), jax_internal("pallas_call")
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    primitive = {"pallas_call": pallas_call.pallas_call_p, "mpmd_map": mpmd.mpmd_map_p}[capture.primitive]
    params = dict(capture.params)
    if params.get("interpret"):  # a kernel run in interpret mode here is still meant for a TPU
        params["interpret"] = False

    def call(*operands):
        return primitive.bind(*operands, **params)

    avals = [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) for a in capture.in_avals]
    mesh = capture.mesh
    if not mesh.axis_names:
        return call, avals
    devices = np.array(jax.devices()[:mesh.size]).reshape(mesh.axis_sizes)
    fn = jax.shard_map(call, mesh=Mesh(devices, mesh.axis_names), in_specs=tuple(P() for _ in avals),
                       out_specs=P(), check_vma=False)
    return fn, avals


def _raised_by_lowering(e: BaseException) -> bool:
    frames = traceback.extract_tb(e.__traceback__)
    return any(marker in frame.filename for frame in frames for marker in _LOWERING_FILES)


def _user_line(e: BaseException) -> ir.Loc | None:
    """The user's line of the jaxpr equation that failed to lower, or else the innermost line
    of the user's code in the error or what caused it: JAX chains the traceback of the
    operation that failed to lower (JaxStackTraceBeforeTransformation), but an operation
    bound inside one of JAX's helpers (the DMA of `pltpu.sync_copy`, inside its run_scoped)
    has no user frame there, and the error's own frames reach only the kernel's def line."""
    from semcheck.lower.source import is_user_file

    chain = list(_chain(e))
    equation = _equation_line(chain)
    if equation is not None:
        return equation
    for error in chain:
        loc = None
        for frame in traceback.extract_tb(error.__traceback__):
            if is_user_file(frame.filename):
                loc = ir.Loc(os.path.abspath(frame.filename), frame.lineno or 0)
        if loc is not None:
            return loc
    return None


def _chain(e: BaseException) -> Iterator[BaseException]:
    """The error and those it was raised from or during, outermost first."""
    seen: set[int] = set()
    error: BaseException | None = e
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _equation_line(chain: list[BaseException]) -> ir.Loc | None:
    """The user's line of the innermost equation being lowered when the error was raised
    that has one: the `eqn` of the frames of JAX's Pallas TPU lowering loop in the
    traceback, its source_info read with JAX's source_info_util."""
    from semcheck.jax_compat import jax_internal
    from semcheck.lower.source import is_user_file

    source_info_util = jax_internal("source_info_util")

    loc = None
    for error in chain:
        tb = error.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if frame.f_code.co_filename.endswith(_LOWERING_LOOP):
                source_info = getattr(frame.f_locals.get("eqn"), "source_info", None)
                user = next((f for f in source_info_util.user_frames(getattr(source_info, "traceback", None))
                             if is_user_file(f.file_name)), None)
                if user is not None:
                    loc = ir.Loc(os.path.abspath(user.file_name), user.start_line)
            tb = tb.tb_next
    return loc


def _first_line(e: BaseException) -> str:
    """The first line of JAX's message, without its request to file an issue."""
    lines = str(e).strip().splitlines()
    return re.sub(r"\s*Please file an issue at \S+", "", lines[0]) if lines else ""


def advice(message: str) -> str:
    return next((text for words, text in ADVICE if words in message), GENERIC_ADVICE)


def with_outcome(protocol: ir.Protocol, outcome: TpuLowering, kernel_loc: ir.Loc) -> ir.Protocol:
    """`protocol` with JAX's answer: a `not_lowerable` error, or a note that it was not asked."""
    import dataclasses

    import jax

    from semcheck.kinds import Kind

    if outcome.unasked is not None:
        note = (f"JAX's Pallas TPU lowering could not be run on this kernel on the CPU ({outcome.unasked}): "
                "whether it builds for a TPU was not checked")
        return dataclasses.replace(protocol, notes=protocol.notes + (note,))
    if outcome.rejected is None:
        return protocol
    loc = outcome.loc or kernel_loc
    said = outcome.rejected if outcome.rejected.endswith((".", "!", "?")) else outcome.rejected + "."
    found = ir.LoweringFinding(
        Kind.NOT_LOWERABLE, loc,
        f"not lowerable: JAX {jax.__version__}'s own Pallas TPU lowering (run here on the CPU for "
        f"the TPU platform) rejects the kernel at {loc}: {said} It does not build for "
        "a TPU as written; semcheck checked its protocol anyway",
        hint=advice(outcome.rejected),
    )
    if found in protocol.findings:
        return protocol
    return dataclasses.replace(protocol, findings=protocol.findings + (found,))
