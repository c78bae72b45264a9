"""Helpers for in-process lowering tests: run a per-device kernel call under shard_map over
a mesh of fake CPU devices, and capture its Protocols (or check it with semcheck.verify)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

from semcheck import ir
from semcheck.frontends.capture import capture_function, lower_captures


def mesh(shape=(2,), axes=("x",)) -> Mesh:
    n = int(np.prod(shape))
    devices = np.array(jax.devices()[:n]).reshape(shape)
    return Mesh(devices, axes, axis_types=(AxisType.Auto,) * len(axes))


def sharded(per_device, m: Mesh, rows: int = 8):
    """(function, example input): per_device(block) under shard_map over every mesh axis."""
    spec = P(tuple(m.axis_names))
    fn = jax.shard_map(per_device, mesh=m, in_specs=spec, out_specs=spec, check_vma=False)
    return fn, jnp.ones((m.size * rows, 128), jnp.float32)


def hbm_call(kernel, *, scratch=(), compiler_params=None, **kw):
    """per_device(block) running `kernel(x_ref, o_ref, *scratch)` as a pallas_call with x and
    o in HBM (`pl.ANY`)."""
    from jax.experimental import pallas as pl

    def per_device(block):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(memory_space=pl.ANY),
            scratch_shapes=list(scratch),
            compiler_params=compiler_params,
            **kw,
        )(block)

    return per_device


def protocols(per_device, m: Mesh, rows: int = 8, **options) -> list[ir.Protocol]:
    fn, x = sharded(per_device, m, rows)
    found, errors = lower_captures(capture_function(fn, x), **options)
    assert not errors, errors
    return found


def instrs(protocol: ir.Protocol, kind, device: int = 0, core: int = 0) -> list:
    [thread] = [t for t in protocol.threads if (t.device, t.core) == (device, core)]
    return [i for i in thread.body if isinstance(i, kind)]


def line_of(fn_source_file: str, text: str) -> int:
    with open(fn_source_file, encoding="utf-8") as f:
        [number] = [n for n, line in enumerate(f, start=1) if text in line and "line_of(" not in line]
    return number
