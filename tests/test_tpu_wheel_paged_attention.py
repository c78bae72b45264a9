"""JAX's paged-attention kernels in the jax wheel (nobody on the team wrote them), checked as
a user would: a driver that builds the inputs as JAX's own tests do (small sizes) and calls
the op once per device under shard_map.

Both kernels keep pipeline state in scalar prefetch and overwrite it: paged attention its
`init_flag` and `buffer_index` (passed as 1 and 0), ragged paged attention its
`(seq_idx, buf_idx)` (passed as the constant `(0, 0)`), and both walk sequence tables read
from scalar prefetch (`lengths`, `cu_q_lens`). Checked for the values the script passes,
with the kernels' own stores followed from step to step, both are safe. Read as any int32
(semcheck's rule before issue 26), paged attention was inconclusive (z3 ran out of memory
over 131 inputs) and ragged paged attention got `invalid_semaphore_index` at index -1 and
then stopped at its `while` over `cu_q_lens`.

The race that jax-ml/jax 0e690c1a88 ("Use additional semaphores to avoid data races in TPU
paged_attention_kernel") fixed is rebuilt here from the wheel's source at test time: before
it, every copy of k and v in both slots signalled one DMA semaphore, so a wait for k's
pages could be satisfied by v's or by the next block's copy. It must be an error at the
copy's start and at the load of the pages, never a warning.
"""

from __future__ import annotations

import inspect
import os

import pytest

from semcheck.api import verify_path

PAGED_DRIVER = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

{import_line}

PAGE, MAX_LEN, BLOCK = 16, 64, 32
SEQ_LENS = [0, 3, 40, 64]  # an empty sequence, a partial block, a block and a half, full
KV_HEADS, Q_HEADS, HEAD_DIM = 1, 8, 128

mesh = Mesh(np.array(jax.devices()), ("x",))
n = mesh.size
pages_per_seq = MAX_LEN // PAGE
batch = len(SEQ_LENS)
total_pages = batch * pages_per_seq
k1, k2, k3, k4 = jax.random.split(jax.random.key(0), 4)
k_pages = jax.random.normal(k1, (KV_HEADS, total_pages, PAGE, HEAD_DIM), jnp.float32)
v_pages = jax.random.normal(k2, (KV_HEADS, total_pages, PAGE, HEAD_DIM), jnp.float32)
page_indices = jax.random.permutation(k3, jnp.arange(total_pages, dtype=jnp.int32)).reshape(batch, pages_per_seq)
q = jax.random.normal(k4, (batch * n, Q_HEADS, HEAD_DIM), jnp.float32)


def per_device(q, lengths, pidx, k_pages, v_pages):
    return pa.paged_attention(q, k_pages, v_pages, lengths, pidx, pages_per_compute_block=BLOCK // PAGE,
                              inline_seq_dim={inline})


f = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P("x"), P("x"), P("x"), P(), P()),
                          out_specs=P("x"), check_vma=False))
out = f(q, jnp.tile(jnp.asarray(SEQ_LENS, jnp.int32), n), jnp.tile(page_indices, (n, 1)), k_pages, v_pages)
jax.block_until_ready(out)
print("paged attention", out.shape)
"""

RAGGED_DRIVER = """\
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import ragged_paged_attention
from jax.sharding import Mesh, PartitionSpec as P

SEQ_LENS = [(1, 20), (5, 40), (3, 16)]  # (q_len, kv_len): a decode and two prefills
NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, PAGE = 8, 2, 128, 16
NUM_PAGES, MAX_TOKENS, MAX_SEQ = 16, 16, 4

cu_q_lens, kv_lens = [0], []
for q_len, kv_len in SEQ_LENS:
    cu_q_lens.append(cu_q_lens[-1] + q_len)
    kv_lens.append(kv_len)
pages_per_seq = pl.cdiv(max(kv_lens), PAGE)
k0, k1 = jax.random.split(jax.random.key(1234))
q = jax.random.normal(k0, (MAX_TOKENS, NUM_Q_HEADS, HEAD_DIM), jnp.float32)
page_cnt, page_indices, pages = 0, [], []
for kv_len in kv_lens:
    kv = jax.random.normal(k1, (kv_len, NUM_KV_HEADS * 2, HEAD_DIM), jnp.float32)
    kv = jnp.pad(kv, ((0, pl.cdiv(kv_len, PAGE) * PAGE - kv_len), (0, 0), (0, 0))).reshape(
        -1, PAGE, NUM_KV_HEADS * 2, HEAD_DIM)
    indices = page_cnt + jnp.arange(kv.shape[0], dtype=jnp.int32)
    page_indices.append(jnp.pad(indices, (0, pages_per_seq - indices.shape[0])))
    page_cnt += kv.shape[0]
    pages.append(kv)
