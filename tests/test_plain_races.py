"""Plain loads and stores of different threads on memory they share (GPU global and shared
memory) are compared with each other, not only with copies in flight: two conflicting
accesses that are enabled in the same state are a `data_race`, in both engines."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semcheck import ir
from semcheck.api import check_protocol
from semcheck.ir import Scope
from semcheck.model import ProtocolBuilder
from semcheck.semantics import System


def exchange(wait: bool, blocks: int = 2) -> ir.Protocol:
    """Each block stores its row of one GMEM buffer, signals a launch-wide semaphore, waits
    (or not) until every block has signalled, then loads the next block's row."""
    p = ProtocolBuilder("exchange", devices=1, cores=blocks, backend="gpu")
    rows = p.buffer("rows", (blocks, 128), space="gmem", scope=Scope.DEVICE)
    done = p.global_semaphore("done")
    for b in range(blocks):
        t = p.thread(0, b)
        t.store(rows.region(b, size=(1,)))
        t.signal(done, 1)
        if wait:
            t.wait(done, blocks, decrement=False)
        t.load(rows.region((b + 1) % blocks, size=(1,)))
    return p.build()


def race_keys(result) -> set:
    return {frozenset([v.location.line] + [r.line for r in v.related]) for v in result.violations if v.kind == "data_race"}


def test_a_barrier_between_the_stores_and_the_loads_orders_them():
    for reduce, states in ((True, 9), (False, 17)):
        result = check_protocol(exchange(wait=True), engine="explicit", reduce=reduce)
        assert (result.verdict.value, result.stats.states) == ("safe", states)
    assert check_protocol(exchange(wait=True), engine="z3").verdict.value == "safe"


def test_without_the_wait_a_load_meets_the_other_blocks_store_in_both_engines():
    protocol = exchange(wait=False)
    store, load = (i.loc.line for i in protocol.threads[0].body if isinstance(i, (ir.Load, ir.Store)))
    found = []
    for options in ({"engine": "explicit"}, {"engine": "explicit", "reduce": False}, {"engine": "z3"}):
        result = check_protocol(protocol, **options)
        assert result.verdict.value == "violation", options
        found.append(race_keys(result))
    assert found[0] == found[1] == found[2] == {frozenset((store, load))}
    [violation] = check_protocol(protocol, engine="explicit").violations
    assert "nothing orders the two" in violation.message and "another thread may" in violation.message


def test_only_memory_that_several_threads_access_directly_is_compared():
    """A TPU core's VMEM is its own (one instance per core): two cores storing "the same"
    scratch buffer touch different memory."""
    p = ProtocolBuilder("private", devices=1, cores=2, backend="tpu")
    scratch = p.buffer("scratch", (2, 128), space="vmem")
    shared = p.buffer("hbm", (2, 128), space="any", scope=Scope.DEVICE)
    for core in range(2):
        t = p.thread(0, core)
        t.store(scratch.region(0, size=(1,)))
        t.load(shared.region(core, size=(1,)))
    system = System(p.build())
    [(bid, sharers)] = system.plain_sharers.items()
    assert system.buffer_instances[bid].decl.name == "hbm" and sharers == (0, 1)
    assert list(system.plain_racing_pairs()) == []  # both only read it, at disjoint rows
    assert check_protocol(p.build(), engine="explicit").verdict.value == "safe"


def test_two_plain_races_sharing_a_line_are_both_found_by_the_agreement_helper():
    """A case hypothesis found: device 2 stores into the device an input names, device 1 into
    device 2 and device 0 into itself, so line 11 races with line 10 (input 2) and with line
    6 (input 3). The default explicit search stops watching line 11 after the first report;
    the agreement helper must see that a second plain pair was possible and search again."""
    from tests.agreement import assert_engines_agree

    loc = lambda line: ir.Loc("random.py", line)  # noqa: E731
    mem = ir.Region("mem", (0,), (1,))
    threads = (
        ir.Thread(0, 0, (ir.Store(loc(6), mem),)),
        ir.Thread(1, 0, (ir.Store(loc(10), mem, device=2),)),
        ir.Thread(2, 0, (ir.Store(loc(11), mem, device=ir.BinOp("mod", ir.Reg("n"), 3)),)),
    )
    protocol = ir.Protocol(
        name="two_pairs", backend=ir.Backend.GPU, devices=3, cores=1, threads=threads,
        buffers=(ir.BufferDecl("mem", (3, 4), 4, "any", Scope.CORE, ir.Loc("random.py", 1)),),
        inputs=(ir.Input("n", 1, 3, loc(1)),), loc=loc(1),
    )
    by_search, _by_solver = assert_engines_agree(protocol)
    assert {key[1] for key in by_search.findings} == {frozenset((loc(10), loc(11))), frozenset((loc(6), loc(11)))}


