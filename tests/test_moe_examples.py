"""The fused MoE example's synchronization values are the ones its data gives.

tests/test_tpu_examples.py holds every example in examples/tpu/ (the MoE ones included) to
its declared verdict. Here: the values semcheck evaluated from the kernel's data while
lowering moe_dispatch_combine.py (the routing table top-k computes from the script's
gating logits, and the counts all-gathered by remote DMA) are exactly those a plain-JAX
computation of the same routing gives, on every device. A verdict built on other values
would be about another program.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from tests.tpu_support import EXAMPLES

PATH = os.path.join(EXAMPLES, "moe_dispatch_combine.py")
DEVICES = 2


def _line_of(text: str) -> int:
    with open(PATH, encoding="utf-8") as f:
        [line] = [n for n, source in enumerate(f, start=1) if text in source]
    return line


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("moe_dispatch_combine", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines the kernel; the script part is under __main__
    return module


@pytest.fixture(scope="module")
def routes(example):
    """(device, token, choice) -> expert, as the script's own inputs route them."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    experts = DEVICES * example.LOCAL_EXPERTS
    gating = jax.random.normal(jax.random.key(0), (DEVICES * example.TOKENS, experts), jnp.float32)
    return np.asarray(jax.vmap(example.top_k_routes)(gating.reshape(DEVICES, example.TOKENS, experts)))


@pytest.fixture(scope="module")
def protocol():
    from semcheck.frontends.capture_cache import capture

    [protocol] = capture(PATH, DEVICES).protocols
    return protocol


def _values(protocol, line: int, device: int, what: str) -> list[int]:
    return [u.value for u in protocol.data_uses if u.loc.line == line and u.device == device and u.what.startswith(what)]


def test_the_scatter_semaphore_of_each_row_is_its_experts_local_index(example, routes, protocol):
    line = _line_of("send_sems.at[local_expert], recv_sems.at[local_expert], device_id=(target,),") + 1  # its .start()
    for device in range(DEVICES):
        expected = [int(e) % example.LOCAL_EXPERTS for e in routes[device].reshape(-1)]
        assert _values(protocol, line, device, "the DMA's receive semaphore index") == expected
        uses = [u for u in protocol.data_uses if u.loc.line == line and u.device == device]
        assert {name for u in uses for name in u.script_inputs} == {"gating_ref"}


def test_each_experts_aggregate_wait_is_the_all_gathered_count_of_its_rows(example, routes, protocol):
    line = _line_of("pltpu.make_async_copy(rows, rows, recv_sems.at[le]).wait()")
    for device in range(DEVICES):
        expected = [int((routes == device * example.LOCAL_EXPERTS + le).sum()) for le in range(example.LOCAL_EXPERTS)]
        assert _values(protocol, line, device, "the size of the waited DMA") == expected