kv_pages = jnp.concatenate(pages)
kv_pages = jnp.pad(kv_pages, ((0, NUM_PAGES - kv_pages.shape[0]), (0, 0), (0, 0), (0, 0)))
page_indices = jnp.pad(jnp.stack(page_indices), ((0, MAX_SEQ - len(SEQ_LENS)), (0, 0)))
cu = jnp.pad(jnp.array(cu_q_lens, jnp.int32), (0, MAX_SEQ + 1 - len(cu_q_lens)))
kvl = jnp.pad(jnp.array(kv_lens, jnp.int32), (0, MAX_SEQ - len(kv_lens)))
num_seqs = jnp.array([len(SEQ_LENS)], jnp.int32)


def per_device(q, kv_pages, kvl, pidx, cu, ns):
    return ragged_paged_attention(q, kv_pages, kvl, pidx, cu, ns, num_kv_pages_per_block=2, num_queries_per_block=8)


mesh = Mesh(np.array(jax.devices()), ("x",))
f = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(P(),) * 6, out_specs=P(), check_vma=False))
out = f(q, kv_pages, kvl, page_indices, cu, num_seqs)
jax.block_until_ready(out)
print("ragged paged attention", out.shape)
"""

WHEEL_IMPORT = "from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention_kernel as pa"
PAGED_PREFETCH = ("buffer_index_ref", "init_flag_ref", "lengths_ref", "page_indices_ref")


def wheel_source() -> tuple[str, str]:
    from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention_kernel

    return os.path.abspath(paged_attention_kernel.__file__), inspect.getsource(paged_attention_kernel)


def line_of(path: str, text: str) -> int:
    with open(path, encoding="utf-8") as f:
        [number] = [n for n, line in enumerate(f, start=1) if text in line]
    return number


def _driver(tmp_path, source: str, **fields) -> str:
    path = tmp_path / "driver.py"
    path.write_text(source.format(**fields))
    return str(path)


@pytest.mark.parametrize("inline, states", [(True, (217, 238)), (False, (204, 225))], ids=["inline_seq_dim", "grid"])
def test_wheel_paged_attention_is_safe_for_the_scripts_values(tmp_path, inline, states):
    """One core and the megacore split (its parallel grid dimension has one point, so the
    second core runs nothing): safe, taking every deciding value from the four prefetch
    operands, none a range."""
    results = verify_path(_driver(tmp_path, PAGED_DRIVER, import_line=WHEEL_IMPORT, inline=inline), [1])
    assert [r.verdict.value for r in results] == ["safe", "safe"], [r.violations or r.error for r in results]
    assert tuple(r.stats.states for r in results) == states
    for r in results:
        assert r.values.script == PAGED_PREFETCH and r.values.ranges == ()
        assert os.path.samefile(r.file, wheel_source()[0])


def _before_0e690c1a88(tmp_path, inline: bool = True) -> tuple[str, str]:
    """The wheel's paged attention with one DMA semaphore for every copy of k and v, as it was
    before jax-ml/jax 0e690c1a88 gave each of them one per slot."""
    _, source = wheel_source()
    for sems in ("k_sems", "v_sems"):
        site = f"{sems}.at[buffer_index],"
        assert source.count(site) == 1, f"the wheel's paged attention no longer contains {site!r}"
        source = source.replace(site, "k_sems.at[0],")
    module = tmp_path / "pa_one_semaphore.py"
    module.write_text(source)
    return str(module), _driver(tmp_path, PAGED_DRIVER, import_line="import pa_one_semaphore as pa", inline=inline)


def test_paged_attention_before_its_semaphore_fix_races_and_the_race_is_an_error(tmp_path):
    module, driver = _before_0e690c1a88(tmp_path)
    results = verify_path(driver, [1], exhaustive=True)
    start, load = line_of(module, "async_copy.start()"), line_of(module, "jax_array = self._vmem_buffer[...]")
    for r in results:
        assert r.verdict.value == "violation", r.error
        races = [v for v in r.violations if v.kind == "data_race"]
        assert races and all(v.severity == "error" for v in races), [(v.severity, v.message) for v in races]
        assert {v.location.line for v in races} == {start, load}
        assert not {v.kind for v in r.errors} - {"data_race"}
        assert r.values.script == PAGED_PREFETCH


def test_paged_attention_before_its_fix_reads_a_length_past_the_end(tmp_path):
    """The same commit (jax-ml/jax 0e690c1a88) also clamped the batch index of the length the
    kernel reads to decide whether to skip the next sequence: before it,
    `jnp.logical_and(next_b < batch_size, lengths_ref[next_b] == 0)` reads both sides, so
    after the last sequence it loads `lengths_ref[batch_size]`, one past the end of the
    scalar-prefetch operand (4 lengths here). A TPU load outside its ref is invalid_region."""
    _, source = wheel_source()
    fixed = "lengths_ref[lax.clamp(0, next_b, batch_size - 1)] == 0"
    assert source.count(fixed) == 1, f"the wheel's paged attention no longer contains {fixed!r}"
    module = tmp_path / "pa_unclamped.py"
    module.write_text(source.replace(fixed, "lengths_ref[next_b] == 0"))
    driver = _driver(tmp_path, PAGED_DRIVER, import_line="import pa_unclamped as pa", inline=True)
    read = line_of(str(module), "lengths_ref[next_b] == 0")
    for r in verify_path(driver, [1], exhaustive=True):
        assert r.verdict.value == "violation", r.error
        assert {v.kind for v in r.errors} == {"invalid_region"}, [v.message for v in r.errors]
        [v] = r.errors
        assert v.location.line == read
        assert "the load's window [4:5] lies outside lengths_ref on device 0" in v.message  # (core 0, split)
        assert v.message.endswith("of shape (4,)"), v.message


def test_wheel_ragged_paged_attention_is_safe_for_the_scripts_values(tmp_path):
    """Its wrapper passes the slot as the constant 0 (not -1, an int32 like any other), and
    its `while` loops over cu_q_lens and kv_lens run as many times as the script's tables say."""
    [result] = verify_path(_driver(tmp_path, RAGGED_DRIVER), [1])
    assert result.verdict.value == "safe", result.violations or result.error
    assert result.stats.states == 191
    assert result.values.script == ("cu_q_lens_ref", "kv_lens_ref", "num_seqs_ref", "page_indices_ref",
                                    "seq_buf_idx_ref")
    assert result.values.ranges == ()


