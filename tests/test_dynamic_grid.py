"""A pallas_call whose grid extent is a run-time value (`grid=(blocks[0],)`, as tpu-inference's
ragged paged attention for head_dim 64 sizes its grid by the number of sequences): checked for
the extent the script passed, with a note saying so; an error naming why where that extent
cannot be used (the kernel only lowered, or different extents on different devices)."""

from __future__ import annotations

from semcheck.api import verify_path
from tests.tpu_support import example_line, results

SAFE, _ = example_line("dynamic_grid_double_buffer.py", "grid=(blocks[0],)")
FIXED_BOUND, PREFETCH = example_line("dynamic_grid_double_buffer_fixed_bound.py", "copy(i + 1, 1 - slot).start()")


def test_the_grid_is_the_extent_the_script_passed():
    [r] = results(SAFE, 2)
    assert r.verdict.value == "safe", r.error or [v.message for v in r.violations]
    assert r.stats.states == 42
    [note] = [n for n in r.notes if "known only at run time" in n]
    assert note.startswith("the grid (3,) has dimensions known only at run time (0)")


def test_a_prefetch_bounded_by_the_capacity_leaves_a_copy_when_fewer_blocks_are_passed():
    [r] = results(FIXED_BOUND, 2)
    assert r.verdict.value == "violation"
    assert {v.kind for v in r.errors} == {"semaphore_leftover"}
    assert {v.location.line for v in r.errors} == {PREFETCH}


def _variant(tmp_path, main: str) -> str:
    with open(SAFE, encoding="utf-8") as f:
        source = f.read()
    source = source[:source.index('if __name__ == "__main__":')] + main
    path = tmp_path / "variant.py"
    path.write_text(source)
    return str(path)


def test_a_kernel_only_lowered_has_no_extent_to_check(tmp_path):
    path = _variant(tmp_path, """if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * MAX_BLOCKS * BLOCK[0], BLOCK[1]), jnp.float32)
    blocks = jnp.array([BLOCKS_PASSED], jnp.int32)
    jax.jit(lambda x, b: scale(x, b, mesh)).lower(x, blocks)
""")
    [r] = verify_path(path, [2])
    assert r.verdict.value == "error"
    assert "the grid (DynamicGridDim,) has dimensions known only at run time (0)" in r.error
    assert "the kernel was traced but not run" in r.error


def test_different_extents_on_different_devices_are_an_error(tmp_path):
    path = _variant(tmp_path, """def per_device_blocks(x, blocks, mesh):
    def per_device(block, blocks):
        return pl.pallas_call(
            double_buffer_kernel,
            grid=(blocks[0],),
            out_shape=jax.ShapeDtypeStruct(block.shape, block.dtype),
            in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec(BLOCK, lambda i: (i, 0)),
            scratch_shapes=[pltpu.VMEM((2, *BLOCK), jnp.float32), pltpu.SemaphoreType.DMA((2,))],
        )(block)

    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x"),
                                 check_vma=False))(x, blocks)


if __name__ == "__main__":
    mesh = Mesh(np.array(jax.devices()), ("x",), axis_types=(AxisType.Auto,))
    x = jnp.ones((mesh.size * MAX_BLOCKS * BLOCK[0], BLOCK[1]), jnp.float32)
    jax.block_until_ready(per_device_blocks(x, jnp.arange(2, 2 + mesh.size, dtype=jnp.int32), mesh))
""")
    [r] = verify_path(path, [2])
    assert r.verdict.value == "error"
    assert "the devices were passed different extents [(2,), (3,)]" in r.error
