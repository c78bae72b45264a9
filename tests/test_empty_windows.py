"""An empty window (a 0 in its sizes) touches no memory: the reduction must not order it.

The pattern is tpu-inference's fused MoE (`gmm_fused_rs_nodedup.py`, the row-by-row
direct write): for every finished row a device starts a remote copy of `should_send` rows
to the row's owner and a local copy of `should_local` rows into its own output, one of the
two empty. Empty windows of several devices then land on one row of one device's output;
as a memory cell they made every device's copy starts dependent, and the fixed kernel at 4
devices ran out of 600 s (738,452 states) where it now takes 5,607.
"""

from semcheck import ir
from semcheck.engines.explicit import search as explicit
from semcheck.engines.options import ExplicitOptions
from semcheck.semantics import System

_ROW = 4  # bytes in a row of `out`, in the protocol's DMA unit


def _row_scatter(devices: int, real_rows_collide: bool = False) -> ir.Protocol:
    """Device d sends its first row to its right neighbour's `out` (row 2d) and copies its
    second into its own (row 2d + 1); each copy's other side is a 0-row copy at row 0, of
    its own `out` and of the neighbour's (as the kernel's `should_send` / `should_local`
    pair). Every device then waits for what it sent, copied and received, and reads `out`.
    `real_rows_collide`: device d's local row is row 2(d - 1), where its left neighbour's
    row lands: a real race."""
    line = iter(range(1, 1000))

    def loc() -> ir.Loc:
        return ir.Loc("rows.py", next(line))

    def program(d: int) -> tuple[ir.Instr, ...]:
        right = (d + 1) % devices
        mine = 2 * ((d - 1) % devices) if real_rows_collide else 2 * d + 1
        send, recv, local = ir.SemRef("send"), ir.SemRef("recv"), ir.SemRef("local")
        return (
            ir.DmaStart(loc(), ir.Region("src", (0,), (1,)), ir.Region("out", (2 * d,), (1,)), recv, send, _ROW, right),
            ir.DmaStart(loc(), ir.Region("src", (0,), (0,)), ir.Region("out", (0,), (0,)), local, None, 0),
            ir.DmaStart(loc(), ir.Region("src", (1,), (1,)), ir.Region("out", (mine,), (1,)), local, None, _ROW),
            ir.DmaStart(loc(), ir.Region("src", (1,), (0,)), ir.Region("out", (0,), (0,)), recv, send, 0, right),
            ir.DmaWait(loc(), send, _ROW, ir.DmaSide.SEND),
            ir.DmaWait(loc(), local, _ROW),
            ir.DmaWait(loc(), recv, _ROW),
            ir.Load(loc(), ir.Region("out")),
        )

    return ir.Protocol(
        name="row_scatter", backend=ir.Backend.TPU, devices=devices, cores=1,
        semaphores=(ir.SemDecl("send", ir.SemKind.DMA), ir.SemDecl("recv", ir.SemKind.DMA),
                    ir.SemDecl("local", ir.SemKind.DMA)),
        buffers=(ir.BufferDecl("src", (2,)), ir.BufferDecl("out", (2 * devices,))),
        threads=tuple(ir.Thread(d, 0, program(d)) for d in range(devices)),
    )


def _explore(protocol: ir.Protocol, reduce: bool = True):
    found = explicit.explore(System(protocol), ExplicitOptions(reduce=reduce, symmetry=False))
    assert found.exhausted is None
    return found


def test_empty_windows_name_no_memory():
    system = System(_row_scatter(3))
    body = system.bodies[0]
    empty_local, real_local = body[1], body[2]
    assert system.touches_nothing(empty_local.dst) and system.touches_nothing(empty_local.src)
    assert not system.touches_nothing(real_local.dst)
    assert system.cell_candidates(0, empty_local.dst) == (frozenset(), frozenset())
    assert system.cell_candidates(0, real_local.dst)[0]


def test_empty_windows_of_several_devices_do_not_order_their_copies():
    """Safe, and the reduced search grows by 11 states a device (the unreduced one: 1,085
    states at 2 devices, 35,739 at 3). Before, the empty windows at row 0 of each `out`
    made the devices' copies dependent: 43, 95 and 168 states at 2, 3 and 4."""
    full = _explore(_row_scatter(3), reduce=False)
    assert not full.findings
    assert [_explore(_row_scatter(n)).states for n in (2, 3, 4)] == [23, 34, 45]
    assert not _explore(_row_scatter(4)).findings


def test_a_real_row_that_collides_is_still_a_race():
    """Empty windows name no memory; a non-empty window on a row another copy writes is
    still found, as the unreduced search finds it."""
    protocol = _row_scatter(3, real_rows_collide=True)
    full = _explore(protocol, reduce=False)
    reduced = _explore(protocol)
    assert {key[0].value for key in full.findings} == {"data_race"}
    assert set(reduced.findings) == set(full.findings)