def _racing_pairs_by_comparing_every_pair(system: System) -> list[tuple[int, int, int, int]]:
    """The definition `plain_racing_pairs` indexes: every two sites of a shared buffer, of
    different threads and not both atomic, one writing a cell the other touches or overlaps."""
    import itertools

    from semcheck.semantics import instructions

    pairs: list[tuple[int, int, int, int]] = []
    for bid, sharers in system.plain_sharers.items():
        sites = [(t, pc) for t in sharers for pc, instr in enumerate(system.bodies[t])
                 if isinstance(instr, (ir.Load, ir.Store)) and bid in system.region_instances(t, instr.region, instr.device)]
        for (t, pc), (u, upc) in itertools.combinations(sites, 2):
            a, b = system.footprints[t][pc], system.footprints[u][upc]
            if (t == u or (t, pc, u, upc) in pairs
                    or instructions.both_atomic(system.bodies[t][pc], system.bodies[u][upc])):
                continue
            if a.mwrite & b.mnear or b.mwrite & a.mnear:
                pairs.append((t, pc, u, upc))
    return pairs


@st.composite
def shared_buffer_protocols(draw) -> ir.Protocol:
    """Blocks of one or two GPU devices loading, storing and atomically adding to rows,
    row halves, empty windows and the whole of a GMEM buffer, their own device's or a peer's."""
    devices, blocks = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    p = ProtocolBuilder("shared", devices=devices, cores=blocks, backend="gpu")
    rows = p.buffer("rows", (4, 4), space="gmem", scope=Scope.DEVICE)
    for d in range(devices):
        for b in range(blocks):
            t = p.thread(d, b)
            for _ in range(draw(st.integers(0, 5))):
                r, shape = draw(st.integers(0, 3)), draw(st.sampled_from(["whole", "row", "two rows", "half", "empty"]))
                region = {"whole": rows.region(), "row": rows.region(r), "two rows": rows.region(r // 2 * 2, size=(2, 4)),
                          "half": rows.region(r, draw(st.sampled_from([0, 2])), size=(1, 2)),
                          "empty": rows.region(r, 0, size=(1, 0))}[shape]
                device = draw(st.sampled_from([None] + list(range(devices))))
                kind = draw(st.sampled_from(["load", "store", "atomic"]))
                if kind == "load":
                    t.load(region, device)
                else:
                    t.store(region, device, atomic=kind == "atomic")
    return p.build()


def test_the_cell_index_finds_the_pairs_that_comparing_every_pair_finds():
    """`plain_racing_pairs` indexes the sites by cell instead of comparing every pair (JAX's
    GPU all-reduce test has 2,048 stores into one buffer): the same pairs in the same order,
    on random loads, stores and atomics of a shared buffer, local and remote, and on one with
    many disjoint rows and a whole-buffer access that overlaps them all."""
    racing = []

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(shared_buffer_protocols())
    def check(protocol):
        system = System(protocol)
        expected = _racing_pairs_by_comparing_every_pair(system)
        assert list(system.plain_racing_pairs()) == expected
        racing.append(len(expected))

    check()
    assert sum(n > 0 for n in racing) >= 100 and max(racing) >= 10  # races drawn, not only disjoint accesses

    p = ProtocolBuilder("rows", devices=1, cores=3, backend="gpu")
    rows = p.buffer("rows", (64, 128), space="gmem", scope=Scope.DEVICE)
    for b in range(2):
        t = p.thread(0, b)
        for r in range(b, 64, 2):
            t.store(rows.region(r, size=(1,)))
    p.thread(0, 2).load(rows.region(0, size=(64,)))
    system = System(p.build())
    pairs = list(system.plain_racing_pairs())
    assert pairs == _racing_pairs_by_comparing_every_pair(system)
    assert len(pairs) == 64 and {(t, u) for t, _, u, _ in pairs} == {(0, 2), (1, 2)}