EVERY_INPUT = [("init_flag_ref", 1, 1), ("buffer_index_ref", 0, 1), ("lengths_ref", 0, 64)]


def _for_every_input(driver: str):
    from semcheck.passes.assumptions import Assumption

    return verify_path(driver, [1], engine="z3", assume=[Assumption(*a) for a in EVERY_INPUT])


def test_paged_attention_for_every_length_and_slot(tmp_path):
    """Asked for every input instead (`--assume lengths_ref=0..64 --assume
    buffer_index_ref=0..1 --assume init_flag_ref=1`), the grid variant is still safe: the
    lengths read at a run-time batch index are exact expressions over the four inputs, and
    the stored buffer index a register of each branch. Before, that read was data semcheck
    could not know, the branch it decides an unconstrained input, and z3 found hangs and
    leftovers no run has."""
    results = _for_every_input(_driver(tmp_path, PAGED_DRIVER, import_line=WHEEL_IMPORT, inline=False))
    assert [r.verdict.value for r in results] == ["safe", "safe"], [r.violations or r.error for r in results]
    for r in results:
        assert r.values.script == ("page_indices_ref",)
        assert sorted({(i.name.split("@")[0], i.lo, i.hi, i.assumed) for i in r.values.ranges}) == [
            ("buffer_index_ref[0]", 0, 1, True), ("init_flag_ref[0]", 1, 1, True)] + [
            (f"lengths_ref[{k}]", 0, 64, True) for k in range(4)]


def test_paged_attention_before_its_semaphore_fix_races_for_every_length_and_slot(tmp_path):
    module, driver = _before_0e690c1a88(tmp_path, inline=False)
    start, load = line_of(module, "async_copy.start()"), line_of(module, "jax_array = self._vmem_buffer[...]")
    for r in _for_every_input(driver):
        assert r.verdict.value == "violation", r.error
        assert {v.kind for v in r.errors} == {"data_race"}, [v.message for v in r.errors]
        assert {v.location.line for v in r.errors} <= {start, load}
